// The shm backend: ranks of one host, in separate processes.
//
// Shared memory. Every shared segment is a memfd (private to its creator's
// fd table, mode 0600, sealed against resizing, freed by the kernel when the
// last process holding it exits: a crash leaves nothing in /dev/shm). A peer
// gets the creator's fd with pidfd_getfd (or by opening /proc/<pid>/fd/<fd>)
// and maps it once; it checks the inode, the size and the memfd name, which
// carries the job id and a random 64-bit segment id, so a stale or reused
// pid/fd is refused. Kinds of segments:
//   - the doorbell (one per backend): a futex word peers ring when this
//     process is asleep in WaitForActivity (see shm_ring.h);
//   - an inbound notification ring per connection (shm_ring.h), created by
//     the receiver, written by the sender;
//   - pool memory from Allocate(): pre-faulted, huge pages tried, mlocked
//     best-effort. A peer maps it at ImportRegion; PostWrite into it is a
//     memcpy into the mapping and PeerMemoryPointer points into it.
// Register()ed caller memory is not shared; a PostWrite into it is one
// process_vm_writev (cross-memory attach) into the owner's address space.
// (Register of a range inside an Allocate()d region describes that segment,
// so it stays directly addressable.)
//
// Every write is copied synchronously in PostWrite and then published on
// the peer's ring; its kWriteDone is queued locally and returned by the next
// Progress. Peer death is noticed by polling the peer's pidfd at most every
// kLivenessPeriod from an idle Progress; a clean close is a flag in the ring.
//
// The descriptions a rank publishes (endpoint, region) are in shm_wire.h.
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "ciuic/kernels.h"
#include "common/cpu_relax.h"
#include "common/log.h"
#include "transport/backends.h"
#include "transport/net.h"
#include "transport/shm/shm_ring.h"
#include "transport/shm/shm_wire.h"

#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif
#ifndef MFD_HUGETLB
#define MFD_HUGETLB 0x0004U
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace ciuic::transport {
namespace {

using Clock = std::chrono::steady_clock;
using shm::DoorbellShared;
using shm::EntryKind;
using shm::kEntryBytes;
using shm::kRingEntries;
using shm::kRingMask;
using shm::RingConsumer;
using shm::RingEntry;
using shm::RingProducer;
using shm::RingShared;
using shm::SegmentDesc;

constexpr size_t kHugePageBytes = 2u << 20;
// How often an idle Progress asks the kernel whether the peer still lives.
constexpr auto kLivenessPeriod = std::chrono::milliseconds(2);
// WaitForActivity: spin this long, then sched_yield until kYieldFor, then
// sleep on the futex (a sleeping hand-off costs ~7 us here, a spinning one
// 0.1 us; a spinner holding a shared core starves the peer it waits for).
constexpr auto kSpinFor = std::chrono::microseconds(4);
constexpr auto kYieldFor = std::chrono::microseconds(60);
constexpr auto kBlockedPollPeriod = std::chrono::milliseconds(1);
// Writes of at least this many bytes use non-temporal stores (a Link's
// slots, 512 KiB by default, stay below: their reader finds them in cache).
constexpr size_t kStreamingWriteBytes = 16u << 20;


size_t PageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}
size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25  // Linux 6.1
#endif

// Maps `bytes` of `fd` (MAP_SHARED, read-write) at an address aligned to
// kHugePageBytes, so the kernel can map its huge pages with page-middle
// entries. MAP_FAILED on failure (errno set).
void* MapAligned(int fd, size_t bytes, int extra_flags) {
  const size_t span = bytes + kHugePageBytes;
  void* r = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (r == MAP_FAILED) return MAP_FAILED;
  auto* raw = static_cast<char*>(r);
  char* at = reinterpret_cast<char*>(RoundUp(reinterpret_cast<uintptr_t>(raw), kHugePageBytes));
  void* p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | extra_flags, fd, 0);
  if (p == MAP_FAILED) {
    const int e = errno;
    munmap(raw, span);
    errno = e;
    return MAP_FAILED;
  }
  if (at > raw) munmap(raw, static_cast<size_t>(at - raw));
  if (raw + span > at + bytes) munmap(at + bytes, static_cast<size_t>(raw + span - (at + bytes)));
  return p;
}

// Asks for the populated range to be backed and mapped by huge pages, even
// where the system setting for shared memory is `never` (this machine's
// shmem_enabled): MADV_COLLAPSE does not depend on it. 16 MiB take ~3 ms;
// a writer then misses the TLB 512x less (8 MiB shm writes were at 0.72-0.76
// of memcpy on 4 KiB pages). Best effort: false where the kernel refuses.
bool CollapseToHugePages(void* p, size_t bytes) {
  return bytes >= kHugePageBytes && bytes % kHugePageBytes == 0 &&
         reinterpret_cast<uintptr_t>(p) % kHugePageBytes == 0 && madvise(p, bytes, MADV_COLLAPSE) == 0;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(v));
  return buf;
}
std::string Errno(int err) { return std::string(std::strerror(err)); }
std::string RankPid(int rank, pid_t pid) {
  return "rank " + std::to_string(rank) + " (pid " + std::to_string(pid) + ")";
}

// Whether the process behind `pidfd` (or, without one, `pid`) has exited.
// A zombie counts as exited (kill(pid, 0) still succeeds on it).
bool PeerExited(int pidfd, pid_t pid) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  return kill(pid, 0) != 0 && errno == ESRCH;
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t val, const timespec* ts) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

class ShmBackend;

// A memfd segment this process created, mapped read-write. Shared by the
// objects using it (a region, a sub-range registration, an endpoint, then
// its connection); the last owner unmaps and closes it.
struct Segment {
  ShmBackend* backend = nullptr;
  int fd = -1;
  char* base = nullptr;
  size_t bytes = 0;  // mapped (a multiple of the page size)
  uint64_t inode = 0;
  uint64_t seg_id = 0;
  bool huge = false;
  ~Segment();
  SegmentDesc Desc() const { return SegmentDesc{static_cast<uint32_t>(fd), bytes, inode, seg_id}; }
};

// A peer's segment mapped into this process (shared by every connection
// that imports it; the last one unmaps it).
struct PeerMapping {
  char* base = nullptr;
  size_t bytes = 0;
  ~PeerMapping() {
    if (base != nullptr) munmap(base, bytes);
  }
};

// Private zeroed memory standing in for the ring and doorbell of a peer
// that left before this side mapped them.
StatusOr<std::shared_ptr<PeerMapping>> StandInMapping(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return ResourceExhaustedError("shm: mapping " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
  }
  auto m = std::make_shared<PeerMapping>();
  m->base = static_cast<char*>(p);
  m->bytes = bytes;
  return m;
}

class ShmConnection;

// Allocate()d memory (a segment) or Register()ed caller memory.
// Thread contract: immutable after construction.
class ShmRegion final : public MemoryRegion {
 public:
  // `segment` null: caller memory, written by peers through CMA.
  ShmRegion(ShmBackend* backend, void* data, size_t size, std::shared_ptr<Segment> segment,
            size_t offset)
      : MemoryRegion(data, size), backend_(backend), segment_(std::move(segment)), offset_(offset) {}
  std::string Describe() const override;

 private:
  ShmBackend* backend_;
  std::shared_ptr<Segment> segment_;
  size_t offset_;
};

// Thread contract: as Backend (one thread at a time), except that the
// members used by connections and regions (segment creation, peer
// mappings, the connection list) lock mu_ or are atomic, so connections of
// one backend may be driven from different threads.
class ShmBackend final : public Backend {
 public:
  explicit ShmBackend(const BackendOptions& options) : options_(options), pid_(getpid()) {}
  ~ShmBackend() override = default;

  Status Init();

  BackendKind kind() const override { return BackendKind::kShm; }
  std::string Describe() const override;
  StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(int peer, uint32_t tag) override;
  StatusOr<std::unique_ptr<MemoryRegion>> Allocate(size_t bytes) override;
  StatusOr<std::unique_ptr<MemoryRegion>> Register(void* addr, size_t bytes) override;
  void WaitForActivity(std::chrono::microseconds max) override;
  bool AnyActivity() override {
    bool blocked = false;
    return AnyActivity(&blocked);
  }

  // A new memfd segment of at least `bytes`, mapped, pre-faulted and (best
  // effort) mlocked; `pool` tries huge pages. Errors: kResourceExhausted.
  StatusOr<std::shared_ptr<Segment>> CreateSegment(size_t bytes, const char* what, bool pool);
  // Maps the segment `d` of the peer process behind `pidfd` / `pid`.
  // Errors: kUnavailable (the peer is gone, the fd is not there),
  // kInvalidArgument (the fd is not the described segment),
  // kFailedPrecondition (not permitted).
  StatusOr<std::shared_ptr<PeerMapping>> MapPeerSegment(int pidfd, pid_t pid, int peer_rank,
                                                        const SegmentDesc& d);
  // The pool segment containing [addr, addr+bytes), or null.
  std::shared_ptr<Segment> FindPoolSegment(const void* addr, size_t bytes, size_t* offset);
  // Keeps an inbound ring segment whose producer has not attached yet
  // (see ~ShmConnection) until it attaches or the backend closes.
  void Linger(std::shared_ptr<Segment> ring_seg);
  void AddConnection(ShmConnection* c);
  void RemoveConnection(ShmConnection* c);
  void SegmentGone(size_t bytes, bool huge) {
    segments_.fetch_sub(1, std::memory_order_relaxed);
    segment_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
    if (huge) huge_segments_.fetch_sub(1, std::memory_order_relaxed);
  }

  const BackendOptions& options() const { return options_; }
  int rank() const { return options_.rank; }
  pid_t pid() const { return pid_; }
  const std::string& job_id() const { return options_.job_id; }
  const Segment& doorbell_segment() const { return *doorbell_seg_; }

 private:
  // Whether any connection has something from its peer (see
  // ShmConnection::PeerActivity); `*blocked`: one waits for ring room.
  bool AnyActivity(bool* blocked);

  BackendOptions options_;
  pid_t pid_;
  std::atomic<size_t> segments_{0};
  std::atomic<size_t> segment_bytes_{0};
  std::atomic<size_t> huge_segments_{0};
  std::shared_ptr<Segment> doorbell_seg_;
  DoorbellShared* doorbell_ = nullptr;

  std::mutex mu_;  // guards the members below
  std::vector<ShmConnection*> connections_;
  std::map<std::tuple<pid_t, uint64_t, uint64_t>, std::weak_ptr<PeerMapping>> peer_maps_;
  std::vector<std::weak_ptr<Segment>> pool_segments_;
  std::vector<std::shared_ptr<Segment>> lingering_;
};

Segment::~Segment() {
  if (base != nullptr) munmap(base, bytes);
  if (fd >= 0) close(fd);
  if (backend != nullptr) backend->SegmentGone(bytes, huge);
}

// ---------------------------------------------------------------------------
// Connection.

// Both directions to one peer: this side consumes its own inbound ring
// (in_seg_) and produces into the peer's (out_map_).
// Thread contract: one thread at a time; PeerActivity from any thread.
class ShmConnection final : public Connection {
 public:
  ShmConnection(ShmBackend* backend, int peer, pid_t peer_pid, int pidfd,
                std::shared_ptr<Segment> in_seg, std::shared_ptr<PeerMapping> out_map,
                std::shared_ptr<PeerMapping> peer_bell_map)
      : Connection(peer),
        backend_(backend),
        peer_pid_(peer_pid),
        pidfd_(pidfd),
        in_seg_(std::move(in_seg)),
        out_map_(std::move(out_map)),
        peer_bell_map_(std::move(peer_bell_map)),
        in_(reinterpret_cast<RingShared*>(in_seg_->base)),
        out_(reinterpret_cast<RingShared*>(out_map_->base)),
        peer_bell_(&reinterpret_cast<DoorbellShared*>(peer_bell_map_->base)->bell),
        next_liveness_check_(Clock::now() + kLivenessPeriod) {
    imports_.reserve(16);
    backend_->AddConnection(this);
  }

  ~ShmConnection() override {
    backend_->RemoveConnection(this);
    // A clean close: the peer drains what was delivered, then fails with
    // "closed" instead of waiting for a process that will never write.
    out_.ring()->producer.closed.store(1, std::memory_order_release);
    in_.ring()->consumer_closed.value.store(1, std::memory_order_release);
    RingPeer();
    if (pidfd_ >= 0) close(pidfd_);
    // A peer that has not mapped this side's ring yet still finds it (with
    // what was delivered and the closed flag) while this process lives.
    if (in_.ring()->producer.attached.load(std::memory_order_acquire) == 0) {
      backend_->Linger(std::move(in_seg_));
    }
  }

  // The peer is gone (`why`): what it delivered is still read, then
  // Progress fails with `why`; writes fail now; messages (credits) are
  // dropped, as nobody will read them.
  void Depart(Status why) {
    if (departed_.ok()) departed_ = std::move(why);
  }

  StatusOr<RemoteRegion> ImportRegion(const std::string& blob) override;
  Status PostWrite(const MemoryRegion& src, size_t src_offset, RemoteRegion dst, size_t dst_offset,
                   size_t len, uint32_t imm, uint64_t wr_id) override;
  Status PostMessage(const void* data, size_t len) override;
  StatusOr<size_t> Progress(Completion* out, size_t max) override;
  size_t max_outstanding() const override { return kRingEntries; }
  void* PeerMemoryPointer(RemoteRegion dst, size_t offset) override {
    if (dst.id >= imports_.size()) return nullptr;
    const Import& imp = imports_[dst.id];
    if (imp.base == nullptr || offset >= imp.size) return nullptr;
    return imp.base + offset;
  }

  // Whether the peer may have posted something this side has not consumed,
  // or closed. Reads only shared atomics: any thread, under the backend's lock.
  // `*blocked` is set when this side waits for room in the peer's ring.
  bool PeerActivity(bool* blocked) const {
    // A failed connection has said all it will say: waiting must not spin
    // on its closed flag or on entries nobody will consume.
    if (failed_.load(std::memory_order_relaxed)) return false;
    if (shm::RingHasPublished(in_.ring()) ||
        in_.ring()->producer.closed.load(std::memory_order_relaxed) != 0 ||
        out_.ring()->consumer_closed.value.load(std::memory_order_relaxed) != 0) {
      return true;
    }
    if (out_blocked_.load(std::memory_order_relaxed)) {
      if (out_.ring()->consumer_head.value.load(std::memory_order_relaxed) !=
          blocked_head_.load(std::memory_order_relaxed)) {
        return true;  // the peer freed entries
      }
      *blocked = true;
    }
    return false;
  }

 private:
  struct Import {
    char* base = nullptr;      // mapped segment; null for caller memory (CMA)
    uint64_t address = 0;      // caller memory in the peer's address space
    uint64_t size = 0;
    std::shared_ptr<PeerMapping> mapping;
  };

  // Wakes the peer if it is asleep in WaitForActivity (see shm_ring.h).
  void RingPeer() {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (peer_bell_->sleepers.load(std::memory_order_relaxed) != 0) {
      peer_bell_->word.fetch_add(1, std::memory_order_relaxed);
      Futex(&peer_bell_->word, FUTEX_WAKE, INT_MAX, nullptr);
    }
  }
  // The next free entry of the peer's ring, or null when it is full (then
  // the peer is asked to ring this side's doorbell when it frees entries).
  RingEntry* Reserve() {
    RingEntry* e = out_.Reserve();
    if (e != nullptr) {
      if (out_blocked_.load(std::memory_order_relaxed)) {
        out_blocked_.store(false, std::memory_order_relaxed);
      }
      return e;
    }
    if (!out_blocked_.load(std::memory_order_relaxed)) {
      blocked_head_.store(out_.cached_head(), std::memory_order_relaxed);
      out_blocked_.store(true, std::memory_order_relaxed);
      out_.ring()->producer_waiting.value.store(1, std::memory_order_relaxed);
    }
    return nullptr;
  }
  Status CmaWrite(const char* src, uint64_t address, size_t len);
  // The reason the peer is gone (closed or died), or OK.
  Status CheckPeer();
  std::string Who() const { return RankPid(peer(), peer_pid_); }
  // Makes `s` the sticky error; returns it.
  const Status& Fail(Status s) {
    error_ = std::move(s);
    failed_.store(true, std::memory_order_relaxed);
    return error_;
  }

  ShmBackend* backend_;
  pid_t peer_pid_;
  int pidfd_;
  std::shared_ptr<Segment> in_seg_;            // my inbound ring
  std::shared_ptr<PeerMapping> out_map_;       // the peer's inbound ring
  std::shared_ptr<PeerMapping> peer_bell_map_; // the peer's doorbell
  RingConsumer in_;
  RingProducer out_;
  DoorbellShared::Bell* peer_bell_;
  std::vector<Import> imports_;
  // kWriteDone not yet returned: wr_ids in a ring of kRingEntries.
  uint64_t done_[kRingEntries];
  uint64_t done_head_ = 0;
  uint64_t done_tail_ = 0;
  Clock::time_point next_liveness_check_;
  Status error_;
  Status departed_;  // see Depart
  // Blocked on a full peer ring (read by WaitForActivity on any thread).
  std::atomic<bool> out_blocked_{false};
  std::atomic<bool> failed_{false};  // error_ is set
  std::atomic<uint64_t> blocked_head_{0};
};

StatusOr<RemoteRegion> ShmConnection::ImportRegion(const std::string& blob) {
  if (!error_.ok()) return error_;
  StatusOr<shm::RegionDesc> d = shm::DecodeRegion(blob, backend_->job_id());
  if (!d.ok()) {
    return Status(d.status().code(), d.status().message() + " (imported from " + Who() + ")");
  }
  const uint64_t size = d->size, offset = d->offset, address = d->address;
  const SegmentDesc& seg = d->segment;
  if (d->rank != peer() || static_cast<pid_t>(d->pid) != peer_pid_) {
    return InvalidArgumentError("shm: region description of " + RankPid(d->rank, static_cast<pid_t>(d->pid)) +
                                " imported into the connection to " + Who());
  }
  Import imp;
  imp.size = size;
  if (d->mode == shm::RegionMode::kSegment) {
    StatusOr<std::shared_ptr<PeerMapping>> m =
        departed_.ok() ? backend_->MapPeerSegment(pidfd_, peer_pid_, peer(), seg) : departed_;
    // kUnavailable: the peer is exiting or gone, or released the segment.
    if (!m.ok() && m.status().code() == StatusCode::kUnavailable) {
      Depart(m.status());
    } else if (!m.ok()) {
      return m.status();
    } else {
      imp.mapping = std::move(*m);
      imp.base = imp.mapping->base + offset;
    }
  } else if (!departed_.ok()) {
    imp.address = address;
  } else {
    imp.address = address;
    if (size > 0) {
      // Probe: is cross-memory attach permitted and is the range mapped?
      // (Better now than as a sticky error on the first write.)
      char probe;
      iovec local{&probe, 1};
      iovec remote{reinterpret_cast<void*>(address), 1};
      if (process_vm_readv(peer_pid_, &local, 1, &remote, 1, 0) != 1) {
        const int err = errno;
        if (err == EPERM) {
          return FailedPreconditionError(
              "shm: cross-memory attach (process_vm_readv/writev) to " + Who() +
              " not permitted (EPERM): run the ranks as one user and allow ptrace "
              "(kernel.yama.ptrace_scope, seccomp), or use Allocate()d memory");
        }
        if (err == ESRCH) {
          Depart(UnavailableError("shm: peer " + Who() + " died"));
          imports_.push_back(std::move(imp));
          return RemoteRegion{static_cast<uint32_t>(imports_.size() - 1), size};
        }
        return InvalidArgumentError("shm: region of " + Who() + " at 0x" + Hex64(address) +
                                    " is not readable by cross-memory attach: " + Errno(err));
      }
    }
  }
  imports_.push_back(std::move(imp));
  RemoteRegion rr;
  rr.id = static_cast<uint32_t>(imports_.size() - 1);
  rr.size = size;
  return rr;
}

Status ShmConnection::CmaWrite(const char* src, uint64_t address, size_t len) {
  size_t done = 0;
  while (done < len) {
    iovec local{const_cast<char*>(src + done), len - done};
    iovec remote{reinterpret_cast<void*>(address + done), len - done};
    const ssize_t n = process_vm_writev(peer_pid_, &local, 1, &remote, 1, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    const int err = n < 0 ? errno : EFAULT;
    if (err == EINTR) continue;
    if (err == ESRCH) return UnavailableError("shm: peer " + Who() + " died");
    if (err == EPERM) {
      return FailedPreconditionError("shm: process_vm_writev to " + Who() +
                                     " not permitted (EPERM): cross-memory attach needs the "
                                     "same user and ptrace permission");
    }
    if (err == ENOMEM) return ResourceExhaustedError("shm: process_vm_writev to " + Who() + ": " + Errno(err));
    return UnavailableError("shm: process_vm_writev of " + std::to_string(len) + " bytes to " +
                            Who() + " at 0x" + Hex64(address) + " failed: " + Errno(err) +
                            " (region no longer registered?)");
  }
  return Status::Ok();
}

Status ShmConnection::PostWrite(const MemoryRegion& src, size_t src_offset, RemoteRegion dst,
                                size_t dst_offset, size_t len, uint32_t imm, uint64_t wr_id) {
  if (!error_.ok()) return error_;
  if (!departed_.ok()) return departed_;
  if (src_offset > src.size() || len > src.size() - src_offset) {
    return InvalidArgumentError("shm: write of " + std::to_string(len) + " bytes at source offset " +
                                std::to_string(src_offset) + " exceeds the " +
                                std::to_string(src.size()) + "-byte source region");
  }
  if (dst.id >= imports_.size()) {
    return InvalidArgumentError("shm: remote region " + std::to_string(dst.id) +
                                " was not imported into the connection to rank " +
                                std::to_string(peer()));
  }
  const Import& imp = imports_[dst.id];
  if (dst_offset > imp.size || len > imp.size - dst_offset) {
    return InvalidArgumentError("shm: write of " + std::to_string(len) + " bytes at offset " +
                                std::to_string(dst_offset) + " exceeds the " +
                                std::to_string(imp.size) + "-byte region of rank " +
                                std::to_string(peer()));
  }
  // Short messages (no heap allocation) for the retry path.
  if (done_tail_ - done_head_ >= kRingEntries) return ResourceExhaustedError("shm: wr full");
  RingEntry* e = Reserve();
  if (e == nullptr) return ResourceExhaustedError("shm: ring full");
  if (len > 0) {
    const char* from = static_cast<const char*>(src.data()) + src_offset;
    if (imp.base != nullptr) {
      // Not memcpy (see CopyBytes); writes beyond the caches stream past
      // them: no read-for-ownership of the destination lines, which the
      // peer reads from memory either way.
      kernels::CopyBytes(imp.base + dst_offset, from, len, len >= kStreamingWriteBytes);
    } else {
      Status s = CmaWrite(from, imp.address + dst_offset, len);
      if (!s.ok()) return Fail(std::move(s));
    }
  }
  e->kind = static_cast<uint8_t>(EntryKind::kWrite);
  e->imm = imm;
  e->len = static_cast<uint32_t>(std::min<size_t>(len, UINT32_MAX));
  out_.Publish(e);
  RingPeer();
  done_[done_tail_++ & kRingMask] = wr_id;
  return Status::Ok();
}

Status ShmConnection::PostMessage(const void* data, size_t len) {
  if (!error_.ok()) return error_;
  if (!departed_.ok()) return Status::Ok();
  if (len > kMaxMessageBytes || (len > 0 && data == nullptr)) {
    return InvalidArgumentError("shm: message of " + std::to_string(len) + " bytes (at most " +
                                std::to_string(kMaxMessageBytes) + ")");
  }
  RingEntry* e = Reserve();
  if (e == nullptr) return ResourceExhaustedError("shm: ring full");
  e->kind = static_cast<uint8_t>(EntryKind::kMessage);
  e->imm = 0;
  e->len = static_cast<uint32_t>(len);
  if (len > 0) std::memcpy(e->data, data, len);
  out_.Publish(e);
  RingPeer();
  return Status::Ok();
}

Status ShmConnection::CheckPeer() {
  if (!departed_.ok()) return departed_;
  if (in_.ring()->producer.closed.load(std::memory_order_acquire) != 0 ||
      out_.ring()->consumer_closed.value.load(std::memory_order_acquire) != 0) {
    return UnavailableError("shm: peer rank " + std::to_string(peer()) +
                            " closed the connection");
  }
  const auto now = Clock::now();
  if (now < next_liveness_check_) return Status::Ok();
  next_liveness_check_ = now + kLivenessPeriod;
  if (PeerExited(pidfd_, peer_pid_)) return UnavailableError("shm: peer " + Who() + " died");
  return Status::Ok();
}

StatusOr<size_t> ShmConnection::Progress(Completion* out, size_t max) {
  if (!error_.ok()) return error_;
  size_t n = 0;
  while (n < max && done_head_ != done_tail_) {
    Completion& c = out[n++];
    c.kind = Completion::Kind::kWriteDone;
    c.imm = 0;
    c.len = 0;
    c.wr_id = done_[done_head_++ & kRingMask];
  }
  if (n == max) return n;
  for (;;) {
    size_t got = 0;
    while (n < max) {
      const RingEntry* e = in_.Peek();
      if (e == nullptr) break;
      const uint8_t kind = e->kind;
      const uint32_t len = e->len;
      Completion& c = out[n];
      c.imm = e->imm;
      c.len = len;
      c.wr_id = 0;
      if (kind == static_cast<uint8_t>(EntryKind::kWrite)) {
        c.kind = Completion::Kind::kWriteReceived;
      } else if (kind == static_cast<uint8_t>(EntryKind::kMessage) && len <= kMaxMessageBytes) {
        c.kind = Completion::Kind::kMessage;
        c.imm = 0;
        std::memcpy(c.data, e->data, len);
      } else {
        Fail(DataLossError("shm: malformed notification (kind " + std::to_string(kind) +
                               ", length " + std::to_string(len) + ") from rank " +
                               std::to_string(peer())));
        break;
      }
      in_.Pop();
      ++n;
      ++got;
    }
    if (got > 0) {
      in_.Release();
      // A sender waiting for room sleeps until told (a lost race costs it at
      // most the 1 ms cap of WaitForActivity's sleep).
      auto& waiting = in_.ring()->producer_waiting.value;
      if (waiting.load(std::memory_order_relaxed) != 0) {
        waiting.store(0, std::memory_order_relaxed);
        RingPeer();
      }
    }
    if (!error_.ok()) return n > 0 ? StatusOr<size_t>(n) : StatusOr<size_t>(error_);
    if (got > 0 || n == max) return n;
    Status gone = CheckPeer();
    if (gone.ok()) return n;
    // Deliver what the peer published before it closed or died first.
    if (in_.Peek() != nullptr) continue;
    Fail(std::move(gone));
    return n > 0 ? StatusOr<size_t>(n) : StatusOr<size_t>(error_);
  }
}

// ---------------------------------------------------------------------------
// Endpoint.

// Holds this side's inbound ring until Connect hands it to the connection.
// Thread contract: one thread at a time.
class ShmEndpoint final : public Endpoint {
 public:
  ShmEndpoint(ShmBackend* backend, int peer, uint32_t tag, std::shared_ptr<Segment> ring_seg)
      : backend_(backend), peer_(peer), tag_(tag), ring_desc_(ring_seg->Desc()),
        ring_seg_(std::move(ring_seg)) {}
  ~ShmEndpoint() override {
    // Never connected: tell a peer that did connect that nobody will read.
    if (ring_seg_ != nullptr) {
      reinterpret_cast<RingShared*>(ring_seg_->base)
          ->consumer_closed.value.store(1, std::memory_order_release);
    }
  }
  std::string Describe() const override;
  StatusOr<std::unique_ptr<Connection>> Connect(const std::string& peer_blob,
                                                Clock::time_point deadline) override;

 private:
  ShmBackend* backend_;
  int peer_;
  uint32_t tag_;
  SegmentDesc ring_desc_;              // still described after Connect
  std::shared_ptr<Segment> ring_seg_;  // moved into the connection by Connect
};

std::string ShmEndpoint::Describe() const {
  shm::EndpointDesc d;
  d.rank = backend_->rank();
  d.peer = peer_;
  d.tag = tag_;
  d.pid = static_cast<uint32_t>(backend_->pid());
  d.doorbell = backend_->doorbell_segment().Desc();
  d.ring = ring_desc_;
  d.ring_entries = kRingEntries;
  d.entry_bytes = kEntryBytes;
  return shm::EncodeEndpoint(backend_->job_id(), d);
}

StatusOr<std::unique_ptr<Connection>> ShmEndpoint::Connect(const std::string& peer_blob,
                                                           Clock::time_point deadline) {
  // Nothing to wait for: the blob names segments that exist while the peer's
  // endpoint or connection lives.
  (void)deadline;
  if (ring_seg_ == nullptr) {
    return FailedPreconditionError("shm: endpoint to rank " + std::to_string(peer_) +
                                   " is already connected");
  }
  StatusOr<shm::EndpointDesc> d = shm::DecodeEndpoint(peer_blob, backend_->job_id());
  if (!d.ok()) {
    return Status(d.status().code(), d.status().message() + " (from rank " + std::to_string(peer_) + ")");
  }
  const int32_t rank = d->rank;
  const uint32_t tag = d->tag, pid = d->pid;
  SegmentDesc bell = d->doorbell, ring = d->ring;
  if (rank != peer_ || d->peer != backend_->rank() || tag != tag_) {
    return InvalidArgumentError(
        "shm: endpoint description is rank " + std::to_string(rank) + "'s to rank " +
        std::to_string(d->peer) + " tag " + std::to_string(tag) + "; expected rank " +
        std::to_string(peer_) + "'s to rank " + std::to_string(backend_->rank()) + " tag " +
        std::to_string(tag_));
  }
  const pid_t peer_pid = static_cast<pid_t>(pid);
  // The pidfd pins the identity of the peer process: segments are fetched
  // through it and its readability later says the peer died.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, peer_pid, 0));
  Status departed;  // not OK: the peer is gone (see below)
  if (pidfd < 0) {
    const int err = errno;
    if (err == ESRCH) departed = UnavailableError("shm: peer " + RankPid(rank, peer_pid) + " exited");
    if (departed.ok()) {
      CIUIC_LOG(kInfo, "shm: pidfd_open(%d) failed (%s); using /proc and kill(0)",
                static_cast<int>(peer_pid), std::strerror(err));
    }
  }
  struct PidfdCloser {
    int fd;
    ~PidfdCloser() {
      if (fd >= 0) close(fd);
    }
  } closer{pidfd};
  std::shared_ptr<PeerMapping> ring_map, bell_map;
  for (auto [map, desc] : {std::make_pair(&ring_map, &ring), std::make_pair(&bell_map, &bell)}) {
    if (!departed.ok()) break;
    StatusOr<std::shared_ptr<PeerMapping>> m = backend_->MapPeerSegment(pidfd, peer_pid, rank, *desc);
    if (!m.ok()) {
      // kUnavailable: exiting or gone, or it released the segment.
      if (m.status().code() != StatusCode::kUnavailable) return m.status();
      departed = m.status();
      break;
    }
    *map = std::move(*m);
  }
  if (!departed.ok()) {
    // The peer wrote into this side's memory and left before this side
    // connected (its last operation needed nothing more from this rank):
    // what it delivered is still read; sends to it fail.
    CIUIC_ASSIGN_OR_RETURN(ring_map, StandInMapping(sizeof(RingShared)));
    CIUIC_ASSIGN_OR_RETURN(bell_map, StandInMapping(sizeof(DoorbellShared)));
    reinterpret_cast<RingShared*>(ring_map->base)->consumer_closed.value.store(1, std::memory_order_release);
    auto conn = std::make_unique<ShmConnection>(backend_, peer_, peer_pid, -1, std::move(ring_seg_),
                                                std::move(ring_map), std::move(bell_map));
    conn->Depart(Status(departed.code(), departed.message() + " (before this rank connected)"));
    ring_seg_ = nullptr;
    return std::unique_ptr<Connection>(std::move(conn));
  }
  const auto* rh = &reinterpret_cast<const RingShared*>(ring_map->base)->header;
  const auto* bh = &reinterpret_cast<const DoorbellShared*>(bell_map->base)->header;
  if (rh->magic != shm::kRingMagic || rh->version != shm::kLayoutVersion ||
      rh->capacity != kRingEntries || rh->entry_bytes != kEntryBytes || rh->seg_id != ring.seg_id ||
      rh->owner_rank != rank || rh->producer_rank != backend_->rank() || rh->tag != tag ||
      bh->magic != shm::kDoorbellMagic || bh->version != shm::kLayoutVersion ||
      bh->seg_id != bell.seg_id || bh->rank != rank) {
    return InvalidArgumentError("shm: the segments of rank " + std::to_string(rank) +
                                " do not match its endpoint description");
  }
  reinterpret_cast<RingShared*>(ring_map->base)
      ->producer.attached.store(1, std::memory_order_release);
  closer.fd = -1;
  auto conn = std::make_unique<ShmConnection>(backend_, peer_, peer_pid, pidfd,
                                              std::move(ring_seg_), std::move(ring_map),
                                              std::move(bell_map));
  ring_seg_ = nullptr;
  return std::unique_ptr<Connection>(std::move(conn));
}

// ---------------------------------------------------------------------------
// Regions and the backend.

std::string ShmRegion::Describe() const {
  shm::RegionDesc d;
  d.rank = backend_->rank();
  d.pid = static_cast<uint32_t>(backend_->pid());
  d.size = size();
  if (segment_ != nullptr) {
    d.mode = shm::RegionMode::kSegment;
    d.segment = segment_->Desc();
    d.offset = offset_;
  } else {
    d.mode = shm::RegionMode::kCaller;
    d.address = reinterpret_cast<uintptr_t>(data());
  }
  return shm::EncodeRegion(backend_->job_id(), d);
}

Status ShmBackend::Init() {
  CIUIC_ASSIGN_OR_RETURN(doorbell_seg_, CreateSegment(sizeof(DoorbellShared), "doorbell", false));
  doorbell_ = new (doorbell_seg_->base) DoorbellShared;
  doorbell_->header.magic = shm::kDoorbellMagic;
  doorbell_->header.version = shm::kLayoutVersion;
  doorbell_->header.seg_id = doorbell_seg_->seg_id;
  doorbell_->header.rank = options_.rank;
  doorbell_->header.pid = static_cast<uint32_t>(pid_);
  doorbell_->bell.word.store(0, std::memory_order_relaxed);
  doorbell_->bell.sleepers.store(0, std::memory_order_relaxed);
  return Status::Ok();
}

std::string ShmBackend::Describe() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "shm pid=%d rank=%d/%d segments=%zu (%.1f MiB, %zu on huge pages) ring=%ux%zuB "
                "cma=process_vm_writev",
                static_cast<int>(pid_), options_.rank, options_.world_size,
                segments_.load(std::memory_order_relaxed),
                static_cast<double>(segment_bytes_.load(std::memory_order_relaxed)) / (1 << 20),
                huge_segments_.load(std::memory_order_relaxed), kRingEntries, kEntryBytes);
  return buf;
}

StatusOr<std::shared_ptr<Segment>> ShmBackend::CreateSegment(size_t bytes, const char* what,
                                                             bool pool) {
  uint64_t seg_id = 0;
  CIUIC_RETURN_IF_ERROR(net::RandomBytes(&seg_id, sizeof(seg_id)));
  // The name shows in /proc/<pid>/fd and /proc/<pid>/maps; peers check the
  // id in it. Job ids are cut to keep it short.
  std::string job = options_.job_id.substr(0, 48);
  for (char& c : job) {
    if (c == '/' || c == ' ' || static_cast<unsigned char>(c) < 0x20) c = '_';
  }
  const std::string name = "ciuic-" + job + "-" + Hex64(seg_id);
  auto seg = std::make_shared<Segment>();
  size_t map_bytes = RoundUp(std::max<size_t>(bytes, 1), PageBytes());
  // Pool segments of 2 MiB and more: whole huge pages (see below).
  const bool want_huge = pool && bytes >= kHugePageBytes;
  if (want_huge) map_bytes = RoundUp(bytes, kHugePageBytes);
  // Pool segments of 2 MiB and more first try explicit huge pages (faulted
  // ~50x faster here and fewer TLB misses); that needs reserved hugetlb
  // pages, so failure is normal and silent.
  if (want_huge) {
    const size_t huge_bytes = map_bytes;
    const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
    if (fd >= 0) {
      void* p = MAP_FAILED;
      if (ftruncate(fd, static_cast<off_t>(huge_bytes)) == 0) {
        p = mmap(nullptr, huge_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
      }
      if (p != MAP_FAILED) {
        seg->fd = fd;
        seg->base = static_cast<char*>(p);
        seg->bytes = huge_bytes;
        seg->huge = true;
      } else {
        close(fd);
      }
    }
  }
  if (seg->base == nullptr) {
    const int fd = memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
      const int err = errno;
      return (err == EMFILE || err == ENFILE || err == ENOMEM)
                 ? ResourceExhaustedError(std::string("shm: memfd_create for ") + what + ": " + Errno(err))
                 : UnavailableError(std::string("shm: memfd_create for ") + what + ": " + Errno(err));
    }
    if (ftruncate(fd, static_cast<off_t>(map_bytes)) != 0) {
      const int err = errno;
      close(fd);
      return ResourceExhaustedError("shm: sizing a " + std::to_string(map_bytes) + "-byte " + what +
                                    " segment: " + Errno(err));
    }
    void* p = want_huge ? MapAligned(fd, map_bytes, 0)
                        : mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      close(fd);
      return ResourceExhaustedError("shm: mapping a " + std::to_string(map_bytes) + "-byte " + what +
                                    " segment: " + Errno(err));
    }
    seg->fd = fd;
    seg->base = static_cast<char*>(p);
    seg->bytes = map_bytes;
    // Transparent huge pages for shmem where the system allows them.
    if (pool) madvise(p, map_bytes, MADV_HUGEPAGE);
    // Pre-fault now: a first touch costs ~12 us per 4 KiB page here. Only a
    // kernel without MADV_POPULATE_WRITE (EINVAL, before 5.14) is touched
    // page by page; any other failure means the memory is not there, and a
    // touch would be a SIGBUS or the OOM killer instead of an error.
    if (madvise(p, map_bytes, MADV_POPULATE_WRITE) != 0) {
      const int err = errno;
      if (err != EINVAL) {
        return ResourceExhaustedError("shm: backing a " + std::to_string(map_bytes) + "-byte " + what +
                                      " segment with memory: " + Errno(err) +
                                      " (shared memory is short on this host: lower CIUIC_BUFFER_SIZE or "
                                      "the ranks per host)");
      }
      for (size_t off = 0; off < map_bytes; off += PageBytes()) {
        reinterpret_cast<volatile char*>(seg->base)[off] = 0;
      }
    }
    // Then into huge pages where THP for shared memory is off.
    if (want_huge && CollapseToHugePages(p, map_bytes)) seg->huge = true;
  }
  // memfds are born 0777: only the owner's user may open it through /proc.
  if (fchmod(seg->fd, 0600) != 0) {
    const int err = errno;
    return InternalError(std::string("shm: fchmod 0600 of a new memfd: ") + Errno(err));
  }
  // Sizes are final: a peer mapping can never see the file shrink (SIGBUS).
  fcntl(seg->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  struct stat st;
  if (fstat(seg->fd, &st) != 0) {
    const int err = errno;
    return InternalError(std::string("shm: fstat of a new memfd: ") + Errno(err));
  }
  seg->inode = st.st_ino;
  seg->seg_id = seg_id;
  if (mlock(seg->base, seg->bytes) != 0) {
    CIUIC_LOG(kInfo, "shm: mlock of a %zu-byte %s segment failed (%s); it stays pageable",
              seg->bytes, what, std::strerror(errno));
  }
  seg->backend = this;
  segments_.fetch_add(1, std::memory_order_relaxed);
  segment_bytes_.fetch_add(seg->bytes, std::memory_order_relaxed);
  if (seg->huge) huge_segments_.fetch_add(1, std::memory_order_relaxed);
  return seg;
}

StatusOr<std::shared_ptr<PeerMapping>> ShmBackend::MapPeerSegment(int pidfd, pid_t pid,
                                                                  int peer_rank,
                                                                  const SegmentDesc& d) {
  const std::string who = RankPid(peer_rank, pid);
  if (d.bytes == 0 || d.bytes % PageBytes() != 0 || d.bytes > (uint64_t{1} << 46) ||
      d.fd > static_cast<uint32_t>(INT_MAX)) {
    return InvalidArgumentError("shm: bad segment description from " + who);
  }
  std::lock_guard<std::mutex> lock(mu_);
  const auto key = std::make_tuple(pid, d.inode, d.seg_id);
  auto it = peer_maps_.find(key);
  if (it != peer_maps_.end()) {
    if (auto m = it->second.lock()) return m;
    peer_maps_.erase(it);
  }
  int fd = -1;
  int err = 0;
  if (pidfd >= 0) {
    fd = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, static_cast<int>(d.fd), 0));
    if (fd < 0) err = errno;
  }
  if (fd < 0) {
    // No pidfd_getfd (old kernel, seccomp): reopen the memfd through /proc.
    const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(d.fd);
    fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      const int err2 = errno;
      if (err2 == EACCES || err2 == EPERM || err == EPERM) {
        return FailedPreconditionError("shm: not permitted to open the shared segments of " + who +
                                       " (pidfd_getfd: " + Errno(err) + ", " + path + ": " +
                                       Errno(err2) + "): ranks must run as one user");
      }
      if (err == ESRCH || PeerExited(pidfd, pid)) return UnavailableError("shm: peer " + who + " died");
      return UnavailableError("shm: segment fd " + std::to_string(d.fd) + " of " + who +
                              " is gone (" + Errno(err2) + "): it closed the connection or "
                              "released the region");
    }
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { close(fd); }
  } closer{fd};
  // Same segment? A reused pid or fd number would show a different inode
  // or name.
  struct stat st;
  char link[512];
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(self.c_str(), link, sizeof(link) - 1);
  if (fstat(fd, &st) != 0 || n <= 0 || static_cast<uint64_t>(st.st_ino) != d.inode ||
      static_cast<uint64_t>(st.st_size) != d.bytes ||
      std::string(link, static_cast<size_t>(n)).find("-" + Hex64(d.seg_id)) == std::string::npos) {
    return InvalidArgumentError("shm: fd " + std::to_string(d.fd) + " of " + who +
                                " is not the described segment (stale description?)");
  }
  // Huge-page-sized segments (pools) at an aligned address, and mapped by
  // huge pages where the owner collapsed them (best effort).
  const bool huge = d.bytes >= kHugePageBytes && d.bytes % kHugePageBytes == 0;
  void* p = huge ? MapAligned(fd, d.bytes, MAP_POPULATE)
                 : mmap(nullptr, d.bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p != MAP_FAILED && huge) CollapseToHugePages(p, d.bytes);
  if (p == MAP_FAILED) {
    const int e = errno;
    return ResourceExhaustedError("shm: mapping a " + std::to_string(d.bytes) + "-byte segment of " +
                                  who + ": " + Errno(e));
  }
  auto m = std::make_shared<PeerMapping>();
  m->base = static_cast<char*>(p);
  m->bytes = d.bytes;
  peer_maps_[key] = m;
  return m;
}

std::shared_ptr<Segment> ShmBackend::FindPoolSegment(const void* addr, size_t bytes,
                                                     size_t* offset) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto a = reinterpret_cast<uintptr_t>(addr);
  std::shared_ptr<Segment> found;
  for (auto it = pool_segments_.begin(); it != pool_segments_.end();) {
    std::shared_ptr<Segment> s = it->lock();
    if (s == nullptr) {
      it = pool_segments_.erase(it);
      continue;
    }
    const auto b = reinterpret_cast<uintptr_t>(s->base);
    if (a >= b && a - b <= s->bytes && bytes <= s->bytes - (a - b)) {
      *offset = a - b;
      found = std::move(s);
    }
    ++it;
  }
  return found;
}

void ShmBackend::Linger(std::shared_ptr<Segment> ring_seg) {
  std::lock_guard<std::mutex> lock(mu_);
  lingering_.erase(std::remove_if(lingering_.begin(), lingering_.end(),
                                  [](const std::shared_ptr<Segment>& s) {
                                    return reinterpret_cast<RingShared*>(s->base)
                                               ->producer.attached.load(
                                                   std::memory_order_acquire) != 0;
                                  }),
                   lingering_.end());
  lingering_.push_back(std::move(ring_seg));
}

void ShmBackend::AddConnection(ShmConnection* c) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_.push_back(c);
}

void ShmBackend::RemoveConnection(ShmConnection* c) {
  std::lock_guard<std::mutex> lock(mu_);
  connections_.erase(std::remove(connections_.begin(), connections_.end(), c), connections_.end());
}

StatusOr<std::unique_ptr<Endpoint>> ShmBackend::CreateEndpoint(int peer, uint32_t tag) {
  if (peer < 0 || peer >= options_.world_size) {
    return InvalidArgumentError("shm: peer rank " + std::to_string(peer) + " outside world size " +
                                std::to_string(options_.world_size));
  }
  CIUIC_ASSIGN_OR_RETURN(std::shared_ptr<Segment> seg,
                         CreateSegment(sizeof(RingShared), "ring", false));
  auto* ring = new (seg->base) RingShared;
  ring->header.magic = shm::kRingMagic;
  ring->header.version = shm::kLayoutVersion;
  ring->header.capacity = kRingEntries;
  ring->header.entry_bytes = kEntryBytes;
  ring->header.seg_id = seg->seg_id;
  ring->header.owner_rank = options_.rank;
  ring->header.producer_rank = peer;
  ring->header.tag = tag;
  ring->header.owner_pid = static_cast<uint32_t>(pid_);
  // The rest is zero (a fresh memfd): head 0, no entry published, open.
  return std::unique_ptr<Endpoint>(std::make_unique<ShmEndpoint>(this, peer, tag, std::move(seg)));
}

StatusOr<std::unique_ptr<MemoryRegion>> ShmBackend::Allocate(size_t bytes) {
  if (bytes == 0) return InvalidArgumentError("shm: Allocate of 0 bytes");
  if (bytes > (uint64_t{1} << 46)) {
    return ResourceExhaustedError("shm: Allocate of " + std::to_string(bytes) + " bytes");
  }
  CIUIC_ASSIGN_OR_RETURN(std::shared_ptr<Segment> seg, CreateSegment(bytes, "pool", true));
  {
    std::lock_guard<std::mutex> lock(mu_);
    pool_segments_.push_back(seg);
  }
  void* data = seg->base;
  return std::unique_ptr<MemoryRegion>(
      std::make_unique<ShmRegion>(this, data, bytes, std::move(seg), 0));
}

StatusOr<std::unique_ptr<MemoryRegion>> ShmBackend::Register(void* addr, size_t bytes) {
  if (addr == nullptr || bytes == 0) {
    return InvalidArgumentError("shm: Register of " + std::to_string(bytes) + " bytes at " +
                                (addr == nullptr ? "null" : "0x" + Hex64(reinterpret_cast<uintptr_t>(addr))));
  }
  if (reinterpret_cast<uintptr_t>(addr) + bytes < reinterpret_cast<uintptr_t>(addr)) {
    return InvalidArgumentError("shm: Register range wraps around the address space");
  }
  size_t offset = 0;
  std::shared_ptr<Segment> seg = FindPoolSegment(addr, bytes, &offset);
  return std::unique_ptr<MemoryRegion>(
      std::make_unique<ShmRegion>(this, addr, bytes, std::move(seg), offset));
}

bool ShmBackend::AnyActivity(bool* blocked) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const ShmConnection* c : connections_) {
    if (c->PeerActivity(blocked)) return true;
  }
  return false;
}

void ShmBackend::WaitForActivity(std::chrono::microseconds max) {
  const auto start = Clock::now();
  const auto end = start + std::max(max, std::chrono::microseconds(0));
  bool blocked = false;
  if (AnyActivity(&blocked)) return;
  const auto spin_end = std::min(end, start + kSpinFor);
  while (Clock::now() < spin_end) {
    for (int i = 0; i < 16; ++i) CpuRelax();
    if (AnyActivity(&blocked)) return;
  }
  const auto yield_end = std::min(end, start + kYieldFor);
  while (Clock::now() < yield_end) {
    sched_yield();
    if (AnyActivity(&blocked)) return;
  }
  auto now = Clock::now();
  if (now >= end) return;
  DoorbellShared::Bell& bell = doorbell_->bell;
  const uint32_t seen = bell.word.load(std::memory_order_acquire);
  bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
  blocked = false;
  if (!AnyActivity(&blocked)) {
    now = Clock::now();
    auto wake = end;
    // A producer waiting for ring room may miss its wake-up (the consumer
    // checks the flag without a fence): poll at a bounded period then.
    if (blocked) wake = std::min(end, now + kBlockedPollPeriod);
    if (now < wake) {
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(wake - now).count();
      timespec ts{static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
      // Shared (not private) futex: the word lives in a memfd mapped by peers.
      Futex(&bell.word, FUTEX_WAIT, seen, &ts);
    }
  }
  bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> OpenShmBackend(const BackendOptions& options) {
  if (options.rank < 0 || options.world_size < 1 || options.rank >= options.world_size) {
    return InvalidArgumentError("shm: rank " + std::to_string(options.rank) +
                                " outside world size " + std::to_string(options.world_size));
  }
  auto backend = std::make_unique<ShmBackend>(options);
  CIUIC_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace ciuic::transport
