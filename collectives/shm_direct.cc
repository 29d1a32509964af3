// ShmDirect: see shm_direct.h.
#include "collectives/shm_direct.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>

#include "collectives/executor.h"
#include "common/cpu_relax.h"

namespace ciuic::collectives {

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMagic = 0x3152446369756963ull;  // "ciuicDR1"
// 2: the small ring (its layout fields, its `out` counter) and `started`.
// 3: `attached` (Create returns once every rank has mapped every region).
// 4: the single-copy fields (pid, self_addr, cookie, cma_*).
// 5: small-ring slot headers of kSmallHeaderBytes, payload inline up to
//    kSmallInlineBytes.
constexpr uint32_t kVersion = 5;
constexpr uint32_t kConnectionTag = 0x44495200;    // "DIR\0": apart from channel tags
constexpr size_t kHeaderBytes = 64;                 // per slot of the large ring
constexpr size_t kControlBytes = 2048;
constexpr size_t kSliceAlign = 64;                  // two-shot slice boundaries, bytes

// Waiting: spin (ShmDirectOptions::spin), then yield until kYieldFor, then sleep on the
// peer's futex word in steps of kSleepStep (the same shape as the shm
// backend's WaitForActivity: a sleeping hand-off costs ~7 us here).
constexpr auto kYieldFor = std::chrono::microseconds(60);
constexpr auto kSleepStep = std::chrono::milliseconds(1);
constexpr auto kLivenessEvery = std::chrono::milliseconds(1);

struct alignas(64) Counter {
  std::atomic<uint64_t> v{0};
};

// The start of every rank's region. Written once by its owner before the
// region is published (layout fields) and then only through the atomics.
// The padding is deliberate: words written by different ranks or at
// different rates sit on lines of their own.
struct Control {  // NOLINT(clang-analyzer-optin.performance.Padding)
  uint64_t magic;
  uint32_t version;
  uint32_t rank;
  uint64_t nslots;            // the large ring
  uint64_t slot_bytes;
  uint64_t small_nslots;      // the small ring (0: none)
  uint64_t small_slot_bytes;
  // Set once the owner has mapped every peer's region. A rank's memory
  // outlives it only in the mappings made while it lived, so no rank
  // leaves Create (and may publish, return and exit) before all are set.
  std::atomic<uint64_t> attached;
  // Single-copy all-reduce (CmaAllReduce). Layout: the owner's pid, the
  // address it maps this region at and a random word a peer reads there
  // with process_vm_readv to prove it reaches this very process; whether
  // the owner wants the path and its size limits (every rank's must
  // agree); set before `attached`: 1 when the owner can read every peer,
  // 2 when not.
  alignas(64) int64_t pid;
  uint64_t self_addr;
  uint64_t cookie;
  uint64_t cma_wanted;
  uint64_t cma_min;
  uint64_t cma_max;
  std::atomic<uint32_t> cma_ok;
  // Per call (sequence + 1 in each counter): the owner's buffers, then
  // `cma_posted`; `cma_reduced` once its slice of its recv holds the
  // result; `cma_done` once it has read every peer's slice.
  alignas(64) std::atomic<uint64_t> cma_send;
  std::atomic<uint64_t> cma_recv;
  Counter cma_posted;
  Counter cma_reduced;
  Counter cma_done;
  alignas(64) Counter reduced;  // large ring (two-shot)
  Counter out;                  // large ring
  Counter small_out;            // small ring
  // The operation this rank is in, for naming a peer that runs another one
  // on the other ring (where no slot header of this rank's ring shows it):
  // `started` = (sequence + 1) << 1 | ring (1: small), stored (release)
  // after the fields; a reader checks it again after reading them.
  alignas(64) std::atomic<uint64_t> started;
  std::atomic<uint64_t> started_count;
  std::atomic<uint32_t> started_dtype;
  std::atomic<uint32_t> started_op;
  alignas(64) std::atomic<uint32_t> bell;      // futex word: bumped when sleepers != 0
  std::atomic<uint32_t> sleepers;              // peers asleep on `bell`
  // Set (after `reason`) when the owner's operation failed: it publishes
  // nothing more, so peers waiting for it stop with its reason instead of
  // running into the timeout.
  std::atomic<uint32_t> failed;
  char reason[256];
  // Whom the owner waits for right now (rank + 1; 0: nobody) and when it
  // last looked (steady clock, ns; comparable between processes): a rank
  // that times out follows these to where the chain of waits ends.
  alignas(64) std::atomic<uint32_t> waiting_on;
  std::atomic<int64_t> looked_ns;
  // Rank 0's plan per size class (log2 of the bytes; see Impl::ModeFor):
  // from call `from` of the class on, mode `next`, before it `prev`;
  // (from << 8) | (prev << 4) | next.
  alignas(64) std::atomic<uint64_t> mode_plan[64];
};
static_assert(sizeof(Control) <= kControlBytes, "control block");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

// What a slot holds, one cache line: the fields, then `stamp` = chunk + 1
// stored last (release) is the slot's "ready" flag. Chunks of at most
// kInlineBytes travel in the line itself, so a small all-reduce costs one
// cache-line transfer per peer.
constexpr size_t kInlineBytes = 32;
// The small ring's headers are followed by 4 lines of payload: chunks of up
// to 288 B lie next to their stamp, in 20 KiB for all 64 slots, instead of
// in lines 16 KiB apart, which share a few cache sets and go cold between
// two uses of a slot (perf/RESULTS.md, issue #22).
constexpr size_t kSmallHeaderBytes = 320;
constexpr size_t kSmallInlineBytes = kSmallHeaderBytes - kHeaderBytes + kInlineBytes;
// Every this many calls of a size class run a mode other than the plan's
// (Impl::ModeFor), so a change of the machine's state is noticed.
constexpr uint64_t kExploreEvery = 32;
// SlotHeader::op of the operations other than all-reduce (whose op is its
// ReduceOp, a small number): a bit per collective, with the root (bits
// 8-23) and the ReduceOp (bits 0-7) where they have one.
constexpr uint32_t kBroadcastOp = 0x80000000u;
constexpr uint32_t kReduceOp = 0x40000000u;
constexpr uint32_t kAllGatherOp = 0x20000000u;
constexpr uint32_t kReduceScatterOp = 0x10000000u;
constexpr uint32_t kAllToAllOp = 0x08000000u;
constexpr uint32_t kBarrierOp = 0x04000000u;
constexpr uint32_t kCmaAllReduceOp = 0x02000000u;
constexpr uint32_t kKindMask = 0xfe000000u;
uint32_t OpCode(uint32_t kind, int root, ReduceOp op) {
  return kind | (static_cast<uint32_t>(root) & 0xffffu) << 8 | static_cast<uint32_t>(op);
}
struct alignas(64) SlotHeader {
  std::atomic<uint64_t> stamp;  // global chunk index + 1 once the chunk is in
  uint64_t seq;                 // operation sequence number
  uint64_t count;               // elements of the whole operation
  uint32_t dtype;
  uint32_t op;
  unsigned char inline_data[kInlineBytes];
};
static_assert(sizeof(SlotHeader) == kHeaderBytes, "slot header");
static_assert(offsetof(SlotHeader, inline_data) + kInlineBytes == kHeaderBytes, "inline bytes end the line");
static_assert(kSmallHeaderBytes % 64 == 0, "small slot headers are whole lines");

size_t DataOffset(size_t large_nslots, size_t small_nslots) {
  const size_t raw = kControlBytes + large_nslots * kHeaderBytes + small_nslots * kSmallHeaderBytes;
  return (raw + 4095) / 4096 * 4096;
}


void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::microseconds max) {
  timespec ts{static_cast<time_t>(max.count() / 1000000), static_cast<long>(max.count() % 1000000) * 1000};
  // Shared (not FUTEX_PRIVATE): the word lives in a segment other
  // processes map.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

struct ShmDirect::Impl {
  int rank = 0;
  int size = 1;
  std::unique_ptr<transport::MemoryRegion> region;
  std::vector<std::unique_ptr<transport::Connection>> conns;  // by rank; null for self
  std::vector<Control*> ctrl;                                 // by rank

  // A ring of slots in every rank's region. An operation runs on one ring
  // (the same on every rank: chosen by its size); chunk numbers and slot
  // reuse are per ring, the operation sequence is shared.
  struct Ring {
    size_t nslots = 0;
    size_t slot_bytes = 0;
    Counter Control::*out = nullptr;  // the `out` counter of this ring
    uint32_t index = 0;               // 0 large, 1 small (Control::started)
    size_t stride = kHeaderBytes;       // from one slot header to the next
    size_t inline_bytes = kInlineBytes;  // payload that travels in the header's lines
    std::vector<char*> headers;         // by rank: nslots each
    std::vector<char*> data;            // by rank: slot 0
    uint64_t next_chunk = 0;  // global index of the next operation's first chunk
    uint64_t free_upto = 0;   // every rank's `out` was at least this when last read
    uint64_t mask = 0;        // nslots - 1 where nslots is a power of two, else 0

    // A mask where it can: a 64-bit division is slow, and runs several times a call.
    uint64_t Index(uint64_t g) const { return mask != 0 ? g & mask : g % nslots; }
    char* Slot(int r, uint64_t g) const { return data[r] + Index(g) * slot_bytes; }
    SlotHeader& Header(int r, uint64_t g) const {
      return *reinterpret_cast<SlotHeader*>(headers[r] + Index(g) * stride);
    }
    // Where rank r's `bytes` of chunk g lie: next to the stamp when they fit.
    // (Computed on the char pointer: the inline area runs past the struct.)
    char* Payload(int r, uint64_t g, size_t bytes) const {
      return bytes <= inline_bytes ? headers[r] + Index(g) * stride + offsetof(SlotHeader, inline_data)
                                   : Slot(r, g);
    }
  };
  // The large ring (CIUIC_BUFFER_SIZE / CIUIC_CHUNK_SIZE) pipelines large
  // operations; the small ring (many one-shot-sized slots) takes operations
  // that fit one of its slots, so ranks may run that many small calls
  // ahead of each other instead of nslots (8 by default). With 4 ranks on
  // 2 cores every hand-off there is a yield, and a rank that can run ahead
  // yields less often.
  Ring large, small;
  Ring& RingFor(size_t bytes) { return small.nslots > 0 && bytes <= small.slot_bytes ? small : large; }

  uint64_t seq = 0;         // operations run (with count > 0)
  // Single-copy: on (every rank can read every other), or why not; the
  // peers' pids; scratch for the peers' pieces (CmaAllReduce).
  bool cma = false;
  bool cma_always = false;  // CIUIC_SHM_CMA=on: not measured against the slots
  std::string cma_note = "off";
  std::vector<int64_t> pids;
  std::unique_ptr<char, decltype(&std::free)> cma_scratch{nullptr, &std::free};
  size_t cma_scratch_bytes = 0;
  Status error;             // sticky
  std::chrono::microseconds spin_for{0};  // ShmDirectOptions::spin

  // The operation this rank is in (Begin), for Stall's check of the peers.
  const Ring* cur_ring = nullptr;
  uint64_t cur_count = 0;
  uint32_t cur_dtype = 0;
  uint32_t cur_op = 0;
  // Announces operation `seq` (on `ring`, with these arguments) in this
  // rank's control block.
  void Begin(const Ring& ring, uint64_t count, DataType dtype, uint32_t op) {
    Control* me = ctrl[rank];
    cur_ring = &ring;
    cur_count = count;
    cur_dtype = static_cast<uint32_t>(dtype);
    cur_op = op;
    me->started_count.store(count, std::memory_order_relaxed);
    me->started_dtype.store(cur_dtype, std::memory_order_relaxed);
    me->started_op.store(op, std::memory_order_relaxed);
    me->started.store((seq + 1) << 1 | ring.index, std::memory_order_release);
  }
  // kDataLoss when rank `r` announced this very operation (the same
  // sequence number) with other arguments or on the other ring: then it
  // would never publish what this rank waits for.
  // At a timeout waiting for `peer`: who `peer` waits for, and so on, to
  // the rank the chain ends at (not waiting, or stopped inside a wait: its
  // last look is old). That rank is named when it is not `peer` itself; a
  // chain back to this rank or around a cycle names nobody.
  std::string WaitChain(int peer, Clock::time_point now) const {
    constexpr int64_t kStaleNs = 250'000'000;  // waiters look every ~1 ms
    const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    std::vector<bool> seen(static_cast<size_t>(size), false);
    std::string path;
    int r = peer;
    bool stale = false;
    for (;;) {
      seen[static_cast<size_t>(r)] = true;
      const uint32_t w = ctrl[r]->waiting_on.load(std::memory_order_acquire);
      const int64_t looked = ctrl[r]->looked_ns.load(std::memory_order_relaxed);
      if (w == 0 || static_cast<int>(w) - 1 == r) break;
      if (now_ns - looked > kStaleNs) {
        stale = true;
        break;
      }
      const int next = static_cast<int>(w) - 1;
      if (next == rank || next >= size || seen[static_cast<size_t>(next)]) return "";
      path += (path.empty() ? "rank " : ", rank ") + std::to_string(r) + " waits for rank " + std::to_string(next);
      r = next;
    }
    if (r == peer) return "";
    return "; behind it: " + path + ", and rank " + std::to_string(r) +
           (stale ? " has not moved for " + std::to_string((now_ns - ctrl[r]->looked_ns.load()) / 1000000) + " ms"
                  : " is not waiting for anyone") +
           " (stopped, dead or far behind): the job's first fault is rank " + std::to_string(r);
  }

  Status CheckStarted(int r) const {
    const Control* p = ctrl[r];
    const uint64_t started = p->started.load(std::memory_order_acquire);
    if (cur_ring == nullptr || started >> 1 != seq + 1) return Status::Ok();
    const uint64_t count = p->started_count.load(std::memory_order_relaxed);
    const uint32_t dtype = p->started_dtype.load(std::memory_order_relaxed);
    const uint32_t op = p->started_op.load(std::memory_order_relaxed);
    if (p->started.load(std::memory_order_acquire) != started) return Status::Ok();  // moved on meanwhile
    if ((started & 1) == cur_ring->index && count == cur_count && dtype == cur_dtype && op == cur_op) {
      return Status::Ok();
    }
    return Mismatch(r, seq, op, count, dtype, seq, cur_op, cur_count, static_cast<DataType>(cur_dtype));
  }

  // How a two-shot all-reduce moves its bytes, chosen by measurement per
  // size class: kSlotsCached / kSlotsStreaming, through the slots with
  // cached or streaming (non-temporal) stores into what peers read, or
  // kSingleCopy (CmaAllReduce). The best differs between machines and
  // over time: this VM switches, every few seconds to minutes, between a
  // state where a core reads lines another core just wrote at full speed
  // and one where that costs 3-4x (streaming stores avoid that path but
  // cost 1.2-1.6x in the fast state), and its process_vm_readv copies at a
  // third of memcpy's speed. Every rank counts the calls of each size
  // class (the same sequence on all ranks): the first two rounds cycle
  // through the available modes, later calls run rank 0's plan except every
  // kExploreEvery-th, which runs another mode; rank 0 times every call (its
  // time covers every rank's part). The plan a call follows is the same on
  // every rank (the modes need not interoperate): rank 0 changes it at the
  // end of call k for calls k + 2 on, and no rank starts call k + 2 before
  // it has seen rank 0 in call k + 1.
  static constexpr int kSlotsCached = 0, kSlotsStreaming = 1, kSingleCopy = 2, kModes = 3;
  struct ModeStats {
    double recent[kModes][4] = {};  // rank 0: the last 4 call times per mode (s)
    uint64_t tries[kModes] = {};
    uint64_t calls = 0;             // every rank
    // The best of the last (up to) 4 times: robust to a slow call, and a
    // mode that got slower shows it within 4 calls of it.
    double Estimate(int k) const {
      double best = 1e30;
      for (uint64_t i = 0; i < std::min<uint64_t>(tries[k], 4); ++i) best = std::min(best, recent[k][i]);
      return best;
    }
  };
  ModeStats modes[64];  // by log2 of the operation's bytes

  static int PlanMode(uint64_t plan, uint64_t k) {
    return static_cast<int>(k >= (plan >> 8) ? plan & 0xf : (plan >> 4) & 0xf);
  }
  // The mode of call k (from 1) of `bucket`, among `avail` (bit i: mode i).
  int ModeFor(int bucket, uint64_t k, uint32_t avail) const {
    int list[kModes];
    int cnt = 0;
    for (int i = 0; i < kModes; ++i) {
      if ((avail >> i & 1) != 0) list[cnt++] = i;
    }
    if (k <= 2u * static_cast<uint64_t>(cnt)) return list[(k - 1) % static_cast<uint64_t>(cnt)];
    const int best = PlanMode(ctrl[0]->mode_plan[bucket].load(std::memory_order_relaxed), k);
    if (k % kExploreEvery == 0) {
      size_t i = static_cast<size_t>(k / kExploreEvery % static_cast<uint64_t>(cnt));
      if (list[i] == best) i = (i + 1) % static_cast<size_t>(cnt);
      return list[i];
    }
    // A class whose sizes straddle a CIUIC_SHM_CMA_* limit.
    return (avail >> best & 1) != 0 ? best : list[0];
  }
  // Rank 0, after call k of `bucket` ran `mode` in `t` seconds: calls from
  // k + 2 on run the mode with the best recent time.
  void Record(int bucket, uint64_t k, int mode, double t, uint32_t avail) {
    ModeStats& st = modes[bucket];
    st.recent[mode][st.tries[mode] % 4] = t;
    ++st.tries[mode];
    int best = -1;
    double best_t = 1e30;
    for (int i = 0; i < kModes; ++i) {
      if ((avail >> i & 1) == 0) continue;
      if (st.tries[i] == 0) return;
      if (st.Estimate(i) < best_t) {
        best_t = st.Estimate(i);
        best = i;
      }
    }
    std::atomic<uint64_t>& plan = ctrl[0]->mode_plan[bucket];
    const uint64_t cur = plan.load(std::memory_order_relaxed);
    if (best < 0 || PlanMode(cur, k + 2) == best) return;
    plan.store((k + 2) << 8 | static_cast<uint64_t>(PlanMode(cur, k + 1)) << 4 | static_cast<uint64_t>(best),
               std::memory_order_relaxed);
  }

  // Publishes `v` in this rank's `word` (a counter or a stamp) and wakes
  // peers asleep on this rank's bell.
  void Publish(std::atomic<uint64_t>& word, uint64_t v) {
    Control* me = ctrl[rank];
    // seq_cst store and load against the sleeper's seq_cst increment and
    // re-check (Stall::Wait): one of the two sees the other. On x86 the
    // store is one xchg, cheaper than a release store and an mfence.
    word.store(v, std::memory_order_seq_cst);
    if (me->sleepers.load(std::memory_order_seq_cst) != 0) {
      me->bell.fetch_add(1, std::memory_order_release);
      FutexWakeAll(&me->bell);
    }
  }

  // The first rank whose `which` is below `target` (-1: none).
  int FirstBelow(Counter Control::*which, uint64_t target) const {
    for (int r = 0; r < size; ++r) {
      if ((ctrl[r]->*which).v.load(std::memory_order_acquire) < target) return r;
    }
    return -1;
  }
  // The first peer whose slot of `ring` does not hold chunk `g` yet (-1: none).
  int FirstNotIn(const Ring& ring, uint64_t g) const {
    for (int r = 0; r < size; ++r) {
      if (r != rank && ring.Header(r, g).stamp.load(std::memory_order_acquire) != g + 1) return r;
    }
    return -1;
  }
  // Slot reuse: chunk g takes the slots of chunk g - nslots of its ring,
  // free once every rank's `out` of that ring passed that chunk. The first
  // rank still behind (*need: the `out` it must reach), or -1 when the slot
  // is free (the lowest `out` seen is cached in free_upto, so most calls
  // read nothing).
  int SlotHolder(Ring& ring, uint64_t g, uint64_t* need) {
    if (g < ring.nslots || ring.free_upto >= g - ring.nslots + 1) return -1;
    *need = g - ring.nslots + 1;
    const int r = FirstBelow(ring.out, *need);
    if (r >= 0) return r;
    uint64_t low = UINT64_MAX;
    for (int q = 0; q < size; ++q) low = std::min(low, (ctrl[q]->*ring.out).v.load(std::memory_order_acquire));
    ring.free_upto = low;
    return -1;
  }
  // Publishes that this rank is done reading chunk `g` of `ring` everywhere.
  void PublishOut(const Ring& ring, uint64_t g) { Publish((ctrl[rank]->*ring.out).v, g + 1); }
  // Fills this rank's header of chunk `g` (its payload already in) and
  // publishes it: the stamp last.
  void Post(const Ring& ring, uint64_t g, uint64_t seq, size_t count, DataType dtype, uint32_t op) {
    SlotHeader& h = ring.Header(rank, g);
    h.seq = seq;
    h.count = count;
    h.dtype = static_cast<uint32_t>(dtype);
    h.op = op;
    Publish(h.stamp, g + 1);
  }
  // The word rank `r` publishes `which` in (for Stall).
  std::atomic<uint64_t>* Word(int r, Counter Control::*which) const { return &(ctrl[r]->*which).v; }

  // "" when this process reads rank p's memory with process_vm_readv (its
  // cookie, read through its own address space, matches the mapped one),
  // else why not.
  std::string ProbeCma(int p) const {
    const Control* pc = ctrl[p];
    uint64_t got = 0;
    const auto cookie_at = pc->self_addr + static_cast<uint64_t>(reinterpret_cast<const char*>(&pc->cookie) -
                                                                  reinterpret_cast<const char*>(pc));
    iovec local{&got, sizeof(got)};
    iovec remote{reinterpret_cast<void*>(cookie_at), sizeof(got)};
    const ssize_t n = process_vm_readv(static_cast<pid_t>(pc->pid), &local, 1, &remote, 1, 0);
    const std::string who = "rank " + std::to_string(p) + " (pid " + std::to_string(pc->pid) + ")";
    if (n < 0) {
      const int e = errno;
      return "process_vm_readv of " + who + ": " + std::strerror(e) +
             (e == EPERM ? " (another user, Yama's ptrace_scope, or a seccomp filter)"
                         : e == ENOSYS ? " (not in this kernel, or blocked by seccomp)" : "");
    }
    if (n != static_cast<ssize_t>(sizeof(got)) || got != pc->cookie) {
      return who + " is not the process behind its region here (another pid namespace?)";
    }
    return "";
  }

  // Publishes that this rank has mapped every peer's region and waits
  // until every peer has (Control::attached).
  Status AwaitAttached(Clock::time_point deadline);

  // Fails this rank's side for good and tells the peers why.
  Status Fail(Status s) {
    if (error.ok()) {
      error = s;
      Control* me = ctrl[rank];
      const std::string text = s.ToString();
      const size_t n = std::min(text.size(), sizeof(me->reason) - 1);
      std::memcpy(me->reason, text.data(), n);
      me->reason[n] = '\0';
      me->failed.store(1, std::memory_order_release);
      me->bell.fetch_add(1, std::memory_order_release);
      FutexWakeAll(&me->bell);
    }
    return s;
  }

  // An error when rank `r` failed or its connection reports it gone.
  Status PeerStatus(int r, bool poll_connection) const {
    if (ctrl[r]->failed.load(std::memory_order_acquire) != 0) {
      std::string why(ctrl[r]->reason, strnlen(ctrl[r]->reason, sizeof(ctrl[r]->reason)));
      return UnavailableError("direct shm: rank " + std::to_string(r) + " failed: " + why);
    }
    if (poll_connection && conns[r] != nullptr) {
      transport::Completion c[4];
      StatusOr<size_t> p = conns[r]->Progress(c, 4);
      if (!p.ok()) return Status(p.status().code(), "direct shm: rank " + std::to_string(r) + ": " + p.status().message());
    }
    return Status::Ok();
  }

  // The header's `op` field: a ReduceOp for an all-reduce, kBroadcastOp |
  // root for a broadcast; the text names it in errors.
  static std::string OpText(uint32_t code) {
    const std::string root = "rank " + std::to_string(code >> 8 & 0xffffu);
    const char* op = ReduceOpName(static_cast<ReduceOp>(code & 0xffu));
    switch (code & kKindMask) {
      case 0: return std::string("allreduce ") + op;
      case kBroadcastOp: return "broadcast from " + root;
      case kReduceOp: return std::string("reduce ") + op + " to " + root;
      case kAllGatherOp: return "allgather";
      case kReduceScatterOp: return std::string("reduce_scatter ") + op;
      case kAllToAllOp: return "alltoall";
      case kBarrierOp: return "barrier";
      case kCmaAllReduceOp: return std::string("single-copy allreduce ") + op;
    }
    return "operation " + std::to_string(code);
  }
  Status CheckHeader(const Ring& ring, int r, uint64_t g, uint64_t want_seq, size_t count, DataType dtype,
                     uint32_t op) const {
    const SlotHeader& h = ring.Header(r, g);
    if (h.seq == want_seq && h.count == count && h.dtype == static_cast<uint32_t>(dtype) && h.op == op) {
      return Status::Ok();
    }
    return Mismatch(r, h.seq, h.op, h.count, h.dtype, want_seq, op, count, dtype);
  }
  static Status Mismatch(int r, uint64_t their_seq, uint32_t their_op, uint64_t their_count, uint32_t their_dtype,
                         uint64_t seq, uint32_t op, uint64_t count, DataType dtype) {
    return DataLossError("direct shm: rank " + std::to_string(r) + " is in another operation (its #" +
                         std::to_string(their_seq) + ": " + OpText(their_op) + ", count " + std::to_string(their_count) +
                         ", dtype " + std::to_string(their_dtype) + "; this rank's #" + std::to_string(seq) + ": " +
                         OpText(op) + ", count " + std::to_string(count) + ", " + DataTypeName(dtype) +
                         "): mismatched counts, roots or calls across ranks?");
  }
};

// Tracks one stall: spin, then yield, then futex sleep on the awaited
// peer's bell, with liveness, abort and deadline checks.
class Stall {
 public:
  Stall(ShmDirect::Impl& impl, Clock::time_point deadline, const std::atomic<bool>* abort)
      : impl_(impl), deadline_(deadline), abort_(abort) {}
  // The deadline `timeout` after the first wait (no clock read by a call
  // that never waits).
  Stall(ShmDirect::Impl& impl, std::chrono::milliseconds timeout, const std::atomic<bool>* abort)
      : impl_(impl), abort_(abort), timeout_(timeout), lazy_deadline_(true) {}
  ~Stall() { Reset(); }
  void Reset() {
    if (stalled_) impl_.ctrl[impl_.rank]->waiting_on.store(0, std::memory_order_release);
    stalled_ = false;
  }

  // Waits a little for rank `peer`'s `word` to reach `target` (a chunk
  // counter, named in the timeout error, unless `counts_chunks` is false).
  Status Wait(int peer, const std::atomic<uint64_t>* word, uint64_t target, const char* what,
              bool counts_chunks = true) {
    const Clock::time_point now = Clock::now();
    if (!stalled_) {
      stalled_ = true;
      since_ = now;
      last_liveness_ = now;
      if (lazy_deadline_) {
        deadline_ = now + timeout_;
        lazy_deadline_ = false;
      }
    }
    Control* me = impl_.ctrl[impl_.rank];
    me->waiting_on.store(static_cast<uint32_t>(peer) + 1, std::memory_order_release);
    me->looked_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
                        std::memory_order_relaxed);
    if (abort_ != nullptr && abort_->load(std::memory_order_relaxed)) {
      return AbortedError("direct shm: communicator aborted");
    }
    if (now >= deadline_) {
      return DeadlineExceededError("direct shm: timed out waiting for rank " + std::to_string(peer) + " (" + what +
                                   (counts_chunks ? ", chunk " + std::to_string(target - 1) : std::string()) + ")" +
                                   impl_.WaitChain(peer, now));
    }
    Status gone;
    if (peer != impl_.rank) {
      gone = impl_.PeerStatus(peer, false);
      if (gone.ok()) gone = impl_.CheckStarted(peer);
    }
    if (gone.ok() && now - last_liveness_ >= kLivenessEvery) {
      // Every peer's failure word, not only the awaited one's: that one may
      // be a survivor waiting, like this rank, for one that died (and it
      // says so there). Only the awaited peer's connection counts: another
      // peer may have finished its part and left (its words stay mapped);
      // one that left too early is named by whoever waits for it.
      last_liveness_ = now;
      for (int r = 0; r < impl_.size && gone.ok(); ++r) {
        if (r != impl_.rank) gone = impl_.PeerStatus(r, r == peer);
      }
    }
    if (!gone.ok()) {
      // The peer may have published what this rank waits for since the
      // caller looked, and then left: that is no error, its memory stays
      // mapped here.
      if (word->load(std::memory_order_acquire) >= target) return Status::Ok();
      return gone;
    }
    const auto waited = now - since_;
    if (waited < impl_.spin_for) {
      // One pause per look: on Zen a pause is ~60 cycles, and the hand-off
      // this waits for takes ~100 ns.
      CpuRelax();
      return Status::Ok();
    }
    if (waited < kYieldFor) {
      sched_yield();
      return Status::Ok();
    }
    Control* p = impl_.ctrl[peer];
    const uint32_t seen = p->bell.load(std::memory_order_acquire);
    p->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (word->load(std::memory_order_seq_cst) < target) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline_ - now);
      FutexWait(&p->bell, seen, std::min<std::chrono::microseconds>(kSleepStep, left));
    }
    p->sleepers.fetch_sub(1, std::memory_order_relaxed);
    return Status::Ok();
  }

 private:
  ShmDirect::Impl& impl_;
  Clock::time_point deadline_;
  const std::atomic<bool>* abort_;
  std::chrono::milliseconds timeout_{0};
  bool lazy_deadline_ = false;
  bool stalled_ = false;
  Clock::time_point since_;
  Clock::time_point last_liveness_;
};

Status ShmDirect::Impl::AwaitAttached(Clock::time_point deadline) {
  Publish(ctrl[rank]->attached, 1);
  Stall stall(*this, deadline, nullptr);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    while (ctrl[p]->attached.load(std::memory_order_acquire) == 0) {
      CIUIC_RETURN_IF_ERROR(stall.Wait(p, &ctrl[p]->attached, 1, "mapping the regions", false));
    }
    stall.Reset();
  }
  return Status::Ok();
}

namespace {
// The one exchange of the small collectives (ShmDirect::Reduce and the
// others): copies `in_bytes` of `in` into this rank's slot of the next
// chunk and publishes it; when `reads`, waits for every rank's, checks
// that they run the same operation and calls `take(inputs)` with the n
// inputs in rank order (an array it may change); then marks the chunk
// done. A template, not a std::function: the callers' lambdas would not
// fit its inline buffer, and this is the small-message path.
template <typename Take>
Status Exchange(ShmDirect::Impl& m, const void* in, size_t in_bytes, uint32_t code, size_t count, DataType dtype,
                bool reads, const Take& take, Clock::time_point deadline, const std::atomic<bool>* abort) {
  if (!m.error.ok()) return Status(m.error.code(), "direct shm failed earlier: " + m.error.message());
  ShmDirect::Impl::Ring& ring = m.RingFor(in_bytes);
  if (in_bytes > ring.slot_bytes) {
    return InvalidArgumentError("direct shm " + ShmDirect::Impl::OpText(code) + ": an input of " +
                                std::to_string(in_bytes) + " B does not fit a slot of " +
                                std::to_string(ring.slot_bytes) + " B");
  }
  const uint64_t g = ring.next_chunk;
  const uint64_t seq = m.seq;
  const int me = m.rank;
  m.Begin(ring, count, dtype, code);
  Stall stall(m, deadline, abort);
  uint64_t need = 0;
  for (int r = m.SlotHolder(ring, g, &need); r >= 0; r = m.SlotHolder(ring, g, &need)) {
    Status s = stall.Wait(r, m.Word(r, ring.out), need, "freeing a slot");
    if (!s.ok()) return m.Fail(s);
  }
  stall.Reset();
  if (in_bytes > 0) std::memcpy(ring.Payload(me, g, in_bytes), in, in_bytes);
  m.Post(ring, g, seq, count, dtype, code);
  if (reads) {
    for (int r = m.FirstNotIn(ring, g); r >= 0; r = m.FirstNotIn(ring, g)) {
      Status s = stall.Wait(r, &ring.Header(r, g).stamp, g + 1, "its input");
      if (!s.ok()) return m.Fail(s);
    }
    const void* stack[64];
    std::vector<const void*> heap;
    const void** inputs = stack;
    if (m.size > 64) {
      heap.resize(m.size);
      inputs = heap.data();
    }
    for (int q = 0; q < m.size; ++q) {
      if (q != me) {
        Status bad = m.CheckHeader(ring, q, g, seq, count, dtype, code);
        if (!bad.ok()) return m.Fail(bad);
      }
      inputs[q] = ring.Payload(q, g, in_bytes);
    }
    Status s = take(inputs);
    if (!s.ok()) return m.Fail(s);
  }
  m.PublishOut(ring, g);
  ring.next_chunk = g + 1;
  m.seq = seq + 1;
  return Status::Ok();
}

// Reads `bytes` at `remote` in rank r's address space into `local`.
Status ReadPeer(const ShmDirect::Impl& m, int r, void* local, uint64_t remote, size_t bytes, const char* what) {
  auto* dst = static_cast<char*>(local);
  while (bytes > 0) {
    iovec l{dst, bytes};
    iovec rv{reinterpret_cast<void*>(remote), bytes};
    const ssize_t got = process_vm_readv(static_cast<pid_t>(m.pids[r]), &l, 1, &rv, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int e = got < 0 ? errno : EFAULT;
      return UnavailableError("direct shm single-copy: reading rank " + std::to_string(r) + "'s " + what + " (pid " +
                              std::to_string(m.pids[r]) + ", " + std::to_string(bytes) + " B): " + std::strerror(e) +
                              (e == ESRCH    ? " (the rank is gone)"
                               : e == EFAULT ? " (its buffer is shorter than the count, or was freed during the call)"
                                             : ""));
    }
    dst += got;
    remote += static_cast<uint64_t>(got);
    bytes -= static_cast<size_t>(got);
  }
  return Status::Ok();
}

// The single-copy all-reduce (ShmDirect::AllReduce): announce the buffers;
// reduce slice `me` of every rank's send (the peers' read in pieces into
// scratch) into recv; read every peer's reduced slice from its recv; wait
// until every peer has read this rank's. Slices as the two-shot's: each
// element reduced once, in rank order, so every rank ends with the same
// bytes. In place (send == recv) is safe: a rank overwrites slice q of its
// buffer only after rank q has published slice q's result, that is after
// every read of slice q.
Status CmaAllReduce(ShmDirect::Impl& m, const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                    const kernels::Reducer& reducer, Clock::time_point deadline, const std::atomic<bool>* abort) {
  const int n = m.size;
  const int me = m.rank;
  const size_t es = DataTypeSize(dtype);
  const uint64_t seq = m.seq;
  Control* mine = m.ctrl[me];
  m.Begin(m.large, count, dtype, kCmaAllReduceOp | static_cast<uint32_t>(op));
  mine->cma_send.store(reinterpret_cast<uintptr_t>(send), std::memory_order_relaxed);
  mine->cma_recv.store(reinterpret_cast<uintptr_t>(recv), std::memory_order_relaxed);
  m.Publish(mine->cma_posted.v, seq + 1);

  Stall stall(m, deadline, abort);
  auto await = [&](int r, Counter Control::*which, const char* what) -> Status {
    const std::atomic<uint64_t>* w = m.Word(r, which);
    while (w->load(std::memory_order_acquire) < seq + 1) {
      CIUIC_RETURN_IF_ERROR(stall.Wait(r, w, seq + 1, what, false));
    }
    stall.Reset();
    return Status::Ok();
  };
  const size_t align_elems = std::max<size_t>(1, kSliceAlign / es);
  auto bound = [&](int q) -> size_t {
    if (q >= n) return count;
    return count * static_cast<size_t>(q) / static_cast<size_t>(n) / align_elems * align_elems;
  };
  // Pieces small enough that all n of them stay in L2 between the read and
  // the reduction.
  const size_t piece_bytes = std::clamp<size_t>((512u << 10) / static_cast<size_t>(n), 16u << 10, 128u << 10);
  const size_t piece = std::max<size_t>(1, piece_bytes / es / align_elems) * align_elems;
  if (m.cma_scratch_bytes < piece * es * static_cast<size_t>(n)) {
    m.cma_scratch_bytes = piece * es * static_cast<size_t>(n);
    m.cma_scratch.reset(static_cast<char*>(std::aligned_alloc(4096, (m.cma_scratch_bytes + 4095) / 4096 * 4096)));
    if (m.cma_scratch == nullptr) {
      m.cma_scratch_bytes = 0;
      return m.Fail(ResourceExhaustedError("direct shm single-copy: no memory for scratch"));
    }
  }
  // Peers' buffers: stable until they see this rank's `cma_done`.
  auto peer_send = [&](int r) { return m.ctrl[r]->cma_send.load(std::memory_order_relaxed); };
  auto peer_recv = [&](int r) { return m.ctrl[r]->cma_recv.load(std::memory_order_relaxed); };
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    Status s = await(r, &Control::cma_posted, "its buffers");
    if (s.ok()) s = m.CheckStarted(r);
    if (!s.ok()) return m.Fail(s);
  }

  // 1. Slice `me` of every input, reduced into recv.
  const auto* in = static_cast<const char*>(send);
  auto* out = static_cast<char*>(recv);
  const bool in_place = send == recv;
  const void* stack[64];
  std::vector<const void*> heap;
  const void** srcs = stack;
  if (n > 64) {
    heap.resize(static_cast<size_t>(n));
    srcs = heap.data();
  }
  for (size_t at = bound(me), end = bound(me + 1); at < end; at += piece) {
    const size_t len = std::min(piece, end - at);
    for (int q = 0; q < n; ++q) {
      char* scratch = m.cma_scratch.get() + static_cast<size_t>(q) * piece * es;
      if (q != me) {
        Status s = ReadPeer(m, q, scratch, peer_send(q) + at * es, len * es, "input");
        if (!s.ok()) return m.Fail(s);
        srcs[q] = scratch;
      } else if (in_place && q >= kernels::kMaxSources) {
        // ReduceInOrder folds inputs past the kernel's arity in after
        // writing the output: this one would be gone.
        std::memcpy(scratch, in + at * es, len * es);
        srcs[q] = scratch;
      } else {
        srcs[q] = in + at * es;
      }
    }
    Status s = ReduceInOrder(reducer, out + at * es, srcs, n, len, dtype, op);
    if (!s.ok()) return m.Fail(s);
  }
  m.Publish(mine->cma_reduced.v, seq + 1);

  // 2. Every peer's reduced slice, from its recv straight into this one.
  for (int k = 1; k < n; ++k) {
    const int q = (me + k) % n;
    Status s = await(q, &Control::cma_reduced, "its reduced slice");
    const size_t a = bound(q), b = bound(q + 1);
    if (s.ok()) s = ReadPeer(m, q, out + a * es, peer_recv(q) + a * es, (b - a) * es, "reduced slice");
    if (!s.ok()) return m.Fail(s);
  }
  m.Publish(mine->cma_done.v, seq + 1);
  // 3. The peers read this rank's recv until they say done.
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    Status s = await(r, &Control::cma_done, "its read of this rank's result");
    if (!s.ok()) return m.Fail(s);
  }
  m.seq = seq + 1;
  return Status::Ok();
}
}  // namespace

ShmDirect::ShmDirect(std::unique_ptr<Impl> impl, const ShmDirectOptions& options)
    : impl_(std::move(impl)), options_(options) {}

ShmDirect::~ShmDirect() {
  if (impl_ == nullptr) return;
  // Connections and mappings of the peers first, then this rank's region.
  impl_->conns.clear();
  impl_->region.reset();
}

StatusOr<std::unique_ptr<ShmDirect>> ShmDirect::Create(transport::Backend& backend,
                                                       transport::Store& store,
                                                       const std::string& prefix, int rank,
                                                       int size, const ShmDirectOptions& options,
                                                       std::chrono::milliseconds timeout,
                                                       const transport::PeerCheck& check) {
  if (options.slot_bytes == 0 || options.nslots < 2) {
    return InvalidArgumentError("direct shm all-reduce: needs slots of > 0 bytes and at least 2 of them");
  }
  auto impl = std::make_unique<Impl>();
  impl->rank = rank;
  impl->size = size;
  impl->spin_for = options.spin;
  Impl::Ring& large = impl->large;
  Impl::Ring& small = impl->small;
  large.nslots = options.nslots;
  large.slot_bytes = options.slot_bytes;
  large.out = &Control::out;
  large.index = 0;
  // The small ring: one-shot-sized slots (never larger than the large ring's).
  const size_t small_bytes = std::min(options.one_shot_max_bytes, options.slot_bytes);
  small.nslots = options.small_slots >= 2 && small_bytes > 0 ? options.small_slots : 0;
  small.slot_bytes = small.nslots > 0 ? small_bytes : 0;
  small.out = &Control::small_out;
  small.index = 1;
  small.stride = kSmallHeaderBytes;
  small.inline_bytes = std::min(kSmallInlineBytes, small.slot_bytes);
  for (Impl::Ring* ring : {&large, &small}) {
    const bool pow2 = ring->nslots > 1 && (ring->nslots & (ring->nslots - 1)) == 0;
    ring->mask = pow2 ? ring->nslots - 1 : 0;
  }
  // Control | large headers | small headers | (page) large slots | small slots.
  const size_t data_off = DataOffset(large.nslots, small.nslots);
  const size_t small_off = data_off + large.nslots * large.slot_bytes;
  const size_t bytes = small_off + small.nslots * small.slot_bytes;
  CIUIC_ASSIGN_OR_RETURN(impl->region, backend.Allocate(bytes));
  auto* base = static_cast<char*>(impl->region->data());
  auto* me = new (base) Control();
  me->magic = kMagic;
  me->version = kVersion;
  me->rank = static_cast<uint32_t>(rank);
  me->nslots = large.nslots;
  me->slot_bytes = large.slot_bytes;
  me->small_nslots = small.nslots;
  me->small_slot_bytes = small.slot_bytes;
  me->pid = static_cast<int64_t>(getpid());
  me->self_addr = reinterpret_cast<uintptr_t>(base);
  me->cookie = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32) ^ 0x5bd1e995u;
  me->cma_wanted = size > 1 ? static_cast<uint64_t>(std::clamp(options.cma, 0, 2)) : 0;
  me->cma_min = options.cma_min_bytes;
  me->cma_max = options.cma_max_bytes;
  impl->pids.assign(size, 0);
  impl->ctrl.assign(size, nullptr);
  impl->conns.resize(size);
  for (Impl::Ring* ring : {&large, &small}) {
    ring->headers.assign(size, nullptr);
    ring->data.assign(size, nullptr);
  }
  auto place = [&](int r, char* at) {
    impl->ctrl[r] = reinterpret_cast<Control*>(at);
    large.headers[r] = at + kControlBytes;
    small.headers[r] = large.headers[r] + large.nslots * kHeaderBytes;
    large.data[r] = at + data_off;
    small.data[r] = at + small_off;
  };
  place(rank, base);

  const std::string key = prefix + "/direct/region/";
  const std::string layout_hint = " (CIUIC_BUFFER_SIZE / CIUIC_CHUNK_SIZE differ between ranks?)";
  CIUIC_RETURN_IF_ERROR(store.Set(key + std::to_string(rank), impl->region->Describe()));
  const auto deadline = Clock::now() + timeout;
  auto map_peers = [&]() -> Status {
    for (int p = 0; p < size; ++p) {  // ascending peer order on every rank: no connect cycle
      if (p == rank) continue;
      CIUIC_ASSIGN_OR_RETURN(impl->conns[p], transport::ConnectThroughStore(backend, store, prefix + "/direct", rank, p,
                                                                            kConnectionTag, timeout, check));
      CIUIC_ASSIGN_OR_RETURN(std::string blob,
                             transport::GetWhilePeerLives(store, key + std::to_string(p), timeout, p, check));
      CIUIC_ASSIGN_OR_RETURN(transport::RemoteRegion remote, impl->conns[p]->ImportRegion(blob));
      char* pb = static_cast<char*>(impl->conns[p]->PeerMemoryPointer(remote, 0));
      if (pb == nullptr) {
        return UnimplementedError(std::string("direct shm all-reduce: the ") + transport::BackendName(backend.kind()) +
                                  " backend cannot map rank " + std::to_string(p) + "'s memory");
      }
      if (remote.size < kControlBytes) {
        return InvalidArgumentError("direct shm all-reduce: rank " + std::to_string(p) + "'s region has only " +
                                    std::to_string(remote.size) + " bytes");
      }
      auto* pc = reinterpret_cast<Control*>(pb);
      if (pc->magic != kMagic || pc->version != kVersion || pc->rank != static_cast<uint32_t>(p)) {
        return InvalidArgumentError("direct shm all-reduce: rank " + std::to_string(p) +
                                    "'s region is not a direct region of this version (version " +
                                    std::to_string(pc->version) + ", this rank's " + std::to_string(kVersion) +
                                    "): another ciuic build?");
      }
      if (pc->nslots != large.nslots || pc->slot_bytes != large.slot_bytes || pc->small_nslots != small.nslots ||
          pc->small_slot_bytes != small.slot_bytes) {
        return InvalidArgumentError("direct shm all-reduce: rank " + std::to_string(p) + " uses " +
                                    std::to_string(pc->nslots) + " slots of " + std::to_string(pc->slot_bytes) +
                                    " bytes and " + std::to_string(pc->small_nslots) + " small slots of " +
                                    std::to_string(pc->small_slot_bytes) + ", this rank " +
                                    std::to_string(large.nslots) + " of " + std::to_string(large.slot_bytes) + " and " +
                                    std::to_string(small.nslots) + " of " + std::to_string(small.slot_bytes) +
                                    layout_hint);
      }
      if (remote.size < bytes) {
        return InvalidArgumentError("direct shm all-reduce: rank " + std::to_string(p) + "'s region has " +
                                    std::to_string(remote.size) + " bytes, this rank's " + std::to_string(bytes) +
                                    layout_hint);
      }
      if (pc->cma_wanted != me->cma_wanted) {
        const char* names[] = {"off", "auto", "on"};
        return InvalidArgumentError("direct shm all-reduce: rank " + std::to_string(p) + " has CIUIC_SHM_CMA=" +
                                    names[std::min<uint64_t>(pc->cma_wanted, 2)] + ", this rank " +
                                    names[me->cma_wanted] + ": every rank must set the same");
      }
      if (me->cma_wanted != 0 && (pc->cma_min != me->cma_min || pc->cma_max != me->cma_max)) {
        return InvalidArgumentError("direct shm all-reduce: rank " + std::to_string(p) +
                                    " takes single-copy all-reduces of " + std::to_string(pc->cma_min) + " to " +
                                    std::to_string(pc->cma_max) + " bytes, this rank " + std::to_string(me->cma_min) +
                                    " to " + std::to_string(me->cma_max) +
                                    " (CIUIC_SHM_CMA_MIN / CIUIC_SHM_CMA_MAX differ between ranks?)");
      }
      impl->pids[p] = pc->pid;
      place(p, pb);
    }
    return Status::Ok();
  };
  Status s = map_peers();
  if (s.ok()) {
    // Single-copy needs every rank to read every other's memory: each
    // probes its peers and says so before `attached`; after it, all ranks
    // see the same answers and so take the same path.
    std::string why;
    if (me->cma_wanted == 0) why = size > 1 ? "CIUIC_SHM_CMA=off" : "one rank";
    for (int p = 0; p < size && why.empty(); ++p) {
      if (p != rank) why = impl->ProbeCma(p);
    }
    me->cma_ok.store(why.empty() ? 1 : 2, std::memory_order_relaxed);
    s = impl->AwaitAttached(deadline);
    if (s.ok()) {
      for (int p = 0; p < size && why.empty(); ++p) {
        if (p != rank && impl->ctrl[p]->cma_ok.load(std::memory_order_relaxed) != 1) {
          why = "rank " + std::to_string(p) + " cannot read every peer's memory";
        }
      }
      impl->cma = why.empty();
      impl->cma_always = impl->cma && me->cma_wanted == 2;
      impl->cma_note = why.empty() ? std::string("single-copy (process_vm_readv) all-reduces of ") +
                                         std::to_string(options.cma_min_bytes) + " to " +
                                         std::to_string(options.cma_max_bytes) + " B" +
                                         (impl->cma_always ? " (always: CIUIC_SHM_CMA=on)"
                                                           : " where measured faster than the slots")
                                   : "no single-copy all-reduce: " + why;
      if (me->cma_wanted == 2 && !impl->cma) {
        s = UnavailableError("direct shm all-reduce: CIUIC_SHM_CMA=on, but " + why);
      }
    }
  }
  // Peers that mapped this region see why this rank left instead of
  // waiting for it to attach until the timeout.
  if (!s.ok()) return impl->Fail(s);
  // This rank's small-ring lines into its caches: fresh from the kernel's
  // zeroing they are in none, and each first write of a line would wait
  // for memory (perf/RESULTS.md, issue #22). Peers read them from this
  // core's cache; their own lines they touch themselves.
  uint64_t touched = 0;
  auto touch = [&touched](const char* p, size_t bytes) {
    for (size_t off = 0; off < bytes; off += 64) {
      touched += *reinterpret_cast<const volatile unsigned char*>(p + off);
    }
  };
  touch(small.headers[rank], small.nslots * small.stride);
  touch(small.data[rank], small.nslots * small.slot_bytes);
  (void)touched;
  return std::unique_ptr<ShmDirect>(new ShmDirect(std::move(impl), options));
}

Status ShmDirect::AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                            const kernels::Reducer& cached, const kernels::Reducer* streaming,
                            Clock::time_point deadline, const std::atomic<bool>* abort) {
  Impl& m = *impl_;
  if (!m.error.ok()) return Status(m.error.code(), "direct shm all-reduce failed earlier: " + m.error.message());
  if (op == ReduceOp::kAvg) return InvalidArgumentError("direct shm all-reduce: AVG is the caller's (sum, then scale)");
  if (count == 0) return Status::Ok();
  const size_t es = DataTypeSize(dtype);
  const int n = m.size;
  const int me = m.rank;
  // One-shot for every chunk when the (first) chunk is small.
  const bool one_shot = OneShot(count * es, options_);
  // Two-shot: the modes to choose from (Impl::ModeFor).
  uint32_t avail = 0;
  if (!one_shot && n > 1) {
    avail = 1u << Impl::kSlotsCached;
    if (streaming != nullptr) avail |= 1u << Impl::kSlotsStreaming;
    if (m.cma && count * es >= options_.cma_min_bytes && count * es <= options_.cma_max_bytes) {
      avail = m.cma_always ? 0 : avail;
      avail |= 1u << Impl::kSingleCopy;
    }
  }
  const bool adapt = __builtin_popcount(avail) > 1;
  int bucket = 0;  // log2 of the bytes (adapt only)
  uint64_t call = 0;
  int mode = avail == 1u << Impl::kSingleCopy ? Impl::kSingleCopy : Impl::kSlotsCached;
  Clock::time_point t_start;
  if (adapt) {
    bucket = 63 - __builtin_clzll(static_cast<unsigned long long>(count) * es);
    call = ++m.modes[bucket].calls;
    mode = m.ModeFor(bucket, call, avail);
    if (me == 0) t_start = Clock::now();
  }
  auto record = [&]() {
    if (adapt && me == 0) m.Record(bucket, call, mode, std::chrono::duration<double>(Clock::now() - t_start).count(), avail);
  };
  if (mode == Impl::kSingleCopy) {
    const kernels::Reducer& r =
        streaming != nullptr && count * es >= options_.stream_output_min_bytes ? *streaming : cached;
    CIUIC_RETURN_IF_ERROR(CmaAllReduce(m, send, recv, count, dtype, op, r, deadline, abort));
    record();
    return Status::Ok();
  }
  const bool stream_slots = mode == Impl::kSlotsStreaming && streaming != nullptr;
  Impl::Ring& ring = m.RingFor(count * es);
  const size_t chunk_elems = ring.slot_bytes / es;
  if (chunk_elems == 0) return InvalidArgumentError("direct shm all-reduce: slot smaller than one element");
  const size_t nchunks = (count + chunk_elems - 1) / chunk_elems;
  const uint64_t g0 = ring.next_chunk;
  const uint64_t seq = m.seq;
  const auto* in_base = static_cast<const char*>(send);
  auto* out_base = static_cast<char*>(recv);
  m.Begin(ring, count, dtype, static_cast<uint32_t>(op));
  const kernels::Reducer& reducer = stream_slots ? *streaming : cached;
  // The copy into the caller's output (two-shot): streaming when the output
  // is large (ShmDirectOptions::stream_output_min_bytes).
  const kernels::Reducer& out_copier =
      !one_shot && streaming != nullptr && count * es >= options_.stream_output_min_bytes ? *streaming : reducer;
  const size_t align_elems = std::max<size_t>(1, kSliceAlign / es);

  auto chunk_len = [&](size_t k) { return std::min(chunk_elems, count - k * chunk_elems); };
  // Two-shot slice q of a chunk of `len` elements: [Bound(q), Bound(q+1)).
  auto bound = [&](size_t len, int q) -> size_t {
    if (q >= n) return len;
    return len * static_cast<size_t>(q) / static_cast<size_t>(n) / align_elems * align_elems;
  };

  const void* srcs[256];
  std::vector<const void*> many;
  const void** src_list = srcs;
  if (n > 256) {
    many.resize(n);
    src_list = many.data();
  }

  Stall stall(m, deadline, abort);
  size_t in = 0, red = 0, out = 0;
  struct Blocker {
    int rank = -1;
    const std::atomic<uint64_t>* word = nullptr;
    uint64_t target = 0;
    const char* what = "";
  };
  while (out < nchunks) {
    bool progressed = false;
    // What each phase waits for; the wait goes to the phase nearest to
    // completing a chunk (copy-out, then reduce, then copy-in).
    Blocker wait_in, wait_red, wait_out;
    // 1. Copy inputs into free slots (ahead of the reductions).
    while (in < nchunks) {
      const uint64_t g = g0 + in;
      uint64_t need = 0;
      const int holder = m.SlotHolder(ring, g, &need);
      if (holder >= 0) {
        wait_in = {holder, m.Word(holder, ring.out), need, "freeing a slot"};
        break;
      }
      const size_t len = chunk_len(in);
      const char* src = in_base + in * chunk_elems * es;
      if (one_shot && len * es <= ring.inline_bytes) {
        std::memcpy(ring.Payload(me, g, len * es), src, len * es);
      } else if (one_shot) {
        reducer.Copy(ring.Slot(me, g), src, len * es);
      } else {
        // Every slice but this rank's own (reduced straight from the input).
        char* slot = ring.Slot(me, g);
        const size_t a = bound(len, me), b = bound(len, me + 1);
        reducer.Copy(slot, src, a * es);
        reducer.Copy(slot + b * es, src + b * es, (len - b) * es);
      }
      m.Post(ring, g, seq, count, dtype, static_cast<uint32_t>(op));
      ++in;
      progressed = true;
    }
    // 2. Reduce once every rank's chunk is in.
    if (red < in) {
      const uint64_t g = g0 + red;
      const int r = m.FirstNotIn(ring, g);
      if (r < 0) {
        for (int q = 0; q < n; ++q) {
          if (q == me) continue;
          Status bad = m.CheckHeader(ring, q, g, seq, count, dtype, static_cast<uint32_t>(op));
          if (!bad.ok()) return m.Fail(bad);
        }
        const size_t len = chunk_len(red);
        const size_t off = red * chunk_elems * es;
        auto peer_chunk = [&](int q) -> const char* {
          return one_shot ? ring.Payload(q, g, len * es) : ring.Slot(q, g);
        };
        Status s;
        if (one_shot) {
          // This rank's input too from its published copy: in place with
          // more ranks than the kernel takes, the output would be a later
          // input, folded in after the first pass has overwritten it.
          for (int q = 0; q < n; ++q) src_list[q] = peer_chunk(q);
          s = ReduceInOrder(reducer, out_base + off, src_list, n, len, dtype, op);
        } else {
          const size_t a = bound(len, me), b = bound(len, me + 1);
          for (int q = 0; q < n; ++q) src_list[q] = (q == me ? in_base + off : ring.Slot(q, g)) + a * es;
          s = ReduceInOrder(reducer, ring.Slot(me, g) + a * es, src_list, n, b - a, dtype, op);
        }
        if (!s.ok()) return m.Fail(s);
        ++red;
        if (one_shot) {
          m.PublishOut(ring, g);  // done reading every region for this chunk
          ++out;
        } else {
          m.Publish(m.ctrl[me]->reduced.v, g + 1);
        }
        progressed = true;
      } else {
        wait_red = {r, &ring.Header(r, g).stamp, g + 1, "its input"};
      }
    }
    // 3. Two-shot: copy the reduced slices out once every rank reduced.
    if (!one_shot && out < red) {
      const uint64_t g = g0 + out;
      const int r = m.FirstBelow(&Control::reduced, g + 1);
      if (r < 0) {
        const size_t len = chunk_len(out);
        const size_t off = out * chunk_elems * es;
        for (int q = 0; q < n; ++q) {
          const size_t a = bound(len, q), b = bound(len, q + 1);
          out_copier.Copy(out_base + off + a * es, ring.Slot(q, g) + a * es, (b - a) * es);
        }
        m.PublishOut(ring, g);
        ++out;
        progressed = true;
      } else {
        wait_out = {r, m.Word(r, &Control::reduced), g + 1, "its reduced slice"};
      }
    }
    if (progressed) {
      stall.Reset();
      continue;
    }
    const Blocker& b = wait_out.rank >= 0 ? wait_out : wait_red.rank >= 0 ? wait_red : wait_in;
    if (b.rank < 0) continue;  // every phase moved on meanwhile: look again
    Status s = stall.Wait(b.rank, b.word, b.target, b.what);
    if (!s.ok()) return m.Fail(s);
  }
  ring.next_chunk = g0 + nchunks;
  m.seq = seq + 1;
  record();
  return Status::Ok();
}

bool ShmDirect::FitsSmall(size_t bytes) const {
  const Impl& m = *impl_;
  return m.small.nslots > 0 && bytes > 0 && bytes <= m.small.slot_bytes && OneShot(bytes, options_) && m.size <= 256;
}

Status ShmDirect::AllReduceSmall(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                                 const kernels::Reducer& reducer, std::chrono::milliseconds timeout,
                                 const std::atomic<bool>* abort) {
  Impl& m = *impl_;
  if (!m.error.ok()) return Status(m.error.code(), "direct shm all-reduce failed earlier: " + m.error.message());
  const size_t bytes = count * DataTypeSize(dtype);
  if (op == ReduceOp::kAvg || !FitsSmall(bytes)) {
    return InvalidArgumentError("direct shm small all-reduce: " + std::to_string(bytes) + " B or " +
                                ReduceOpName(op) + " is not for it");
  }
  const int n = m.size;
  const int me = m.rank;
  Impl::Ring& ring = m.small;
  const uint64_t g = ring.next_chunk;
  const uint64_t seq = m.seq;
  m.Begin(ring, count, dtype, static_cast<uint32_t>(op));
  Stall stall(m, timeout, abort);
  // The same steps as AllReduce's loop for one one-shot chunk: a free slot,
  // this rank's input in it, every rank's in, the n-ary reduction, done.
  uint64_t need = 0;
  for (int holder; (holder = m.SlotHolder(ring, g, &need)) >= 0;) {
    Status s = stall.Wait(holder, m.Word(holder, ring.out), need, "freeing a slot");
    if (!s.ok()) return m.Fail(s);
  }
  stall.Reset();
  if (bytes <= ring.inline_bytes) {
    std::memcpy(ring.Payload(me, g, bytes), send, bytes);
  } else {
    reducer.Copy(ring.Slot(me, g), send, bytes);
  }
  m.Post(ring, g, seq, count, dtype, static_cast<uint32_t>(op));
  for (int r; (r = m.FirstNotIn(ring, g)) >= 0;) {
    Status s = stall.Wait(r, &ring.Header(r, g).stamp, g + 1, "its input");
    if (!s.ok()) return m.Fail(s);
  }
  const void* srcs[256];
  for (int q = 0; q < n; ++q) {
    if (q != me) {
      Status bad = m.CheckHeader(ring, q, g, seq, count, dtype, static_cast<uint32_t>(op));
      if (!bad.ok()) return m.Fail(bad);
    }
    // This rank's input too from its published copy (see AllReduce).
    srcs[q] = ring.Payload(q, g, bytes);
  }
  Status s = ReduceInOrder(reducer, recv, srcs, n, count, dtype, op);
  if (!s.ok()) return m.Fail(s);
  m.PublishOut(ring, g);
  ring.next_chunk = g + 1;
  m.seq = seq + 1;
  return Status::Ok();
}

Status ShmDirect::Broadcast(void* buf, size_t count, DataType dtype, int root, const kernels::Reducer& copier,
                            Clock::time_point deadline, const std::atomic<bool>* abort) {
  Impl& m = *impl_;
  if (!m.error.ok()) return Status(m.error.code(), "direct shm failed earlier: " + m.error.message());
  if (root < 0 || root >= m.size) {
    return InvalidArgumentError("direct shm broadcast: root " + std::to_string(root) + " outside [0, " +
                                std::to_string(m.size) + ")");
  }
  if (count == 0) return Status::Ok();
  const size_t es = DataTypeSize(dtype);
  Impl::Ring& ring = m.RingFor(count * es);
  const size_t chunk_elems = ring.slot_bytes / es;
  if (chunk_elems == 0) return InvalidArgumentError("direct shm broadcast: slot smaller than one element");
  const size_t nchunks = (count + chunk_elems - 1) / chunk_elems;
  const uint64_t g0 = ring.next_chunk;
  const uint64_t seq = m.seq;
  const int me = m.rank;
  const uint32_t code = OpCode(kBroadcastOp, root, ReduceOp::kSum);
  m.Begin(ring, count, dtype, code);
  const bool inline_data = count * es <= ring.inline_bytes;  // one chunk, beside the stamp
  auto* base = static_cast<char*>(buf);
  Stall stall(m, deadline, abort);
  for (size_t k = 0; k < nchunks;) {
    const uint64_t g = g0 + k;
    const size_t len = std::min(chunk_elems, count - k * chunk_elems) * es;
    char* at = base + k * chunk_elems * es;
    Status s;
    if (me == root) {
      uint64_t need = 0;
      const int holder = m.SlotHolder(ring, g, &need);
      if (holder >= 0) {
        s = stall.Wait(holder, m.Word(holder, ring.out), need, "freeing a slot");
        if (!s.ok()) return m.Fail(s);
        continue;
      }
      if (inline_data) {
        std::memcpy(ring.Payload(me, g, len), at, len);
      } else {
        copier.Copy(ring.Slot(me, g), at, len);
      }
      m.Post(ring, g, seq, count, dtype, code);
      // The root reads no region: done with the chunk at once.
      m.PublishOut(ring, g);
    } else {
      SlotHeader& h = ring.Header(root, g);
      if (h.stamp.load(std::memory_order_acquire) != g + 1) {
        s = stall.Wait(root, &h.stamp, g + 1, "its broadcast");
        if (!s.ok()) return m.Fail(s);
        continue;
      }
      s = m.CheckHeader(ring, root, g, seq, count, dtype, code);
      if (!s.ok()) return m.Fail(s);
      if (inline_data) {
        std::memcpy(at, ring.Payload(root, g, len), len);
      } else {
        copier.Copy(at, ring.Slot(root, g), len);
      }
      m.PublishOut(ring, g);
    }
    stall.Reset();
    ++k;
  }
  ring.next_chunk = g0 + nchunks;
  m.seq = seq + 1;
  return Status::Ok();
}

Status ShmDirect::Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
                         const kernels::Reducer& reducer, Clock::time_point deadline, const std::atomic<bool>* abort) {
  Impl& m = *impl_;
  if (op == ReduceOp::kAvg) return InvalidArgumentError("direct shm reduce: AVG is the caller's (sum, then scale)");
  const bool is_root = m.rank == root;
  return Exchange(m, send, count * DataTypeSize(dtype), OpCode(kReduceOp, root, op), count, dtype, is_root,
                  [&](const void** in) { return ReduceInOrder(reducer, recv, in, m.size, count, dtype, op); },
                  deadline, abort);
}

Status ShmDirect::AllGather(const void* send, void* recv, size_t count, DataType dtype, Clock::time_point deadline,
                            const std::atomic<bool>* abort) {
  Impl& m = *impl_;
  const size_t bytes = count * DataTypeSize(dtype);
  return Exchange(m, send, bytes, OpCode(kAllGatherOp, 0, ReduceOp::kSum), count, dtype, true,
                  [&](const void** in) {
                    for (int q = 0; q < m.size; ++q) {
                      if (bytes > 0) std::memcpy(static_cast<char*>(recv) + q * bytes, in[q], bytes);
                    }
                    return Status::Ok();
                  },
                  deadline, abort);
}

Status ShmDirect::ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                                const kernels::Reducer& reducer, Clock::time_point deadline,
                                const std::atomic<bool>* abort) {
  Impl& m = *impl_;
  if (op == ReduceOp::kAvg) return InvalidArgumentError("direct shm reduce_scatter: AVG is the caller's (sum, then scale)");
  const size_t bytes = count * DataTypeSize(dtype);
  return Exchange(m, send, bytes * m.size, OpCode(kReduceScatterOp, 0, op), count, dtype, true,
                  [&](const void** in) {
                    // This rank's block of every input.
                    for (int q = 0; q < m.size; ++q) in[q] = static_cast<const char*>(in[q]) + m.rank * bytes;
                    return ReduceInOrder(reducer, recv, in, m.size, count, dtype, op);
                  },
                  deadline, abort);
}

Status ShmDirect::AllToAll(const void* send, void* recv, size_t count, DataType dtype, Clock::time_point deadline,
                           const std::atomic<bool>* abort) {
  Impl& m = *impl_;
  const size_t bytes = count * DataTypeSize(dtype);
  return Exchange(m, send, bytes * m.size, OpCode(kAllToAllOp, 0, ReduceOp::kSum), count, dtype, true,
                  [&](const void** in) {
                    for (int q = 0; q < m.size; ++q) {
                      if (bytes > 0) {
                        std::memcpy(static_cast<char*>(recv) + q * bytes, static_cast<const char*>(in[q]) + m.rank * bytes,
                                    bytes);
                      }
                    }
                    return Status::Ok();
                  },
                  deadline, abort);
}

Status ShmDirect::Barrier(Clock::time_point deadline, const std::atomic<bool>* abort) {
  return Exchange(*impl_, nullptr, 0, OpCode(kBarrierOp, 0, ReduceOp::kSum), 0, DataType::kUint8, true,
                  [](const void**) { return Status::Ok(); }, deadline, abort);
}

bool ShmDirect::cma() const { return impl_->cma; }
const std::string& ShmDirect::cma_note() const { return impl_->cma_note; }

}  // namespace ciuic::collectives
