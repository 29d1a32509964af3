// Executor: see executor.h. One run is an ExecutorRun: the steps of every
// job flattened, a queue of messages per link, and passes that move every
// step as far as its dependencies, its links and its peers allow.
#include "collectives/executor.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace ciuic::collectives {

Status ReduceInOrder(const kernels::Reducer& reducer, void* dst, const void* const* srcs, int n, size_t count,
                     DataType dtype, ReduceOp op) {
  if (count == 0) return Status::Ok();
  for (int j = kernels::kMaxSources; j < n; ++j) {
    if (srcs[j] == dst) {
      return InvalidArgumentError("ReduceInOrder: input " + std::to_string(j) + " of " + std::to_string(n) +
                                  " is the output (folded after the output is written)");
    }
  }
  int first = std::min(n, kernels::kMaxSources);
  CIUIC_RETURN_IF_ERROR(reducer.Reduce(dst, srcs, first, count, dtype, op));
  while (first < n) {
    const void* more[kernels::kMaxSources];
    more[0] = dst;
    int m = 1;
    while (m < kernels::kMaxSources && first < n) more[m++] = srcs[first++];
    CIUIC_RETURN_IF_ERROR(reducer.Reduce(dst, more, m, count, dtype, op));
  }
  return Status::Ok();
}

namespace {

using transport::Link;

// The messages of one link in the order the schedules post them, and what
// is still in flight on it.
struct LinkQueues {
  Link* link = nullptr;    // null while the source is still setting it up
  int peer = -1, channel = 0;
  std::vector<int> sends;  // flat step indices in order
  std::vector<int> recvs;
  size_t send_head = 0;    // index into sends of the first unfinished
  size_t recv_head = 0;
  bool failed = false;     // the link reported an error (see Pass)
  // Zero-copy chunks whose write has not completed: (flat step, link chunk
  // number), in posting order.
  struct ZeroCopyFifo {  // a vector and a head: no allocation until used
    std::vector<std::pair<int, uint64_t>> items;
    size_t head = 0;
    bool empty() const { return head == items.size(); }
    const std::pair<int, uint64_t>& front() const { return items[head]; }
    void pop_front() {
      if (++head == items.size()) items.clear(), head = 0;
    }
    void emplace_back(int step, uint64_t seq) { items.emplace_back(step, seq); }
  } zero_copy;
  Status error;            // why, when failed
  bool needed() const { return send_head < sends.size() || recv_head < recvs.size(); }
};

// One step of one job, with its dependencies as flat indices.
struct Flat {
  const Step* step = nullptr;
  int job = 0;
  int index = 0;     // within its schedule (for messages)
  int dep_base = 0;  // flat index of its schedule's step 0: step->deps + dep_base
  size_t nchunks = 0;
  size_t chunk_elems = 0;
  size_t done = 0;    // chunks completed (sending steps: sent, or written when zero-copy)
  size_t sent = 0;    // sending steps: chunks handed to the link
  size_t stored = 0;  // forwarding steps: chunks received and stored in dst
  bool send_queued_next = false;  // the link's next message may go (all chunks handed over)
  int send_link = -1;
  int recv_link = -1;
};

enum class Sent { kNo, kCopied, kZeroCopy };

class ExecutorRun {
 public:
  ExecutorRun(const Executor::Parts& parts, const std::vector<ExecJob>& jobs, const LinkSource& links,
              const std::atomic<bool>* abort, const Executor::MoreJobs& more, const Executor::JobDone& job_done)
      : parts_(parts), jobs_(jobs), links_(links), abort_(abort), more_(more), job_done_(job_done) {}

  Status Execute(std::chrono::steady_clock::time_point deadline) {
    CIUIC_RETURN_IF_ERROR(AddJobs(0));
    if (flat_.empty() && more_ == nullptr) return Status::Ok();
    // One-pointer closures: they fit std::function's inline buffer (the
    // [&] lambdas themselves would be allocated on every call).
    Status s = transport::WaitFor(
        parts_.waiter, [this]() { return Pass(); }, [this]() { return Done(); }, deadline, "collective",
        parts_.spin);
    if (!s.ok()) AbandonZeroCopy(s);
    if (s.code() == StatusCode::kDeadlineExceeded) return NamePending();
    return s;
  }

 private:
  std::string Where(int job, int j) const { return jobs_[job].schedule->algorithm + " step " + std::to_string(j); }

  // Every range is validated once, so the passes can trust them.
  Status Check(const Range& r, int job, int j) const {
    const ExecBuffers& b = jobs_[job].buffers;
    size_t cap = 0;
    switch (r.buf) {
      case BufKind::kInput: cap = b.input_count; break;
      case BufKind::kOutput: cap = b.output_count; break;
      case BufKind::kScratch: cap = b.scratch_count; break;
    }
    if (r.offset > cap || r.count > cap - r.offset) {
      return InvalidArgumentError(Where(job, j) + ": range [" + std::to_string(r.offset) + ", +" +
                                  std::to_string(r.count) + ") outside a buffer of " + std::to_string(cap) +
                                  " elements");
    }
    return Status::Ok();
  }

  Status CheckStep(const Schedule& sch, const Step& s, int job, int j) const {
    for (int d : s.deps) {
      if (d < 0 || d >= j) return InvalidArgumentError(Where(job, j) + ": bad dependency");
    }
    auto bad_peer = [&](int p) { return p < 0 || p >= sch.nranks || p == sch.rank; };
    if ((StepSends(s.op) && bad_peer(s.send_peer)) || (StepReceives(s.op) && bad_peer(s.recv_peer))) {
      return InvalidArgumentError(Where(job, j) + ": bad peer");
    }
    switch (s.op) {
      case StepOp::kSend: return Check(s.src, job, j);
      case StepOp::kRecv:
      case StepOp::kRecvCopySend: return Check(s.dst, job, j);
      case StepOp::kRecvReduce:
      case StepOp::kRecvReduceSend:
      case StepOp::kCopy:
        CIUIC_RETURN_IF_ERROR(Check(s.src, job, j));
        CIUIC_RETURN_IF_ERROR(Check(s.dst, job, j));
        if (s.src.count != s.dst.count) return InvalidArgumentError(Where(job, j) + ": src and dst counts differ");
        return Status::Ok();
      case StepOp::kReduce:
        CIUIC_RETURN_IF_ERROR(Check(s.dst, job, j));
        if (s.inputs.empty() || s.inputs.size() > 64) return InvalidArgumentError(Where(job, j) + ": 1..64 inputs");
        for (const Range& r : s.inputs) {
          CIUIC_RETURN_IF_ERROR(Check(r, job, j));
          if (r.count != s.dst.count) return InvalidArgumentError(Where(job, j) + ": input count differs");
        }
        return Status::Ok();
    }
    return Status::Ok();
  }

  char* Ptr(int job, const Range& r, size_t elem) const {
    const ExecBuffers& b = jobs_[job].buffers;
    char* base = nullptr;
    switch (r.buf) {
      case BufKind::kInput: base = const_cast<char*>(static_cast<const char*>(b.input)); break;
      case BufKind::kOutput: base = static_cast<char*>(b.output); break;
      case BufKind::kScratch: base = static_cast<char*>(b.scratch); break;
    }
    return base + (r.offset + elem) * DataTypeSize(jobs_[job].dtype);
  }

  // The region covering a buffer of a job (null: none, copy through a slot).
  const transport::MemoryRegion* RegionOf(int job, BufKind buf) const {
    const ExecBuffers& b = jobs_[job].buffers;
    switch (buf) {
      case BufKind::kInput: return b.input_region;
      case BufKind::kOutput: return b.output_region;
      case BufKind::kScratch: return b.scratch_region;
    }
    return nullptr;
  }

  // (peer, channel) -> queue (-1: asked for, not created yet); a handful
  // of entries, searched linearly.
  int* FindLink(std::pair<int, int> key) {
    for (auto& e : link_index_) {
      if (e.first == key) return &e.second;
    }
    return nullptr;
  }

  // Flattens jobs_[from..] and asks for their new links, in ascending peer
  // order (see LinkSource).
  Status AddJobs(size_t from) {
    const int first_new = static_cast<int>(flat_.size());
    std::vector<std::pair<int, int>> new_links;
    size_t more_steps = 0;
    for (size_t job = from; job < jobs_.size(); ++job) more_steps += jobs_[job].schedule->steps.size();
    flat_.reserve(flat_.size() + more_steps);
    for (int job = static_cast<int>(from); job < static_cast<int>(jobs_.size()); ++job) {
      const Schedule& sch = *jobs_[job].schedule;
      const int base = static_cast<int>(flat_.size());
      for (int j = 0; j < static_cast<int>(sch.steps.size()); ++j) {
        const Step& s = sch.steps[j];
        CIUIC_RETURN_IF_ERROR(CheckStep(sch, s, job, j));
        for (int p : {StepSends(s.op) ? s.send_peer : -1, StepReceives(s.op) ? s.recv_peer : -1}) {
          if (p >= 0 && FindLink({p, s.channel}) == nullptr) {
            link_index_.emplace_back(std::make_pair(p, s.channel), -1);
            new_links.emplace_back(p, s.channel);
          }
        }
        Flat f;
        f.step = &s;
        f.job = job;
        f.index = j;
        f.dep_base = base;
        flat_.push_back(f);
      }
    }
    std::sort(new_links.begin(), new_links.end());
    queues_.reserve(queues_.size() + new_links.size());
    for (const auto& key : new_links) {
      CIUIC_ASSIGN_OR_RETURN(Link* l, links_(key.first, key.second));
      *FindLink(key) = static_cast<int>(queues_.size());
      queues_.emplace_back();
      queues_.back().link = l;
      queues_.back().peer = key.first;
      queues_.back().channel = key.second;
    }
    // Chunks are cut from the links' slot size (all links of a communicator
    // share one): the job's, else the first existing link's.
    size_t link_slot = 512u << 10;
    for (const LinkQueues& q : queues_) {
      if (q.link != nullptr) {
        link_slot = q.link->slot_size();
        break;
      }
    }
    for (int i = first_new; i < static_cast<int>(flat_.size()); ++i) {
      Flat& f = flat_[i];
      const Step& s = *f.step;
      const ExecJob& job = jobs_[f.job];
      size_t chunk_bytes = job.slot_bytes > 0 ? job.slot_bytes : link_slot;
      if (job.chunk_bytes > 0) chunk_bytes = std::min(chunk_bytes, job.chunk_bytes);
      f.chunk_elems = chunk_bytes / DataTypeSize(job.dtype);
      if (f.chunk_elems == 0) return InvalidArgumentError("slot size smaller than one element");
      f.nchunks = std::max<size_t>(1, (StepCount(s) + f.chunk_elems - 1) / f.chunk_elems);
      if (StepSends(s.op)) {
        f.send_link = *FindLink({s.send_peer, s.channel});
        queues_[f.send_link].sends.push_back(i);
      }
      if (StepReceives(s.op)) {
        f.recv_link = *FindLink({s.recv_peer, s.channel});
        queues_[f.recv_link].recvs.push_back(i);
      }
      ++steps_left_;
      if (job_done_ != nullptr) {
        if (job_left_.size() < jobs_.size()) job_left_.resize(jobs_.size(), 0);
        ++job_left_[f.job];
      }
    }
    if (job_done_ != nullptr) {
      // A job without steps (an empty message) is done at once.
      for (size_t j = from; j < jobs_.size(); ++j) {
        if (j >= job_left_.size()) job_left_.resize(j + 1, 0);
        if (job_left_[j] == 0) finished_.push_back(static_cast<int>(j));
      }
    }
    return Status::Ok();
  }

  // A step's last chunk is done. Its job's steps all done means its buffers
  // are the caller's again (zero-copy writes count only once complete).
  void StepFinished(const Flat& f) {
    --steps_left_;
    if (job_done_ != nullptr && --job_left_[f.job] == 0) finished_.push_back(f.job);
  }

  // Chunk k of a step: its first element and element count.
  void ChunkSpan(const Flat& f, size_t k, size_t* first, size_t* n) const {
    const size_t count = StepCount(*f.step);
    *first = k * f.chunk_elems;
    *n = count == 0 ? 0 : std::min(f.chunk_elems, count - *first);
  }

  // The receiving half of chunk k of step i (kRecv, kRecvReduce and the
  // forwarding steps): the incoming chunk is stored/reduced into dst and
  // its slot released. False when the chunk has not arrived yet.
  StatusOr<bool> TryRecv(int i, size_t k) {
    Flat& f = flat_[i];
    const Step& s = *f.step;
    LinkQueues& q = queues_[f.recv_link];
    // Not connected yet, or an earlier message on the link is unfinished.
    if (q.link == nullptr || q.recvs[q.recv_head] != i) return false;
    size_t first, n;
    ChunkSpan(f, k, &first, &n);
    const size_t bytes = n * DataTypeSize(jobs_[f.job].dtype);
    size_t got = 0;
    const void* in = q.link->PeekRecv(&got);
    if (in == nullptr) return false;
    if (got != bytes) {
      return DataLossError(Where(f.job, f.index) + " (" + StepOpName(s.op) + "): rank " + std::to_string(s.recv_peer) +
                           " sent a chunk of " + std::to_string(got) + " bytes where " + std::to_string(bytes) +
                           " were expected (mismatched counts or schedules across ranks?)");
    }
    if (n > 0) {
      if (s.op == StepOp::kRecvReduce || s.op == StepOp::kRecvReduceSend) {
        const void* srcs[2] = {Ptr(f.job, s.src, first), in};
        CIUIC_RETURN_IF_ERROR(
            parts_.reducer.Reduce(Ptr(f.job, s.dst, first), srcs, 2, n, jobs_[f.job].dtype, jobs_[f.job].op));
      } else {
        parts_.reducer.Copy(Ptr(f.job, s.dst, first), in, bytes);
      }
    }
    CIUIC_RETURN_IF_ERROR(q.link->ReleaseRecv());
    return true;
  }

  // The sending half of chunk k of step i (kSend from src; forwarding steps
  // from dst, after their receive half stored it): copied into a slot (done
  // now), or written from the buffer itself (done when the write completes).
  StatusOr<Sent> TrySend(int i, size_t k) {
    Flat& f = flat_[i];
    const Step& s = *f.step;
    LinkQueues& q = queues_[f.send_link];
    if (q.link == nullptr || q.sends[q.send_head] != i) return Sent::kNo;
    size_t first, n;
    ChunkSpan(f, k, &first, &n);
    const size_t bytes = n * DataTypeSize(jobs_[f.job].dtype);
    const Range& from = s.op == StepOp::kSend ? s.src : s.dst;
    const transport::MemoryRegion* region =
        n > 0 && !q.link->writes_into_peer_memory() ? RegionOf(f.job, from.buf) : nullptr;
    if (region != nullptr) {
      if (!q.link->CanSend()) return Sent::kNo;
      const char* at = Ptr(f.job, from, first);
      const uint64_t seq = q.link->sends_committed();
      CIUIC_RETURN_IF_ERROR(
          q.link->CommitSendFrom(*region, static_cast<size_t>(at - static_cast<const char*>(region->data())), bytes));
      q.zero_copy.emplace_back(i, seq);
      return Sent::kZeroCopy;
    }
    void* slot = q.link->AcquireSend();
    if (slot == nullptr) return Sent::kNo;
    if (n > 0) parts_.reducer.Copy(slot, Ptr(f.job, from, first), bytes);
    CIUIC_RETURN_IF_ERROR(q.link->CommitSend(bytes));
    return Sent::kCopied;
  }

  // Chunk k of a local step (kCopy, kReduce).
  Status DoLocal(int i, size_t k) {
    const Flat& f = flat_[i];
    const Step& s = *f.step;
    size_t first, n;
    ChunkSpan(f, k, &first, &n);
    if (n == 0) return Status::Ok();
    const size_t bytes = n * DataTypeSize(jobs_[f.job].dtype);
    char* dst = Ptr(f.job, s.dst, first);
    if (s.op == StepOp::kCopy) {
      parts_.reducer.Copy(dst, Ptr(f.job, s.src, first), bytes);
      return Status::Ok();
    }
    const void* srcs[64];
    for (size_t x = 0; x < s.inputs.size(); ++x) srcs[x] = Ptr(f.job, s.inputs[x], first);
    if (s.inputs.size() == 1) {
      parts_.reducer.Copy(dst, srcs[0], bytes);
      return Status::Ok();
    }
    // k-nomial rounds of radix above kMaxSources reduce more inputs.
    return ReduceInOrder(parts_.reducer, dst, srcs, static_cast<int>(s.inputs.size()), n, jobs_[f.job].dtype,
                         jobs_[f.job].op);
  }

  // Whether the dependencies of step i allow its chunk k.
  bool DepsAllow(int i, size_t k) const {
    const Flat& f = flat_[i];
    for (int d : f.step->deps) {
      const Flat& df = flat_[f.dep_base + d];
      if (f.step->dep_mode == DepMode::kPerChunk) {
        // Chunk k needs chunk k of the dependency (all of it when the
        // dependency has fewer chunks).
        if (df.done < std::min(k + 1, df.nchunks)) return false;
      } else if (df.done < df.nchunks) {
        return false;
      }
    }
    return true;
  }

  // A send chunk handed to the link: done now when copied.
  void SentOne(Flat& f, Sent how) {
    ++f.sent;
    if (how == Sent::kCopied && ++f.done == f.nchunks) StepFinished(f);
  }

  // Progresses every link; true when anything happened.
  StatusOr<bool> ProgressLinks() {
    bool any = false;
    // A link with no receive due in this run and a free slot for any send
    // it still has only progresses its sends, and not at all when it has
    // nothing of ours to hand over or complete (a broadcast's root reads no
    // socket between its sends), except on every 16th pass, so what arrives
    // there (credits) is still taken in and a sleeping wait is not woken by
    // it again and again.
    const bool full = ++since_full_ >= 16;
    if (full) since_full_ = 0;
    for (auto& q : queues_) {
      if (q.link == nullptr) {
        CIUIC_ASSIGN_OR_RETURN(q.link, links_(q.peer, q.channel));
        if (q.link == nullptr) continue;
        any = true;
      }
      if (q.failed) continue;
      const bool sends_only = !full && q.recv_head == q.recvs.size() &&
                              (q.send_head == q.sends.size() || q.link->CanSend());
      if (sends_only && !q.link->SendsPending()) continue;
      StatusOr<bool> p = q.link->Progress(/*receive=*/!sends_only);
      if (!p.ok()) {
        // A peer that finished its part and closed (or died) only matters
        // while this run still needs more from it than already arrived
        // (checked after the steps) or sends to it.
        if (!q.zero_copy.empty()) return p.status();
        q.failed = true;
        q.error = p.status();
        continue;
      }
      any |= *p;
      // Zero-copy chunks whose write completed are done now.
      while (!q.zero_copy.empty() && q.zero_copy.front().second < q.link->sends_done()) {
        Flat& f = flat_[q.zero_copy.front().first];
        q.zero_copy.pop_front();
        if (++f.done == f.nchunks) StepFinished(f);
        any = true;
      }
    }
    return any;
  }

  // Moves step i as far as it can go now; true when anything moved.
  StatusOr<bool> Advance(int i) {
    Flat& f = flat_[i];
    if (f.done == f.nchunks) return false;
    const Step& s = *f.step;
    bool any = false;
    if (s.op == StepOp::kRecvReduceSend || s.op == StepOp::kRecvCopySend) {
      // Receive (and store) ahead of sending: the store never waits for the
      // outgoing link, which may still carry earlier messages.
      while (f.stored < f.nchunks && DepsAllow(i, f.stored)) {
        CIUIC_ASSIGN_OR_RETURN(bool did, TryRecv(i, f.stored));
        if (!did) break;
        any = true;
        if (++f.stored == f.nchunks) ++queues_[f.recv_link].recv_head;
      }
      while (f.sent < f.stored) {
        CIUIC_ASSIGN_OR_RETURN(Sent how, TrySend(i, f.sent));
        if (how == Sent::kNo) break;
        any = true;
        SentOne(f, how);
      }
    } else if (s.op == StepOp::kSend) {
      while (f.sent < f.nchunks && DepsAllow(i, f.sent)) {
        CIUIC_ASSIGN_OR_RETURN(Sent how, TrySend(i, f.sent));
        if (how == Sent::kNo) break;
        any = true;
        SentOne(f, how);
      }
    } else {
      while (f.done < f.nchunks && DepsAllow(i, f.done)) {
        bool did = true;
        if (StepReceives(s.op)) {
          CIUIC_ASSIGN_OR_RETURN(did, TryRecv(i, f.done));
        } else {
          CIUIC_RETURN_IF_ERROR(DoLocal(i, f.done));
        }
        if (!did) break;
        any = true;
        if (++f.done == f.nchunks) StepFinished(f);
      }
      if (f.done == f.nchunks && f.recv_link >= 0) ++queues_[f.recv_link].recv_head;
    }
    if (f.send_link >= 0 && !f.send_queued_next && f.sent == f.nchunks) {
      // Every chunk handed over: the link's next message may start.
      f.send_queued_next = true;
      ++queues_[f.send_link].send_head;
    }
    return any;
  }

  // One pass over links and steps; true when anything happened.
  StatusOr<bool> Pass() {
    if (abort_ != nullptr && abort_->load(std::memory_order_relaxed)) {
      return AbortedError(jobs_[0].schedule->algorithm + ": communicator aborted");
    }
    bool any = false;
    if (more_ != nullptr) {
      const size_t had = jobs_.size();
      more_(&jobs_);
      if (jobs_.size() > had) {
        CIUIC_RETURN_IF_ERROR(AddJobs(had));
        any = true;
      }
    }
    CIUIC_ASSIGN_OR_RETURN(bool progressed, ProgressLinks());
    any |= progressed;
    for (int i = 0; i < static_cast<int>(flat_.size()); ++i) {
      CIUIC_ASSIGN_OR_RETURN(bool moved, Advance(i));
      any |= moved;
    }
    for (int j : finished_) job_done_(static_cast<size_t>(j));
    finished_.clear();
    // A failed link is fatal once this run needs from it what cannot come:
    // a send, or a receive beyond the chunks that arrived before the peer
    // closed (a peer that finished and left after its last send, while this
    // rank was still in an earlier operation, delivered everything).
    for (auto& q : queues_) {
      if (!q.failed || !q.needed()) continue;
      size_t len = 0;
      if (q.send_head < q.sends.size() || q.link->PeekRecv(&len) == nullptr) return q.error;
    }
    return any;
  }

  // All steps done and every send delivered (the slots may be reused by
  // the next operation as soon as the peer releases them).
  bool Done() const {
    if (steps_left_ != 0) return false;
    for (const auto& q : queues_) {
      if (!q.failed && q.link != nullptr && q.link->sends_in_flight() != 0) return false;
    }
    return true;
  }

  // Writes still reading the caller's buffers would read memory the caller
  // owns again once this returns: those links stop here (their error is
  // sticky).
  void AbandonZeroCopy(const Status& s) {
    for (auto& q : queues_) {
      if (!q.zero_copy.empty() && q.link != nullptr) {
        q.link->Fail(Status(s.code(), "link to rank " + std::to_string(q.link->peer()) +
                                          " abandoned with zero-copy writes in flight: " + s.message()));
      }
    }
  }

  // The deadline's error: the first unfinished step, its peers and chunk.
  Status NamePending() const {
    for (const Flat& f : flat_) {
      if (f.done == f.nchunks) continue;
      const Step& st = *f.step;
      std::string peers;
      auto unconnected = [&](int link) {
        return link >= 0 && queues_[link].link == nullptr
                   ? " (not connected: rank " + std::to_string(queues_[link].peer) +
                         " has not asked for this link: no matching receive or send there yet)"
                   : std::string();
      };
      // The rank waited for goes last (errors name their cause last): the
      // receive's peer when the step receives, as its chunk is what is
      // missing; a send alone waits only for the peer's credits.
      const std::string to = StepSends(st.op) ? " to rank " + std::to_string(st.send_peer) + unconnected(f.send_link) : "";
      const std::string from =
          StepReceives(st.op) ? " from rank " + std::to_string(st.recv_peer) + unconnected(f.recv_link) : "";
      // An unconnected link's peer is the one not there yet. A forwarding
      // step that received more than it passed on (or whose zero-copy
      // writes are unfinished) waits for its send peer, not its receive peer.
      const bool forwards = st.op == StepOp::kRecvReduceSend || st.op == StepOp::kRecvCopySend;
      const bool send_bound = forwards && (f.stored > f.sent || f.sent > f.done);
      const bool send_missing = !to.empty() && (send_bound || !unconnected(f.send_link).empty());
      peers += send_missing ? from + to : to + from;
      const std::string received = forwards ? ", " + std::to_string(f.stored) + " received" : "";
      return DeadlineExceededError(Where(f.job, f.index) + " timed out (" + StepOpName(st.op) + peers + ", chunk " +
                                   std::to_string(f.done) + " of " + std::to_string(f.nchunks) + received + ")");
    }
    return DeadlineExceededError("collective timed out with every step done (sends still in flight)");
  }

  const Executor::Parts& parts_;
  std::vector<ExecJob> jobs_;
  const LinkSource& links_;
  const std::atomic<bool>* abort_;
  const Executor::MoreJobs& more_;
  const Executor::JobDone& job_done_;
  std::vector<int> job_left_;   // per job: steps not yet done (only with job_done_)
  std::vector<int> finished_;   // jobs done in this pass, reported at its end
  std::vector<Flat> flat_;
  std::vector<std::pair<std::pair<int, int>, int>> link_index_;
  std::vector<LinkQueues> queues_;
  int steps_left_ = 0;
  unsigned since_full_ = 0;  // passes since every link was last progressed fully
};

}  // namespace

Status Executor::Run(const Schedule& schedule, const ExecBuffers& buffers, DataType dtype, ReduceOp op,
                     const LinkSource& links, std::chrono::steady_clock::time_point deadline,
                     const std::atomic<bool>* abort) {
  ExecJob job;
  job.schedule = &schedule;
  job.buffers = buffers;
  job.dtype = dtype;
  job.op = op;
  return RunMany({job}, links, deadline, abort, nullptr, nullptr);
}

Status Executor::RunMany(const std::vector<ExecJob>& jobs, const LinkSource& links,
                         std::chrono::steady_clock::time_point deadline, const std::atomic<bool>* abort,
                         const MoreJobs& more, const JobDone& job_done) {
  return ExecutorRun(parts_, jobs, links, abort, more, job_done).Execute(deadline);
}

}  // namespace ciuic::collectives
