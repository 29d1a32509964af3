// MemoryMonitor over userfaultfd (see mem_monitor.h).
#include "transport/mem_monitor.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

#include "common/cpu_relax.h"

namespace ciuic::transport {
namespace {

constexpr uint64_t kFeatures = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE |
                               UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_MISSING_SHMEM |
                               UFFD_FEATURE_MISSING_HUGETLBFS;
constexpr uint64_t kNeeded =
    UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_REMAP;

uintptr_t PageSize() {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return page;
}

std::string Errno(int e) { return std::string(strerror(e)) + " (errno " + std::to_string(e) + ")"; }

}  // namespace

class MemoryMonitor::Impl {
 public:
  Impl() {
    pthread_mutex_init(&init_mu, nullptr);
    pthread_mutex_init(&watch_mu, nullptr);
  }

  // Opens the userfaultfd and starts the thread (under init_mu).
  Status StartLocked() {
    if (fd >= 0) return Status::Ok();
    if (!failure.empty()) return UnavailableError(failure);
    // Kernel-mode faults too where the process may (root, CAP_SYS_PTRACE or
    // vm.unprivileged_userfaultfd=1); else user-mode faults only (>= 5.11).
    int f = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (f < 0 && errno == EPERM) {
      f = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
    }
    if (f < 0) {
      failure = "userfaultfd: " + Errno(errno) +
                " (kernel without userfaultfd, a seccomp filter, or vm.unprivileged_userfaultfd=0 "
                "on a kernel older than 5.11)";
      return UnavailableError(failure);
    }
    uffdio_api api{};
    api.api = UFFD_API;
    api.features = kFeatures;
    if (ioctl(f, UFFDIO_API, &api) != 0) {
      // Older kernels refuse features they lack: ask for the needed ones only.
      close(f);
      f = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
      api = uffdio_api{};
      api.api = UFFD_API;
      api.features = kNeeded;
      if (f < 0 || ioctl(f, UFFDIO_API, &api) != 0) {
        failure = "userfaultfd: UFFDIO_API refused the unmap/remove/remap events: " + Errno(errno);
        if (f >= 0) close(f);
        return UnavailableError(failure);
      }
    }
    if ((api.features & kNeeded) != kNeeded) {
      close(f);
      failure = "userfaultfd: the kernel lacks the unmap/remove/remap events";
      return UnavailableError(failure);
    }
    fd = f;
    // Return only once the thread runs: a fork() while it is still starting
    // hangs the child under ASan (the child's first thread waits on a lock the
    // starting thread held at the fork; 46 of 2000 forks in a small repro).
    std::atomic<bool> running{false};
    std::thread([this, f, &running] {
      running.store(true, std::memory_order_release);
      Loop(f);
    }).detach();
    while (!running.load(std::memory_order_acquire)) std::this_thread::yield();
    return Status::Ok();
  }

  // The monitor thread: no allocation, no lock (see the header).
  void Loop(int f) {
    for (;;) {
      pollfd p{f, POLLIN, 0};
      const int r = poll(&p, 1, -1);
      if (r < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if ((p.revents & (POLLERR | POLLNVAL)) != 0) return;
      busy.store(true, std::memory_order_seq_cst);
      for (;;) {
        uffd_msg msgs[32];
        const ssize_t n = read(f, msgs, sizeof(msgs));
        if (n <= 0) break;
        for (size_t i = 0; i < static_cast<size_t>(n) / sizeof(uffd_msg); ++i) Handle(f, msgs[i]);
      }
      busy.store(false, std::memory_order_seq_cst);
    }
  }

  void Handle(int f, const uffd_msg& m) {
    const uintptr_t page = PageSize();
    switch (m.event) {
      case UFFD_EVENT_UNMAP:
        Publish(m.arg.remove.start, m.arg.remove.end);
        break;
      case UFFD_EVENT_REMOVE: {
        // The pages are about to be discarded: stop watching them so later
        // faults there (kernel-mode ones included) are ordinary faults.
        Publish(m.arg.remove.start, m.arg.remove.end);
        uffdio_range range{m.arg.remove.start, m.arg.remove.end - m.arg.remove.start};
        (void)ioctl(f, UFFDIO_UNREGISTER, &range);
        break;
      }
      case UFFD_EVENT_REMAP: {
        Publish(m.arg.remap.from, m.arg.remap.from + m.arg.remap.len);
        // The watch moved with the mapping; the new place was never asked for.
        uffdio_range range{m.arg.remap.to, m.arg.remap.len};
        (void)ioctl(f, UFFDIO_UNREGISTER, &range);
        break;
      }
      case UFFD_EVENT_PAGEFAULT: {
        faults.fetch_add(1, std::memory_order_relaxed);
        const uintptr_t at = static_cast<uintptr_t>(m.arg.pagefault.address) & ~(page - 1);
        Publish(at, at + page);
        uffdio_range range{at, page};
        // Stop watching the page; unregistering wakes the faulting thread,
        // which then faults the page in as usual.
        if (ioctl(f, UFFDIO_UNREGISTER, &range) != 0) {
          uffdio_zeropage z{};
          z.range = range;
          if (ioctl(f, UFFDIO_ZEROPAGE, &z) != 0) (void)ioctl(f, UFFDIO_WAKE, &range);
        }
        break;
      }
      default:
        break;
    }
  }

  // Single producer: reserve the sequence number, then write the slot, then
  // publish (a seqlock, so readers can tell a slot overwritten under them).
  void Publish(uintptr_t start, uintptr_t end) {
    const uint64_t seq = published.load(std::memory_order_relaxed);
    reserved.store(seq + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    Slot& s = ring[seq % kRingEvents];
    s.start.store(start, std::memory_order_relaxed);
    s.end.store(end, std::memory_order_relaxed);
    published.store(seq + 1, std::memory_order_release);
    events.fetch_add(1, std::memory_order_relaxed);
  }

  // Unregisters the parts of [a, b) that no remaining watch covers (under
  // watch_mu; `watches` is sorted by start).
  void UnregisterUncovered(uintptr_t a, uintptr_t b) {
    // Collect the covered intervals that overlap [a, b), then unregister the gaps.
    uintptr_t pos = a;
    for (const auto& [range, count] : watches) {
      if (count <= 0) continue;
      const uintptr_t s = range.first, e = range.second;
      if (e <= pos || s >= b) continue;
      if (s > pos) {
        uffdio_range r{pos, s - pos};
        (void)ioctl(fd, UFFDIO_UNREGISTER, &r);
      }
      if (e > pos) pos = e;
      if (pos >= b) return;
    }
    if (pos < b) {
      uffdio_range r{pos, b - pos};
      (void)ioctl(fd, UFFDIO_UNREGISTER, &r);
    }
  }

  struct Slot {
    std::atomic<uintptr_t> start{0};
    std::atomic<uintptr_t> end{0};
  };

  pthread_mutex_t init_mu;   // fd, failure, starting the thread
  pthread_mutex_t watch_mu;  // watches
  int fd = -1;
  std::string failure;
  std::map<std::pair<uintptr_t, uintptr_t>, int> watches;  // range -> Watch count
  std::atomic<bool> busy{false};
  std::atomic<uint64_t> reserved{0};
  std::atomic<uint64_t> published{0};
  std::atomic<uint64_t> epoch{0};
  std::atomic<uint64_t> watch_count{0}, events{0}, faults{0};
  Slot ring[kRingEvents];
};

namespace {
MemoryMonitor::Impl* g_impl = nullptr;

// In a forked child: no thread, and the kernel dropped the watches.
void AfterForkInChild() {
  MemoryMonitor::Impl* m = g_impl;
  if (m == nullptr) return;
  pthread_mutex_init(&m->init_mu, nullptr);
  pthread_mutex_init(&m->watch_mu, nullptr);
  if (m->fd >= 0) close(m->fd);
  m->fd = -1;
  m->failure.clear();
  m->watches.clear();
  m->busy.store(false);
  m->epoch.fetch_add(1);
}
}  // namespace

MemoryMonitor::MemoryMonitor() : impl_(new Impl) {
  g_impl = impl_;
  pthread_atfork(nullptr, nullptr, AfterForkInChild);
}

MemoryMonitor& MemoryMonitor::Get() {
  static MemoryMonitor* monitor = new MemoryMonitor;  // never destroyed: its thread outlives exit
  return *monitor;
}

bool MemoryMonitor::Available(std::string* why) {
  pthread_mutex_lock(&impl_->init_mu);
  Status s = impl_->StartLocked();
  pthread_mutex_unlock(&impl_->init_mu);
  if (!s.ok() && why != nullptr) *why = s.message();
  return s.ok();
}

Status MemoryMonitor::Watch(uintptr_t start, uintptr_t end) {
  const uintptr_t page = PageSize();
  const uintptr_t a = start & ~(page - 1);
  const uintptr_t b = (end + page - 1) & ~(page - 1);
  if (b <= a) return InvalidArgumentError("MemoryMonitor::Watch: empty range");
  pthread_mutex_lock(&impl_->init_mu);
  Status s = impl_->StartLocked();
  const int f = impl_->fd;
  pthread_mutex_unlock(&impl_->init_mu);
  if (!s.ok()) return s;
  uffdio_register reg{};
  reg.range.start = a;
  reg.range.len = b - a;
  reg.mode = UFFDIO_REGISTER_MODE_MISSING;
  pthread_mutex_lock(&impl_->watch_mu);
  if (ioctl(f, UFFDIO_REGISTER, &reg) != 0) {
    const int e = errno;
    pthread_mutex_unlock(&impl_->watch_mu);
    char where[64];
    snprintf(where, sizeof(where), "[%#lx, +%lu)", static_cast<unsigned long>(a),
             static_cast<unsigned long>(b - a));
    return UnavailableError(std::string("userfaultfd cannot watch ") + where + ": " + Errno(e) +
                            (e == EINVAL ? " (file-backed or unmapped memory)"
                             : e == EBUSY ? " (another userfaultfd watches it)"
                                          : ""));
  }
  ++impl_->watches[{a, b}];
  pthread_mutex_unlock(&impl_->watch_mu);
  impl_->watch_count.fetch_add(1, std::memory_order_relaxed);
  return Status::Ok();
}

void MemoryMonitor::Unwatch(uintptr_t start, uintptr_t end) {
  const uintptr_t page = PageSize();
  const uintptr_t a = start & ~(page - 1);
  const uintptr_t b = (end + page - 1) & ~(page - 1);
  pthread_mutex_lock(&impl_->watch_mu);
  auto it = impl_->watches.find({a, b});
  if (it != impl_->watches.end() && --it->second <= 0) {
    impl_->watches.erase(it);
    if (impl_->fd >= 0) impl_->UnregisterUncovered(a, b);
  }
  pthread_mutex_unlock(&impl_->watch_mu);
}

uint64_t MemoryMonitor::Sync() {
  // An unmapping thread is released when the monitor reads its event, which
  // the monitor does only while busy: once busy is clear, whatever it has
  // read is published.
  for (int spins = 0; impl_->busy.load(std::memory_order_seq_cst); ++spins) {
    if (spins < 1000) {
      CpuRelax();
    } else {
      std::this_thread::yield();
    }
  }
  return impl_->published.load(std::memory_order_acquire);
}

uint64_t MemoryMonitor::Published() const { return impl_->published.load(std::memory_order_acquire); }

MemoryMonitor::Event MemoryMonitor::At(uint64_t seq) const {
  const Impl::Slot& s = impl_->ring[seq % kRingEvents];
  return Event{s.start.load(std::memory_order_relaxed), s.end.load(std::memory_order_relaxed)};
}

bool MemoryMonitor::Fresh(uint64_t seq) const {
  std::atomic_thread_fence(std::memory_order_acquire);
  return impl_->reserved.load(std::memory_order_relaxed) <= seq + kRingEvents;
}

uint64_t MemoryMonitor::epoch() const { return impl_->epoch.load(); }

MemoryMonitor::Stats MemoryMonitor::stats() const {
  Stats s;
  s.watches = impl_->watch_count.load(std::memory_order_relaxed);
  s.events = impl_->events.load(std::memory_order_relaxed);
  s.faults = impl_->faults.load(std::memory_order_relaxed);
  return s;
}

}  // namespace ciuic::transport
