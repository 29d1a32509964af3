#include "collectives/simulator.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <string>
#include <tuple>

namespace ciuic::collectives {
namespace {

struct Chunk {
  std::vector<uint8_t> data;
  size_t elems = 0;
  size_t msg_count = 0;  // elements of the whole message (checked by the receiver)
  uint64_t msg = 0;      // message index on the link
  int send_step = -1;
  size_t index = 0;  // chunk index inside the message
};

struct LinkQueue {
  int src = 0, dst = 0, channel = 0;
  std::deque<Chunk> q;
};

struct StepState {
  size_t count = 0;
  size_t nchunks = 1;
  size_t done = 0;    // chunks completely processed (for forwarding steps: sent)
  size_t stored = 0;  // forwarding steps: chunks received and stored
  int send_link = -1, recv_link = -1;
  int send_prev = -1, recv_prev = -1;  // earlier step of this rank on the same link, same direction
  uint64_t send_msg = 0, recv_msg = 0;
};

struct RankState {
  std::vector<uint8_t> mem;
  BufferBases bases;
  std::vector<StepState> steps;
  size_t left = 0;
};

bool Forwards(StepOp op) { return op == StepOp::kRecvReduceSend || op == StepOp::kRecvCopySend; }

class Sim {
 public:
  Sim(const std::vector<Schedule>& s, size_t es, const ReduceFn& reduce, const SimOptions& o)
      : sched_(s), es_(es), reduce_(reduce), opt_(o), chunk_elems_(std::max<size_t>(1, o.chunk_bytes / es)) {}

  Status Init(const std::vector<SimRankInput>& inputs) {
    const int n = static_cast<int>(sched_.size());
    ranks_.resize(n);
    std::map<std::tuple<int, int, int>, int> link_ids;
    auto link_id = [&](int src, int dst, int ch) {
      auto [it, fresh] = link_ids.emplace(std::make_tuple(src, dst, ch), static_cast<int>(links_.size()));
      if (fresh) links_.push_back(LinkQueue{src, dst, ch, {}});
      return it->second;
    };
    for (int r = 0; r < n; ++r) {
      const Schedule& s = sched_[r];
      const SimRankInput& in = inputs[r];
      RankState& rs = ranks_[r];
      CIUIC_ASSIGN_OR_RETURN(rs.bases, LayoutBases(in.layout, s.scratch_count));
      if (in.input.size() != in.layout.input_count * es_) {
        return InvalidArgumentError("Simulate: rank " + std::to_string(r) + " input has " +
                                    std::to_string(in.input.size()) + " bytes, layout says " +
                                    std::to_string(in.layout.input_count) + " elements of " + std::to_string(es_));
      }
      rs.mem.assign(rs.bases.total * es_, kSimPoison);
      if (!in.input.empty()) std::memcpy(&rs.mem[rs.bases.input * es_], in.input.data(), in.input.size());
      out_counts_.push_back(in.layout.output_count);
      rs.steps.resize(s.steps.size());
      rs.left = s.steps.size();
      std::map<int, int> last_send, last_recv;  // link -> last step using it
      std::map<int, uint64_t> nsend, nrecv;
      for (size_t i = 0; i < s.steps.size(); ++i) {
        const Step& st = s.steps[i];
        StepState& ss = rs.steps[i];
        ss.count = StepCount(st);
        ss.nchunks = ss.count == 0 ? 1 : (ss.count + chunk_elems_ - 1) / chunk_elems_;
        if (StepSends(st.op)) {
          ss.send_link = link_id(r, st.send_peer, st.channel);
          auto it = last_send.find(ss.send_link);
          ss.send_prev = it == last_send.end() ? -1 : it->second;
          last_send[ss.send_link] = static_cast<int>(i);
          ss.send_msg = nsend[ss.send_link]++;
        }
        if (StepReceives(st.op)) {
          ss.recv_link = link_id(st.recv_peer, r, st.channel);
          auto it = last_recv.find(ss.recv_link);
          ss.recv_prev = it == last_recv.end() ? -1 : it->second;
          last_recv[ss.recv_link] = static_cast<int>(i);
          ss.recv_msg = nrecv[ss.recv_link]++;
        }
      }
    }
    return Status::Ok();
  }

  Status Run() {
    size_t left = 0;
    for (const RankState& rs : ranks_) left += rs.left;
    while (left > 0) {
      if (opt_.max_sweeps && stats_.sweeps >= opt_.max_sweeps) {
        return FailedPreconditionError("Simulate: " + std::to_string(left) + " steps left after max_sweeps " +
                                       std::to_string(opt_.max_sweeps) + " sweeps");
      }
      ++stats_.sweeps;
      bool progress = false;
      for (size_t r = 0; r < ranks_.size(); ++r) {
        for (size_t i = 0; i < ranks_[r].steps.size(); ++i) {
          StatusOr<bool> moved = Advance(static_cast<int>(r), static_cast<int>(i));
          if (!moved.ok()) return moved.status();
          progress |= *moved;
        }
      }
      left = 0;
      for (const RankState& rs : ranks_) left += rs.left;
      if (!progress && left > 0) return Deadlock();
    }
    for (const LinkQueue& l : links_) {
      if (!l.q.empty()) {
        const Chunk& c = l.q.front();
        return FailedPreconditionError("Simulate: " + LinkName(l) + ": message #" + std::to_string(c.msg) +
                                       " (" + std::to_string(c.msg_count) + " elements, sent by step #" +
                                       std::to_string(c.send_step) + ") is never received");
      }
    }
    return Status::Ok();
  }

  SimResult Result() {
    SimResult res;
    res.stats = stats_;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      const RankState& rs = ranks_[r];
      const uint8_t* p = rs.mem.data() + rs.bases.output * es_;
      res.outputs.emplace_back(p, p + out_counts_[r] * es_);
    }
    return res;
  }

 private:
  static std::string LinkName(const LinkQueue& l) {
    return "link rank " + std::to_string(l.src) + " -> rank " + std::to_string(l.dst) + " channel " +
           std::to_string(l.channel);
  }
  std::string StepName(int r, int i) const {
    return "rank " + std::to_string(r) + " step #" + std::to_string(i) + " (" +
           StepOpName(sched_[r].steps[i].op) + ")";
  }

  size_t ChunkElems(const StepState& ss, size_t k) const {
    const size_t begin = k * chunk_elems_;
    return ss.count > begin ? std::min(chunk_elems_, ss.count - begin) : 0;
  }
  uint8_t* Ptr(int r, const Range& range, size_t k) {
    RankState& rs = ranks_[r];
    const size_t base = range.buf == BufKind::kInput    ? rs.bases.input
                        : range.buf == BufKind::kOutput ? rs.bases.output
                                                        : rs.bases.scratch;
    return rs.mem.data() + (base + range.offset + k * chunk_elems_) * es_;
  }

  // Whether the deps of step i of rank r allow its chunk k.
  bool DepsAllow(int r, int i, size_t k, int* blocker) const {
    const Step& st = sched_[r].steps[i];
    for (int d : st.deps) {
      const StepState& ds = ranks_[r].steps[d];
      const bool ok = st.dep_mode == DepMode::kWhole ? ds.done == ds.nchunks : ds.done > k;
      if (!ok) {
        if (blocker) *blocker = d;
        return false;
      }
    }
    return true;
  }
  bool FullyReceived(int r, int i) const {
    const StepState& ss = ranks_[r].steps[i];
    return (Forwards(sched_[r].steps[i].op) ? ss.stored : ss.done) == ss.nchunks;
  }
  bool CanSend(int r, const StepState& ss) const {
    if (ss.send_prev >= 0 && ranks_[r].steps[ss.send_prev].done != ranks_[r].steps[ss.send_prev].nchunks) {
      return false;
    }
    return links_[ss.send_link].q.size() < static_cast<size_t>(opt_.slots_per_link);
  }
  bool CanReceive(int r, const StepState& ss) const {
    if (ss.recv_prev >= 0 && !FullyReceived(r, ss.recv_prev)) return false;
    return !links_[ss.recv_link].q.empty();
  }

  void Push(int r, int i, const uint8_t* src, size_t k) {
    StepState& ss = ranks_[r].steps[i];
    LinkQueue& l = links_[ss.send_link];
    Chunk c;
    c.elems = ChunkElems(ss, k);
    c.data.assign(src, src + c.elems * es_);
    c.msg_count = ss.count;
    c.msg = ss.send_msg;
    c.send_step = i;
    c.index = k;
    ++stats_.chunks;
    stats_.bytes += c.elems * es_;
    l.q.push_back(std::move(c));
    if (k == 0) ++stats_.messages;
    stats_.max_link_occupancy = std::max(stats_.max_link_occupancy, l.q.size());
  }

  void Combine(uint8_t* dst, const std::vector<const void*>& srcs, size_t elems) {
    tmp_.resize(elems * es_);
    reduce_(tmp_.data(), srcs.data(), static_cast<int>(srcs.size()), elems);
    if (elems) std::memcpy(dst, tmp_.data(), elems * es_);
  }

  void Finish(int r, StepState& ss) {
    if (++ss.done == ss.nchunks) --ranks_[r].left;
  }

  // Moves at most one chunk in (or through) step i of rank r, then lets a
  // forwarding step send one stored chunk. Returns whether anything moved.
  StatusOr<bool> Advance(int r, int i) {
    const Step& st = sched_[r].steps[i];
    StepState& ss = ranks_[r].steps[i];
    if (ss.done == ss.nchunks) return false;
    bool moved = false;
    const bool fwd = Forwards(st.op);
    const size_t k = fwd ? ss.stored : ss.done;
    if (k < ss.nchunks && DepsAllow(r, i, k, nullptr)) {
      const size_t elems = ChunkElems(ss, k);
      switch (st.op) {
        case StepOp::kSend:
          if (CanSend(r, ss)) {
            Push(r, i, Ptr(r, st.src, k), k);
            Finish(r, ss);
            moved = true;
          }
          break;
        case StepOp::kCopy: {
          uint8_t* d = Ptr(r, st.dst, k);
          const uint8_t* s = Ptr(r, st.src, k);
          if (d != s && elems) std::memmove(d, s, elems * es_);
          Finish(r, ss);
          moved = true;
          break;
        }
        case StepOp::kReduce: {
          std::vector<const void*> srcs;
          for (const Range& in : st.inputs) srcs.push_back(Ptr(r, in, k));
          Combine(Ptr(r, st.dst, k), srcs, elems);
          Finish(r, ss);
          moved = true;
          break;
        }
        default: {  // the receiving ops
          if (!CanReceive(r, ss)) break;
          LinkQueue& l = links_[ss.recv_link];
          Chunk& c = l.q.front();
          if (c.msg_count != ss.count || c.msg != ss.recv_msg || c.index != k) {
            return FailedPreconditionError(
                "Simulate: " + StepName(r, i) + " expects message #" + std::to_string(ss.recv_msg) + " of " +
                std::to_string(ss.count) + " elements on " + LinkName(l) + " but got message #" +
                std::to_string(c.msg) + " of " + std::to_string(c.msg_count) + " elements (chunk " +
                std::to_string(c.index) + ", sent by step #" + std::to_string(c.send_step) + ")");
          }
          uint8_t* d = Ptr(r, st.dst, k);
          if (st.op == StepOp::kRecvReduce || st.op == StepOp::kRecvReduceSend) {
            Combine(d, {Ptr(r, st.src, k), c.data.data()}, elems);
          } else if (elems) {
            std::memcpy(d, c.data.data(), elems * es_);
          }
          l.q.pop_front();
          if (fwd) {
            ++ss.stored;
          } else {
            Finish(r, ss);
          }
          moved = true;
          break;
        }
      }
    }
    if (fwd && ss.done < ss.stored && CanSend(r, ss)) {
      Push(r, i, Ptr(r, st.dst, ss.done), ss.done);
      Finish(r, ss);
      moved = true;
    }
    return moved;
  }

  // Why step i of rank r cannot move (for the deadlock report).
  std::string Blocker(int r, int i) const {
    const Step& st = sched_[r].steps[i];
    const StepState& ss = ranks_[r].steps[i];
    const bool fwd = Forwards(st.op);
    const size_t k = fwd ? ss.stored : ss.done;
    std::string why;
    int dep = -1;
    if (k < ss.nchunks) {
      if (!DepsAllow(r, i, k, &dep)) {
        why = "waits for dep #" + std::to_string(dep);
      } else if (StepReceives(st.op)) {
        const LinkQueue& l = links_[ss.recv_link];
        if (ss.recv_prev >= 0 && !FullyReceived(r, ss.recv_prev)) {
          why = "waits behind step #" + std::to_string(ss.recv_prev) + " on " + LinkName(l);
        } else {
          why = "waits for message #" + std::to_string(ss.recv_msg) + " on " + LinkName(l) + " (empty)";
        }
      } else if (st.op == StepOp::kSend) {
        why = SendBlocker(r, ss);
      }
    }
    if (why.empty() && fwd) why = SendBlocker(r, ss);
    return StepName(r, i) + " chunk " + std::to_string(ss.done) + "/" + std::to_string(ss.nchunks) + ": " + why;
  }
  std::string SendBlocker(int r, const StepState& ss) const {
    const LinkQueue& l = links_[ss.send_link];
    if (ss.send_prev >= 0 && ranks_[r].steps[ss.send_prev].done != ranks_[r].steps[ss.send_prev].nchunks) {
      return "waits behind step #" + std::to_string(ss.send_prev) + " on " + LinkName(l);
    }
    return LinkName(l) + " is full (" + std::to_string(l.q.size()) + " slots)";
  }

  Status Deadlock() const {
    std::string msg = "Simulate: deadlock after " + std::to_string(stats_.sweeps) + " sweeps; blocked: ";
    int listed = 0, total = 0;
    for (size_t r = 0; r < ranks_.size(); ++r) {
      for (size_t i = 0; i < ranks_[r].steps.size(); ++i) {
        const StepState& ss = ranks_[r].steps[i];
        if (ss.done == ss.nchunks) continue;
        ++total;
        if (listed < 8) {
          msg += (listed ? "; " : "") + Blocker(static_cast<int>(r), static_cast<int>(i));
          ++listed;
        }
      }
    }
    if (total > listed) msg += "; and " + std::to_string(total - listed) + " more";
    return FailedPreconditionError(msg);
  }

  const std::vector<Schedule>& sched_;
  const size_t es_;
  const ReduceFn& reduce_;
  const SimOptions opt_;
  const size_t chunk_elems_;
  std::vector<RankState> ranks_;
  std::vector<LinkQueue> links_;
  std::vector<size_t> out_counts_;
  std::vector<uint8_t> tmp_;
  SimStats stats_;
};

}  // namespace

StatusOr<SimResult> Simulate(const std::vector<Schedule>& schedules, const std::vector<SimRankInput>& inputs,
                             size_t elem_size, const ReduceFn& reduce, const SimOptions& options) {
  if (schedules.empty()) return InvalidArgumentError("Simulate: no schedules");
  if (inputs.size() != schedules.size()) {
    return InvalidArgumentError("Simulate: " + std::to_string(inputs.size()) + " inputs for " +
                                std::to_string(schedules.size()) + " schedules");
  }
  if (elem_size == 0) return InvalidArgumentError("Simulate: elem_size must be > 0");
  if (options.slots_per_link < 1) return InvalidArgumentError("Simulate: slots_per_link must be >= 1");
  if (!reduce) return InvalidArgumentError("Simulate: no reduce function");
  for (size_t r = 0; r < schedules.size(); ++r) {
    if (schedules[r].rank != static_cast<int>(r) || schedules[r].nranks != static_cast<int>(schedules.size())) {
      return InvalidArgumentError("Simulate: schedule #" + std::to_string(r) + " is for rank " +
                                  std::to_string(schedules[r].rank) + " of " + std::to_string(schedules[r].nranks));
    }
    // Bounds and structure always (memory safety); hazards on request.
    CIUIC_RETURN_IF_ERROR(ValidateSchedule(schedules[r], inputs[r].layout, options.check_hazards));
  }
  if (options.check_matching) CIUIC_RETURN_IF_ERROR(CheckMessageMatching(schedules));
  Sim sim(schedules, elem_size, reduce, options);
  CIUIC_RETURN_IF_ERROR(sim.Init(inputs));
  CIUIC_RETURN_IF_ERROR(sim.Run());
  return sim.Result();
}

}  // namespace ciuic::collectives
