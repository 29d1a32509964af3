// Executor: see executor.h.
#include "collectives/executor.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

namespace ciuic::collectives {

namespace {

using transport::Link;

const char* OpName(StepOp op) {
  switch (op) {
    case StepOp::kSend: return "send";
    case StepOp::kRecv: return "recv";
    case StepOp::kRecvReduce: return "recv-reduce";
    case StepOp::kRecvReduceSend: return "recv-reduce-send";
    case StepOp::kRecvCopySend: return "recv-copy-send";
    case StepOp::kCopy: return "copy";
    case StepOp::kReduce: return "reduce";
  }
  return "?";
}

struct LinkQueues {
  Link* link = nullptr;
  std::vector<int> sends;  // step indices in order
  std::vector<int> recvs;
  size_t send_head = 0;    // index into sends of the first unfinished
  size_t recv_head = 0;
};

struct StepState {
  size_t nchunks = 0;
  size_t done = 0;    // chunks completed (forwarding steps: sent)
  size_t stored = 0;  // forwarding steps: chunks received and stored in dst
  int send_link = -1;
  int recv_link = -1;
};

}  // namespace

Status Executor::Run(const Schedule& schedule, const ExecBuffers& buffers, DataType dtype,
                     ReduceOp op, const LinkSource& links,
                     std::chrono::steady_clock::time_point deadline,
                     const std::atomic<bool>* abort) {
  const size_t es = DataTypeSize(dtype);
  const std::vector<Step>& steps = schedule.steps;
  const int nsteps = static_cast<int>(steps.size());
  if (nsteps == 0) return Status::Ok();

  // Validate every range once, so the loop below can trust them.
  auto check = [&](const Range& r, int j) -> Status {
    size_t cap = 0;
    switch (r.buf) {
      case BufKind::kInput: cap = buffers.input_count; break;
      case BufKind::kOutput: cap = buffers.output_count; break;
      case BufKind::kScratch: cap = buffers.scratch_count; break;
    }
    if (r.offset > cap || r.count > cap - r.offset) {
      return InvalidArgumentError(schedule.algorithm + " step " + std::to_string(j) +
                                  ": range [" + std::to_string(r.offset) + ", +" +
                                  std::to_string(r.count) + ") outside a buffer of " +
                                  std::to_string(cap) + " elements");
    }
    return Status::Ok();
  };
  auto ptr = [&](const Range& r, size_t elem) -> char* {
    char* base = nullptr;
    switch (r.buf) {
      case BufKind::kInput: base = const_cast<char*>(static_cast<const char*>(buffers.input)); break;
      case BufKind::kOutput: base = static_cast<char*>(buffers.output); break;
      case BufKind::kScratch: base = static_cast<char*>(buffers.scratch); break;
    }
    return base + (r.offset + elem) * es;
  };

  // Links in ascending peer order (see LinkSource), and per-link queues.
  std::map<std::pair<int, int>, int> link_index;  // (peer, channel) -> queue
  for (int j = 0; j < nsteps; ++j) {
    const Step& s = steps[j];
    for (int d : s.deps) {
      if (d < 0 || d >= j) return InvalidArgumentError(schedule.algorithm + " step " + std::to_string(j) + ": bad dependency");
    }
    if (StepSends(s.op)) link_index.emplace(std::make_pair(s.send_peer, s.channel), 0);
    if (StepReceives(s.op)) link_index.emplace(std::make_pair(s.recv_peer, s.channel), 0);
  }
  std::vector<LinkQueues> queues;
  size_t chunk_elems = 0;
  for (auto& [key, idx] : link_index) {
    if (key.first < 0 || key.first >= schedule.nranks || key.first == schedule.rank) {
      return InvalidArgumentError(schedule.algorithm + ": bad peer " + std::to_string(key.first));
    }
    CIUIC_ASSIGN_OR_RETURN(Link* l, links(key.first, key.second));
    idx = static_cast<int>(queues.size());
    queues.push_back(LinkQueues{l, {}, {}, 0, 0});
    const size_t c = l->slot_size() / es;
    chunk_elems = chunk_elems == 0 ? c : std::min(chunk_elems, c);
  }
  if (queues.empty()) chunk_elems = (512u << 10) / es;  // local-only schedule
  if (chunk_elems == 0) return InvalidArgumentError("slot size smaller than one element");

  std::vector<StepState> state(nsteps);
  for (int j = 0; j < nsteps; ++j) {
    const Step& s = steps[j];
    StepState& st = state[j];
    switch (s.op) {
      case StepOp::kSend: CIUIC_RETURN_IF_ERROR(check(s.src, j)); break;
      case StepOp::kRecv:
      case StepOp::kRecvCopySend: CIUIC_RETURN_IF_ERROR(check(s.dst, j)); break;
      case StepOp::kRecvReduce:
      case StepOp::kRecvReduceSend:
      case StepOp::kCopy:
        CIUIC_RETURN_IF_ERROR(check(s.src, j));
        CIUIC_RETURN_IF_ERROR(check(s.dst, j));
        if (s.src.count != s.dst.count) return InvalidArgumentError(schedule.algorithm + " step " + std::to_string(j) + ": src and dst counts differ");
        break;
      case StepOp::kReduce:
        CIUIC_RETURN_IF_ERROR(check(s.dst, j));
        if (s.inputs.empty() || s.inputs.size() > 64) return InvalidArgumentError(schedule.algorithm + " step " + std::to_string(j) + ": 1..64 inputs");
        for (const Range& r : s.inputs) {
          CIUIC_RETURN_IF_ERROR(check(r, j));
          if (r.count != s.dst.count) return InvalidArgumentError(schedule.algorithm + " step " + std::to_string(j) + ": input count differs");
        }
        break;
    }
    const size_t count = StepCount(s);
    st.nchunks = std::max<size_t>(1, (count + chunk_elems - 1) / chunk_elems);
    if (StepSends(s.op)) {
      st.send_link = link_index[{s.send_peer, s.channel}];
      queues[st.send_link].sends.push_back(j);
    }
    if (StepReceives(s.op)) {
      st.recv_link = link_index[{s.recv_peer, s.channel}];
      queues[st.recv_link].recvs.push_back(j);
    }
  }

  int steps_left = nsteps;

  auto chunk_span = [&](const Step& s, size_t k, size_t* first, size_t* n) {
    const size_t count = StepCount(s);
    *first = k * chunk_elems;
    *n = count == 0 ? 0 : std::min(chunk_elems, count - *first);
  };

  // The receiving half of chunk k of step j (kRecv, kRecvReduce and the
  // forwarding steps): the incoming chunk is stored/reduced into dst and its
  // slot released. Returns false when the chunk has not arrived yet.
  auto try_recv = [&](int j, size_t k) -> StatusOr<bool> {
    const Step& s = steps[j];
    LinkQueues& q = queues[state[j].recv_link];
    if (q.recvs[q.recv_head] != j) return false;  // an earlier message on this link is unfinished
    size_t first, n;
    chunk_span(s, k, &first, &n);
    const size_t bytes = n * es;
    size_t got = 0;
    const void* in = q.link->PeekRecv(&got);
    if (in == nullptr) return false;
    if (got != bytes) {
      return DataLossError(schedule.algorithm + " step " + std::to_string(j) + " (" + OpName(s.op) +
                           "): rank " + std::to_string(s.recv_peer) + " sent a chunk of " +
                           std::to_string(got) + " bytes where " + std::to_string(bytes) +
                           " were expected (mismatched counts or schedules across ranks?)");
    }
    if (n > 0) {
      if (s.op == StepOp::kRecvReduce || s.op == StepOp::kRecvReduceSend) {
        const void* srcs[2] = {ptr(s.src, first), in};
        CIUIC_RETURN_IF_ERROR(reducer_.Reduce(ptr(s.dst, first), srcs, 2, n, dtype, op));
      } else {
        std::memcpy(ptr(s.dst, first), in, bytes);
      }
    }
    CIUIC_RETURN_IF_ERROR(q.link->ReleaseRecv());
    return true;
  };

  // The sending half of chunk k of step j (kSend from src; forwarding steps
  // from dst, after their receive half stored it). False when no slot.
  auto try_send = [&](int j, size_t k) -> StatusOr<bool> {
    const Step& s = steps[j];
    LinkQueues& q = queues[state[j].send_link];
    if (q.sends[q.send_head] != j) return false;  // an earlier message on this link is unfinished
    void* slot = q.link->AcquireSend();
    if (slot == nullptr) return false;
    size_t first, n;
    chunk_span(s, k, &first, &n);
    const Range& from = s.op == StepOp::kSend ? s.src : s.dst;
    if (n > 0) std::memcpy(slot, ptr(from, first), n * es);
    CIUIC_RETURN_IF_ERROR(q.link->CommitSend(n * es));
    return true;
  };

  // Local steps: chunk k of kCopy / kReduce.
  auto do_local = [&](int j, size_t k) -> Status {
    const Step& s = steps[j];
    size_t first, n;
    chunk_span(s, k, &first, &n);
    if (n == 0) return Status::Ok();
    const size_t bytes = n * es;
    if (s.op == StepOp::kCopy) {
      if (ptr(s.dst, first) != ptr(s.src, first)) std::memmove(ptr(s.dst, first), ptr(s.src, first), bytes);
      return Status::Ok();
    }
    const void* srcs[64];
    for (size_t i = 0; i < s.inputs.size(); ++i) srcs[i] = ptr(s.inputs[i], first);
    if (s.inputs.size() == 1) {
      if (srcs[0] != ptr(s.dst, first)) std::memmove(ptr(s.dst, first), srcs[0], bytes);
      return Status::Ok();
    }
    return reducer_.Reduce(ptr(s.dst, first), srcs, static_cast<int>(s.inputs.size()), n, dtype, op);
  };

  auto deps_allow = [&](int j, size_t k) {
    const Step& s = steps[j];
    for (int d : s.deps) {
      const StepState& ds = state[d];
      if (s.dep_mode == DepMode::kPerChunk) {
        // Chunk k needs chunk k of the dependency (or all of it when the
        // dependency has fewer chunks, e.g. a count-0 step).
        if (ds.done < std::min(k + 1, ds.nchunks)) return false;
      } else if (ds.done < ds.nchunks) {
        return false;
      }
    }
    return true;
  };

  auto pass = [&]() -> StatusOr<bool> {
    if (abort != nullptr && abort->load(std::memory_order_relaxed)) {
      return AbortedError(schedule.algorithm + ": communicator aborted");
    }
    bool any = false;
    for (auto& q : queues) {
      StatusOr<bool> p = q.link->Progress();
      if (!p.ok()) return p.status();
      any |= *p;
    }
    for (int j = 0; j < nsteps; ++j) {
      StepState& st = state[j];
      if (st.done == st.nchunks) continue;
      const Step& s = steps[j];
      const bool forwards = s.op == StepOp::kRecvReduceSend || s.op == StepOp::kRecvCopySend;
      if (forwards) {
        // Receive (and store) ahead of sending: the store never waits for
        // the outgoing link, which may still carry earlier messages.
        while (st.stored < st.nchunks && deps_allow(j, st.stored)) {
          CIUIC_ASSIGN_OR_RETURN(bool did, try_recv(j, st.stored));
          if (!did) break;
          any = true;
          if (++st.stored == st.nchunks) ++queues[st.recv_link].recv_head;
        }
        while (st.done < st.stored) {
          CIUIC_ASSIGN_OR_RETURN(bool did, try_send(j, st.done));
          if (!did) break;
          any = true;
          ++st.done;
        }
      } else {
        while (st.done < st.nchunks && deps_allow(j, st.done)) {
          bool did = true;
          if (s.op == StepOp::kSend) {
            CIUIC_ASSIGN_OR_RETURN(did, try_send(j, st.done));
          } else if (StepReceives(s.op)) {
            CIUIC_ASSIGN_OR_RETURN(did, try_recv(j, st.done));
          } else {
            CIUIC_RETURN_IF_ERROR(do_local(j, st.done));
          }
          if (!did) break;
          any = true;
          ++st.done;
        }
        if (st.done == st.nchunks && st.recv_link >= 0) ++queues[st.recv_link].recv_head;
      }
      if (st.done == st.nchunks) {
        --steps_left;
        if (st.send_link >= 0) ++queues[st.send_link].send_head;
      }
    }
    return any;
  };

  Status s = transport::WaitFor(
      backend_, pass,
      [&] {
        // All steps done and every send delivered (the slots may be reused
        // by the next operation as soon as the peer releases them).
        if (steps_left != 0) return false;
        for (auto& q : queues) {
          if (q.link->sends_in_flight() != 0) return false;
        }
        return true;
      },
      deadline, "collective");
  if (s.code() == StatusCode::kDeadlineExceeded) {
    // Name what was pending: the first unfinished step and its peers.
    for (int j = 0; j < nsteps; ++j) {
      if (state[j].done == state[j].nchunks) continue;
      const Step& st = steps[j];
      std::string peers;
      if (StepReceives(st.op)) peers += " from rank " + std::to_string(st.recv_peer);
      if (StepSends(st.op)) peers += " to rank " + std::to_string(st.send_peer);
      return DeadlineExceededError(schedule.algorithm + ": timed out in step " + std::to_string(j) + " (" +
                                   OpName(st.op) + peers + ", chunk " + std::to_string(state[j].done) +
                                   " of " + std::to_string(state[j].nchunks) + ")");
    }
  }
  return s;
}

}  // namespace ciuic::collectives
