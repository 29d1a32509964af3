// White-box tests of the shm backend. Multi-rank tests fork real processes
// that meet in a FileStore; checks that need no second process (argument
// validation, blob parsing) run two backends inside one process.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"
#include "transport/backends.h"
#include "transport/shm/shm_ring.h"
#include "transport/shm/shm_wire.h"

namespace ciuic::transport {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using Kind = Completion::Kind;

constexpr milliseconds kTimeout(20000);
constexpr uint32_t kSeed = 20261104;

std::string NewJobId() {
  static int n = 0;
  return "shmtest-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

// CLOCK_MONOTONIC in ns: comparable between processes (steady_clock is it).
int64_t MonoNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

uint8_t Pattern(uint64_t i, uint32_t seed) {
  return static_cast<uint8_t>(((i + seed) * 0x9E3779B97F4A7C15ull) >> 56);
}
void FillPattern(uint8_t* p, size_t n, uint64_t first, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) p[i] = Pattern(first + i, seed);
}
// Index of the first byte that differs from the pattern, or n.
size_t CheckPattern(const uint8_t* p, size_t n, uint64_t first, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != Pattern(first + i, seed)) return i;
  }
  return n;
}

class TempDir {
 public:
  TempDir() {
    char t[] = "/tmp/ciuic-shmtest-XXXXXX";
    path_ = mkdtemp(t);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::unique_ptr<Backend> OpenOrDie(int rank, int size, const std::string& job) {
  BackendOptions o;
  o.rank = rank;
  o.world_size = size;
  o.job_id = job;
  auto b = OpenShmBackend(o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

std::unique_ptr<Store> StoreAt(const std::string& dir) {
  auto s = FileStore::Open(dir);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::unique_ptr<Store>(std::move(*s)) : nullptr;
}

// Runs body(rank) in `n` forked processes and checks that each exits 0
// (a child exits 1 when one of its expectations failed). Children are
// killed when they outlive `timeout`.
void RunRanks(int n, const std::function<void(int)>& body, milliseconds timeout = milliseconds(40000)) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(static_cast<unsigned>(timeout.count() / 1000 + 5));
      body(r);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(::testing::Test::HasFailure() ? 1 : 0);
    }
    pids.push_back(pid);
  }
  const auto deadline = Clock::now() + timeout;
  std::vector<int> status(n, -1);
  int left = n;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (status[r] != -1) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        --left;
      }
    }
    if (left == 0) break;
    if (Clock::now() > deadline) {
      for (int r = 0; r < n; ++r) {
        if (status[r] == -1) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], &status[r], 0);
          ADD_FAILURE() << "rank " << r << " timed out";
        }
      }
      break;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0)
        << "rank " << r << " status " << status[r];
  }
}

// Buffers completions of one connection and hands them out by kind.
class Poller {
 public:
  Poller(Backend& b, Connection& c) : b_(b), c_(c) {}

  // Progresses once; returns how many completions arrived.
  StatusOr<size_t> Pump() {
    Completion buf[16];
    StatusOr<size_t> n = c_.Progress(buf, 16);
    if (!n.ok()) return n;
    for (size_t i = 0; i < *n; ++i) q_.push_back(buf[i]);
    return n;
  }
  // The next completion accepted by `want` (in order); others stay queued.
  StatusOr<Completion> Next(const std::function<bool(const Completion&)>& want,
                            milliseconds timeout = kTimeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      for (auto it = q_.begin(); it != q_.end(); ++it) {
        if (want(*it)) {
          Completion c = *it;
          q_.erase(it);
          return c;
        }
      }
      StatusOr<size_t> n = Pump();
      if (!n.ok()) return n.status();
      if (*n == 0) {
        if (Clock::now() > deadline) return DeadlineExceededError("no completion");
        b_.WaitForActivity(milliseconds(1));
      }
    }
  }
  StatusOr<Completion> Next(Kind kind, milliseconds timeout = kTimeout) {
    return Next([kind](const Completion& c) { return c.kind == kind; }, timeout);
  }
  // The next kWriteReceived or kMessage.
  StatusOr<Completion> NextRemote(milliseconds timeout = kTimeout) {
    return Next([](const Completion& c) { return c.kind != Kind::kWriteDone; }, timeout);
  }
  // Retries `post` while it returns kResourceExhausted, progressing.
  Status Retry(const std::function<Status()>& post, milliseconds timeout = kTimeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      Status s = post();
      if (s.code() != StatusCode::kResourceExhausted) return s;
      StatusOr<size_t> n = Pump();
      if (!n.ok()) return n.status();
      if (Clock::now() > deadline) return s;
      if (*n == 0) b_.WaitForActivity(milliseconds(1));
    }
  }
  size_t queued() const { return q_.size(); }

 private:
  Backend& b_;
  Connection& c_;
  std::deque<Completion> q_;
};

// Connections of `rank` to every other rank (index = peer; own slot null).
std::vector<std::unique_ptr<Connection>> ConnectAll(Backend& b, Store& store, int rank, int n) {
  std::vector<std::unique_ptr<Connection>> conns(n);
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    auto c = ConnectThroughStore(b, store, "t", rank, p, 0, kTimeout);
    EXPECT_TRUE(c.ok()) << "rank " << rank << " -> " << p << ": " << c.status().ToString();
    if (c.ok()) conns[p] = std::move(*c);
  }
  return conns;
}

// Two backends (ranks 0 and 1) of one job in this process, connected.
struct LocalPair {
  std::unique_ptr<Backend> b0, b1;
  std::unique_ptr<Connection> c0, c1;  // c0: rank 0 -> 1
};
LocalPair MakeLocalPair(const std::string& job, uint32_t tag = 0) {
  LocalPair p;
  p.b0 = OpenOrDie(0, 2, job);
  p.b1 = OpenOrDie(1, 2, job);
  if (!p.b0 || !p.b1) return p;
  auto e0 = p.b0->CreateEndpoint(1, tag);
  auto e1 = p.b1->CreateEndpoint(0, tag);
  EXPECT_TRUE(e0.ok() && e1.ok());
  if (!e0.ok() || !e1.ok()) return p;
  const auto deadline = Clock::now() + kTimeout;
  auto c0 = (*e0)->Connect((*e1)->Describe(), deadline);
  auto c1 = (*e1)->Connect((*e0)->Describe(), deadline);
  EXPECT_TRUE(c0.ok()) << c0.status().ToString();
  EXPECT_TRUE(c1.ok()) << c1.status().ToString();
  if (c0.ok()) p.c0 = std::move(*c0);
  if (c1.ok()) p.c1 = std::move(*c1);
  return p;
}

// Lines of /proc/self/maps plus the targets of /proc/self/fd naming `what`.
int CountSelfReferences(const std::string& what) {
  int count = 0;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    if (line.find(what) != std::string::npos) ++count;
  }
  DIR* d = opendir("/proc/self/fd");
  if (d != nullptr) {
    while (dirent* e = readdir(d)) {
      char target[512];
      const std::string path = std::string("/proc/self/fd/") + e->d_name;
      const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
      if (n > 0 && std::string(target, n).find(what) != std::string::npos) ++count;
    }
    closedir(d);
  }
  return count;
}

// Kills and reaps a forked child unless reaped already (release()).
class ChildGuard {
 public:
  explicit ChildGuard(pid_t pid) : pid_(pid) {}
  ~ChildGuard() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  void release() { pid_ = -1; }

 private:
  pid_t pid_;
};

int CountDevShm(const std::string& what) {
  int count = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    if (e.path().filename().string().find(what) != std::string::npos) ++count;
  }
  return count;
}

// ---------------------------------------------------------------------------

class ShmRanksTest : public ::testing::TestWithParam<int> {};

TEST_P(ShmRanksTest, ConnectsAndExchangesMessagesAndWrites) {
  const int n = GetParam();
  const std::string job = NewJobId();
  TempDir dir;
  RunRanks(n, [&](int rank) {
    auto store = StoreAt(dir.path());
    auto b = OpenOrDie(rank, n, job);
    ASSERT_TRUE(store && b);
    EXPECT_EQ(b->kind(), BackendKind::kShm);
    EXPECT_EQ(b->Describe().rfind("shm pid=" + std::to_string(getpid()), 0), 0u) << b->Describe();
    EXPECT_NE(b->Describe().find("segments="), std::string::npos) << b->Describe();
    // Each rank receives one 64-byte slot of writes from every peer.
    auto mine = b->Allocate(64 * n);
    ASSERT_TRUE(mine.ok());
    std::memset((*mine)->data(), 0, 64 * n);
    ASSERT_TRUE(store->Set("region/" + std::to_string(rank), (*mine)->Describe()).ok());
    auto conns = ConnectAll(*b, *store, rank, n);
    auto src = b->Allocate(64);
    ASSERT_TRUE(src.ok());
    FillPattern(static_cast<uint8_t*>((*src)->data()), 64, rank, kSeed);
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      ASSERT_TRUE(conns[p]);
      EXPECT_EQ(conns[p]->peer(), p);
      EXPECT_EQ(conns[p]->max_outstanding(), shm::kRingEntries);
      auto blob = store->Get("region/" + std::to_string(p), kTimeout);
      ASSERT_TRUE(blob.ok());
      auto rr = conns[p]->ImportRegion(*blob);
      ASSERT_TRUE(rr.ok()) << rr.status().ToString();
      EXPECT_EQ(rr->size, 64u * n);
      const std::string hello = "hello " + std::to_string(rank) + "->" + std::to_string(p);
      ASSERT_TRUE(conns[p]->PostMessage(hello.data(), hello.size()).ok());
      ASSERT_TRUE(conns[p]->PostWrite(**src, 0, *rr, 64 * rank, 64, 1000 + rank, 7).ok());
    }
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      Poller poll(*b, *conns[p]);
      auto m = poll.NextRemote();
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      EXPECT_EQ(m->kind, Kind::kMessage);
      const std::string want = "hello " + std::to_string(p) + "->" + std::to_string(rank);
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data), m->len), want);
      auto w = poll.NextRemote();
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      EXPECT_EQ(w->kind, Kind::kWriteReceived);
      EXPECT_EQ(w->imm, 1000u + p);
      EXPECT_EQ(w->len, 64u);
      EXPECT_EQ(CheckPattern(static_cast<uint8_t*>((*mine)->data()) + 64 * p, 64, p, kSeed), 64u);
      auto d = poll.Next(Kind::kWriteDone);
      ASSERT_TRUE(d.ok());
      EXPECT_EQ(d->wr_id, 7u);
    }
    // Everyone is done before anyone closes (closing is tested elsewhere).
    ASSERT_TRUE(store->Add("done", 1).ok());
    for (int i = 0; i < 5000 && *store->Add("done", 0) < n; ++i) {
      std::this_thread::sleep_for(milliseconds(1));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, ShmRanksTest, ::testing::Values(2, 3));

// Writes of 0, 1, 7, 4096, 1 MiB + 3 and 64 MiB into an Allocate()d
// (memcpy into the mapping) and a Register()ed (process_vm_writev) region,
// every byte verified, the bytes around untouched.
TEST(ShmBackendTest, WritesOfManySizesIntoBothRegionKinds) {
  constexpr size_t kBig = 64u << 20;
  constexpr size_t kRegion = kBig + 4096;
  constexpr size_t kSizes[] = {0, 1, 7, 4096, (1u << 20) + 3, kBig};
  constexpr uint8_t kGuard = 0xEE;
  const std::string job = NewJobId();
  TempDir dir;
  RunRanks(2, [&](int rank) {
    auto store = StoreAt(dir.path());
    auto b = OpenOrDie(rank, 2, job);
    ASSERT_TRUE(store && b);
    if (rank == 1) {
      auto pooled = b->Allocate(kRegion);
      ASSERT_TRUE(pooled.ok()) << pooled.status().ToString();
      void* mem = mmap(nullptr, kRegion, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      ASSERT_NE(mem, MAP_FAILED);
      auto caller = b->Register(mem, kRegion);
      ASSERT_TRUE(caller.ok()) << caller.status().ToString();
      MemoryRegion* dst[2] = {pooled->get(), caller->get()};
      for (MemoryRegion* r : dst) std::memset(r->data(), kGuard, kRegion);
      ASSERT_TRUE(store->Set("pooled", (*pooled)->Describe()).ok());
      ASSERT_TRUE(store->Set("caller", (*caller)->Describe()).ok());
      auto c = ConnectThroughStore(*b, *store, "t", 1, 0, 0, kTimeout);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      Poller poll(*b, **c);
      for (int k = 0; k < 2; ++k) {
        for (size_t size : kSizes) {
          auto w = poll.NextRemote();
          ASSERT_TRUE(w.ok()) << w.status().ToString();
          ASSERT_EQ(w->kind, Kind::kWriteReceived);
          ASSERT_EQ(w->len, size);
          const size_t dst_off = size == kBig ? 4096 : 5;
          const size_t src_off = size == kBig ? 0 : 3;
          uint8_t* p = static_cast<uint8_t*>(dst[k]->data());
          EXPECT_EQ(CheckPattern(p + dst_off, size, src_off, kSeed), size)
              << "region " << k << " size " << size;
          EXPECT_EQ(p[dst_off - 1], kGuard);
          if (dst_off + size < kRegion) {
            EXPECT_EQ(p[dst_off + size], kGuard);
          }
          std::memset(p + dst_off, kGuard, size);
          const uint64_t ack = w->imm;
          ASSERT_TRUE((*c)->PostMessage(&ack, sizeof(ack)).ok());
        }
      }
      // Wait for the sender to finish before closing.
      auto bye = poll.Next(Kind::kMessage);
      EXPECT_TRUE(bye.ok());
      munmap(mem, kRegion);
    } else {
      auto src = b->Allocate(kRegion);
      ASSERT_TRUE(src.ok());
      FillPattern(static_cast<uint8_t*>((*src)->data()), kRegion, 0, kSeed);
      auto c = ConnectThroughStore(*b, *store, "t", 0, 1, 0, kTimeout);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      RemoteRegion dst[2];
      int k = 0;
      for (const char* key : {"pooled", "caller"}) {
        auto blob = store->Get(key, kTimeout);
        ASSERT_TRUE(blob.ok());
        auto rr = (*c)->ImportRegion(*blob);
        ASSERT_TRUE(rr.ok()) << rr.status().ToString();
        EXPECT_EQ(rr->size, kRegion);
        dst[k++] = *rr;
      }
      EXPECT_NE((*c)->PeerMemoryPointer(dst[0], 0), nullptr);
      EXPECT_EQ((*c)->PeerMemoryPointer(dst[1], 0), nullptr) << "caller memory is not mapped";
      Poller poll(*b, **c);
      uint32_t imm = 0;
      for (k = 0; k < 2; ++k) {
        for (size_t size : kSizes) {
          const size_t dst_off = size == kBig ? 4096 : 5;
          const size_t src_off = size == kBig ? 0 : 3;
          ASSERT_TRUE((*c)->PostWrite(**src, src_off, dst[k], dst_off, size, imm, 100 + imm).ok());
          auto d = poll.Next(Kind::kWriteDone);
          ASSERT_TRUE(d.ok());
          EXPECT_EQ(d->wr_id, 100u + imm);
          auto ack = poll.Next(Kind::kMessage);
          ASSERT_TRUE(ack.ok()) << ack.status().ToString();
          uint64_t got;
          std::memcpy(&got, ack->data, sizeof(got));
          EXPECT_EQ(got, imm);
          ++imm;
        }
      }
      ASSERT_TRUE((*c)->PostMessage("bye", 3).ok());
      // Let rank 1 read "bye" before this side closes (it would also be
      // delivered after the close; this keeps the test's intent plain).
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
}

// Writes (alternating both region kinds) and messages interleaved arrive in
// posting order, and a write's bytes are visible when its notification is.
TEST(ShmBackendTest, WritesAndMessagesStayInOrder) {
  constexpr uint64_t kOps = 20000;
  constexpr size_t kSlots = 2 * shm::kRingEntries;  // no slot reused while unconsumed
  const std::string job = NewJobId();
  TempDir dir;
  RunRanks(2, [&](int rank) {
    auto store = StoreAt(dir.path());
    auto b = OpenOrDie(rank, 2, job);
    ASSERT_TRUE(store && b);
    if (rank == 1) {
      auto pooled = b->Allocate(kSlots * 8);
      std::vector<uint64_t> caller_mem(kSlots, ~0ull);
      auto caller = b->Register(caller_mem.data(), kSlots * 8);
      ASSERT_TRUE(pooled.ok() && caller.ok());
      ASSERT_TRUE(store->Set("pooled", (*pooled)->Describe()).ok());
      ASSERT_TRUE(store->Set("caller", (*caller)->Describe()).ok());
      auto c = ConnectThroughStore(*b, *store, "t", 1, 0, 0, kTimeout);
      ASSERT_TRUE(c.ok());
      const uint64_t* slots[2] = {static_cast<const uint64_t*>((*pooled)->data()), caller_mem.data()};
      Completion buf[32];
      uint64_t next = 0;
      const auto deadline = Clock::now() + kTimeout;
      while (next < kOps && Clock::now() < deadline) {
        auto got = (*c)->Progress(buf, 32);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        if (*got == 0) b->WaitForActivity(milliseconds(1));
        for (size_t i = 0; i < *got; ++i, ++next) {
          const Completion& m = buf[i];
          if (next % 3 == 0) {
            ASSERT_EQ(m.kind, Kind::kMessage) << "op " << next;
            ASSERT_EQ(m.len, 8 + next % 57);
            uint64_t v;
            std::memcpy(&v, m.data, 8);
            ASSERT_EQ(v, next);
            for (size_t j = 8; j < m.len; ++j) ASSERT_EQ(m.data[j], static_cast<uint8_t>(next + j));
          } else {
            ASSERT_EQ(m.kind, Kind::kWriteReceived) << "op " << next;
            ASSERT_EQ(m.imm, static_cast<uint32_t>(next));
            ASSERT_EQ(m.len, 8u);
            const uint64_t v = __atomic_load_n(&slots[next % 2][next % kSlots], __ATOMIC_RELAXED);
            ASSERT_EQ(v, next) << "payload not visible with its notification";
          }
        }
      }
      EXPECT_EQ(next, kOps);
      ASSERT_TRUE((*c)->PostMessage("ok", 2).ok());
      std::this_thread::sleep_for(milliseconds(20));
    } else {
      auto src = b->Allocate(kSlots * 8);
      ASSERT_TRUE(src.ok());
      auto* vals = static_cast<uint64_t*>((*src)->data());
      auto c = ConnectThroughStore(*b, *store, "t", 0, 1, 0, kTimeout);
      ASSERT_TRUE(c.ok());
      RemoteRegion dst[2];
      auto p = (*c)->ImportRegion(*store->Get("pooled", kTimeout));
      auto q = (*c)->ImportRegion(*store->Get("caller", kTimeout));
      ASSERT_TRUE(p.ok() && q.ok());
      dst[0] = *p;
      dst[1] = *q;
      Poller poll(*b, **c);
      for (uint64_t k = 0; k < kOps; ++k) {
        Status s;
        if (k % 3 == 0) {
          uint8_t msg[kMaxMessageBytes];
          std::memcpy(msg, &k, 8);
          const size_t len = 8 + k % 57;
          for (size_t j = 8; j < len; ++j) msg[j] = static_cast<uint8_t>(k + j);
          s = poll.Retry([&] { return (*c)->PostMessage(msg, len); });
        } else {
          // The source slot is reused only after its kWriteDone (copy done).
          const size_t slot = k % kSlots;
          vals[slot] = k;
          s = poll.Retry([&] {
            return (*c)->PostWrite(**src, slot * 8, dst[k % 2], slot * 8, 8, static_cast<uint32_t>(k), k);
          });
        }
        ASSERT_TRUE(s.ok()) << "op " << k << ": " << s.ToString();
      }
      // Every kWriteDone arrives, in order.
      for (uint64_t k = 0; k < kOps; ++k) {
        if (k % 3 == 0) continue;
        auto d = poll.Next(Kind::kWriteDone);
        ASSERT_TRUE(d.ok());
        ASSERT_EQ(d->wr_id, k);
      }
      auto ok = poll.Next(Kind::kMessage);
      ASSERT_TRUE(ok.ok()) << ok.status().ToString();
    }
  });
}

// A kernel writes into the peer's segment through PeerMemoryPointer; a
// zero-length write is then only the notification.
TEST(ShmBackendTest, PeerMemoryPointerThenZeroLengthNotify) {
  const std::string job = NewJobId();
  TempDir dir;
  RunRanks(2, [&](int rank) {
    auto store = StoreAt(dir.path());
    auto b = OpenOrDie(rank, 2, job);
    ASSERT_TRUE(store && b);
    auto region = b->Allocate(8192);
    ASSERT_TRUE(region.ok());
    if (rank == 1) {
      std::memset((*region)->data(), 0, 8192);
      ASSERT_TRUE(store->Set("r", (*region)->Describe()).ok());
      auto c = ConnectThroughStore(*b, *store, "t", 1, 0, 0, kTimeout);
      ASSERT_TRUE(c.ok());
      Poller poll(*b, **c);
      auto w = poll.NextRemote();
      ASSERT_TRUE(w.ok()) << w.status().ToString();
      EXPECT_EQ(w->kind, Kind::kWriteReceived);
      EXPECT_EQ(w->imm, 77u);
      EXPECT_EQ(w->len, 0u);
      EXPECT_EQ(CheckPattern(static_cast<uint8_t*>((*region)->data()) + 100, 5000, 9, kSeed), 5000u);
      ASSERT_TRUE((*c)->PostMessage("k", 1).ok());
      std::this_thread::sleep_for(milliseconds(20));
    } else {
      auto c = ConnectThroughStore(*b, *store, "t", 0, 1, 0, kTimeout);
      ASSERT_TRUE(c.ok());
      auto rr = (*c)->ImportRegion(*store->Get("r", kTimeout));
      ASSERT_TRUE(rr.ok());
      auto* p = static_cast<uint8_t*>((*c)->PeerMemoryPointer(*rr, 100));
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(static_cast<uint8_t*>((*c)->PeerMemoryPointer(*rr, 0)) + 100, p);
      EXPECT_EQ((*c)->PeerMemoryPointer(*rr, 8192), nullptr);
      EXPECT_EQ((*c)->PeerMemoryPointer(RemoteRegion{99, 10}, 0), nullptr);
      FillPattern(p, 5000, 9, kSeed);
      ASSERT_TRUE((*c)->PostWrite(**region, 0, *rr, 100, 0, 77, 5).ok());
      Poller poll(*b, **c);
      auto d = poll.Next(Kind::kWriteDone);
      ASSERT_TRUE(d.ok());
      EXPECT_EQ(d->wr_id, 5u);
      EXPECT_TRUE(poll.Next(Kind::kMessage).ok());
    }
  });
}

// max_outstanding() posts fill the ring; the next is kResourceExhausted
// until the peer progresses. Writes are also bounded by unreported
// kWriteDone completions.
TEST(ShmBackendTest, FullRingIsResourceExhaustedThenRecovers) {
  const std::string job = NewJobId();
  TempDir dir;
  RunRanks(2, [&](int rank) {
    auto store = StoreAt(dir.path());
    auto b = OpenOrDie(rank, 2, job);
    ASSERT_TRUE(store && b);
    auto region = b->Allocate(4096);
    ASSERT_TRUE(region.ok());
    if (rank == 1) {
      ASSERT_TRUE(store->Set("r", (*region)->Describe()).ok());
      auto c = ConnectThroughStore(*b, *store, "t", 1, 0, 0, kTimeout);
      ASSERT_TRUE(c.ok());
      // Not progressing until the sender has seen the ring full.
      ASSERT_TRUE(store->Get("full", kTimeout).ok());
      Poller poll(*b, **c);
      const size_t cap = (*c)->max_outstanding();
      for (size_t i = 0; i < cap + 1; ++i) {
        auto m = poll.NextRemote();
        ASSERT_TRUE(m.ok()) << i << ": " << m.status().ToString();
        ASSERT_EQ(m->kind, Kind::kMessage);
        uint32_t v;
        std::memcpy(&v, m->data, 4);
        ASSERT_EQ(v, i);
      }
      // Phase 2: writes, drained as they come.
      for (size_t i = 0; i < cap + 1; ++i) {
        auto w = poll.NextRemote();
        ASSERT_TRUE(w.ok()) << w.status().ToString();
        ASSERT_EQ(w->kind, Kind::kWriteReceived);
        ASSERT_EQ(w->imm, i);
      }
      ASSERT_TRUE((*c)->PostMessage("k", 1).ok());
      std::this_thread::sleep_for(milliseconds(20));
    } else {
      auto c = ConnectThroughStore(*b, *store, "t", 0, 1, 0, kTimeout);
      ASSERT_TRUE(c.ok());
      auto rr = (*c)->ImportRegion(*store->Get("r", kTimeout));
      ASSERT_TRUE(rr.ok());
      const size_t cap = (*c)->max_outstanding();
      EXPECT_GE(cap, 2u);
      uint32_t i = 0;
      for (; i < cap; ++i) ASSERT_TRUE((*c)->PostMessage(&i, 4).ok()) << i;
      Status full = (*c)->PostMessage(&i, 4);
      EXPECT_EQ(full.code(), StatusCode::kResourceExhausted) << full.ToString();
      ASSERT_TRUE(store->Set("full", "1").ok());
      Poller poll(*b, **c);
      // Recovers once the peer consumes (woken through the doorbell).
      const auto t0 = Clock::now();
      ASSERT_TRUE(poll.Retry([&] { return (*c)->PostMessage(&i, 4); }).ok());
      EXPECT_LT(Clock::now() - t0, milliseconds(5000));
      // Writes without this side progressing: at most max_outstanding()
      // before their kWriteDone must be collected.
      uint32_t w = 0;
      for (; w < cap; ++w) {
        // Only the ring can be full here (the peer may lag): wait for room
        // without collecting completions.
        Status s = (*c)->PostWrite(**region, 0, *rr, 0, 64, w, w);
        const auto until = Clock::now() + kTimeout;
        while (s.code() == StatusCode::kResourceExhausted && Clock::now() < until) {
          b->WaitForActivity(milliseconds(1));
          s = (*c)->PostWrite(**region, 0, *rr, 0, 64, w, w);
        }
        ASSERT_TRUE(s.ok()) << w << ": " << s.ToString();
      }
      Status more = (*c)->PostWrite(**region, 0, *rr, 0, 64, w, w);
      EXPECT_EQ(more.code(), StatusCode::kResourceExhausted) << more.ToString();
      for (uint32_t k = 0; k < cap; ++k) {
        auto d = poll.Next(Kind::kWriteDone);
        ASSERT_TRUE(d.ok());
        ASSERT_EQ(d->wr_id, k);
      }
      ASSERT_TRUE(poll.Retry([&] { return (*c)->PostWrite(**region, 0, *rr, 0, 64, w, w); }).ok());
      EXPECT_TRUE(poll.Next(Kind::kMessage).ok());
    }
  });
}

// A child that _exit()s in the middle of a stream of writes: the parent
// drains what was published, then gets kUnavailable naming the rank, within
// a second, and keeps getting it.
TEST(ShmBackendTest, PeerDeathIsUnavailableNamingTheRank) {
  const std::string job = NewJobId();
  TempDir dir;
  std::fflush(stdout);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    alarm(30);
    auto store = StoreAt(dir.path());
    auto b = OpenOrDie(1, 2, job);
    if (!store || !b) _exit(2);
    auto src = b->Allocate(1 << 16);
    auto c = ConnectThroughStore(*b, *store, "t", 1, 0, 0, kTimeout);
    if (!src.ok() || !c.ok()) _exit(3);
    auto rr = (*c)->ImportRegion(*store->Get("r", kTimeout));
    if (!rr.ok()) _exit(4);
    // A peer that dies before the parent connects is another case
    // (Connect's kUnavailable); here it dies mid-stream.
    if (!store->Get("connected", kTimeout).ok()) _exit(6);
    Poller poll(*b, **c);
    for (uint32_t i = 0; i < 100; ++i) {
      if (!poll.Retry([&] { return (*c)->PostWrite(**src, 0, *rr, 0, 1 << 16, i, i); }).ok()) _exit(5);
    }
    _exit(0);  // no destructors: the connection is never closed cleanly
  }
  ChildGuard guard(child);
  {
    auto store = StoreAt(dir.path());
    auto b = OpenOrDie(0, 2, job);
    ASSERT_TRUE(store && b);
    auto region = b->Allocate(1 << 16);
    ASSERT_TRUE(region.ok());
    ASSERT_TRUE(store->Set("r", (*region)->Describe()).ok());
    auto c = ConnectThroughStore(*b, *store, "t", 0, 1, 0, kTimeout);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_TRUE(store->Set("connected", "1").ok());
    Completion buf[8];
    size_t received = 0;
    Status error;
    auto last = Clock::now();
    const auto deadline = Clock::now() + kTimeout;
    while (Clock::now() < deadline) {
      auto n = (*c)->Progress(buf, received < 10 ? 1 : 8);  // slow at first: die mid-stream
      if (!n.ok()) {
        error = n.status();
        break;
      }
      if (*n > 0) {
        last = Clock::now();
        received += *n;
      } else {
        b->WaitForActivity(milliseconds(5));
      }
    }
    const auto noticed = Clock::now() - last;
    EXPECT_EQ(error.code(), StatusCode::kUnavailable) << error.ToString();
    EXPECT_NE(error.message().find("rank 1"), std::string::npos) << error.message();
    EXPECT_NE(error.message().find("died"), std::string::npos) << error.message();
    EXPECT_LT(noticed, milliseconds(1000));
    EXPECT_EQ(received, 100u) << "writes published before the death are delivered first";
    auto again = (*c)->Progress(buf, 8);
    EXPECT_EQ(again.status(), error) << "sticky";
    EXPECT_EQ((*c)->PostMessage("x", 1), error);
    EXPECT_EQ((*c)->PostWrite(**region, 0, RemoteRegion{}, 0, 0, 0, 0), error);
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  guard.release();
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_EQ(CountDevShm("ciuic"), 0);
  EXPECT_EQ(CountSelfReferences("ciuic-" + job), 0) << "segments left mapped or open";
}

// A peer that destroys its connection: what it posted is delivered, then
// kUnavailable "closed" (while its process still lives).
TEST(ShmBackendTest, CleanCloseDrainsThenUnavailable) {
  const std::string job = NewJobId();
  TempDir dir;
  RunRanks(2, [&](int rank) {
    auto store = StoreAt(dir.path());
    auto b = OpenOrDie(rank, 2, job);
    ASSERT_TRUE(store && b);
    auto c = ConnectThroughStore(*b, *store, "t", rank, 1 - rank, 0, kTimeout);
    ASSERT_TRUE(c.ok());
    if (rank == 1) {
      for (uint32_t i = 0; i < 10; ++i) ASSERT_TRUE((*c)->PostMessage(&i, 4).ok());
      c->reset();
      // Stay alive: the peer must report "closed", not "died".
      ASSERT_TRUE(store->Get("seen", kTimeout).ok());
    } else {
      Poller poll(*b, **c);
      for (uint32_t i = 0; i < 10; ++i) {
        auto m = poll.NextRemote();
        ASSERT_TRUE(m.ok()) << i << ": " << m.status().ToString();
        uint32_t v;
        std::memcpy(&v, m->data, 4);
        EXPECT_EQ(v, i);
      }
      auto end = poll.NextRemote(milliseconds(5000));
      EXPECT_EQ(end.status().code(), StatusCode::kUnavailable) << end.status().ToString();
      EXPECT_NE(end.status().message().find("peer rank 1 closed the connection"), std::string::npos)
          << end.status().message();
      EXPECT_EQ((*c)->PostMessage("x", 1).code(), StatusCode::kUnavailable);
      // Reported: the closed connection no longer counts as activity, so a
      // waiting progress loop sleeps instead of spinning.
      const auto t0 = Clock::now();
      b->WaitForActivity(milliseconds(20));
      EXPECT_GE(Clock::now() - t0, milliseconds(20));
      ASSERT_TRUE(store->Set("seen", "1").ok());
    }
  });
}

// WaitForActivity sleeps on the doorbell: a post wakes it within a few ms;
// with nothing posted it returns after `max`.
TEST(ShmBackendTest, WaitForActivityWakesOnPostAndTimesOut) {
  const std::string job = NewJobId();
  TempDir dir;
  RunRanks(2, [&](int rank) {
    auto store = StoreAt(dir.path());
    auto b = OpenOrDie(rank, 2, job);
    ASSERT_TRUE(store && b);
    auto c = ConnectThroughStore(*b, *store, "t", rank, 1 - rank, 0, kTimeout);
    ASSERT_TRUE(c.ok());
    Poller poll(*b, **c);
    constexpr int kRounds = 5;
    if (rank == 1) {
      const auto t0 = Clock::now();
      b->WaitForActivity(milliseconds(30));
      const auto took = Clock::now() - t0;
      EXPECT_GE(took, milliseconds(30));
      EXPECT_LT(took, milliseconds(300));
      std::vector<double> wake_ms;
      for (int r = 0; r < kRounds; ++r) {
        ASSERT_TRUE((*c)->PostMessage("ready", 5).ok());
        // The peer waits 30 ms: this side is asleep on the futex by then.
        const auto start = Clock::now();
        int64_t posted = 0;
        for (;;) {
          Completion m;
          auto n = (*c)->Progress(&m, 1);
          ASSERT_TRUE(n.ok());
          if (*n == 1) {
            std::memcpy(&posted, m.data, sizeof(posted));
            break;
          }
          ASSERT_LT(Clock::now() - start, milliseconds(5000));
          b->WaitForActivity(milliseconds(5000));
        }
        wake_ms.push_back((MonoNs() - posted) / 1e6);
      }
      std::sort(wake_ms.begin(), wake_ms.end());
      std::printf("[ shm      ] WaitForActivity wake-up after a post: median %.3f ms, max %.3f ms\n",
                  wake_ms[kRounds / 2], wake_ms.back());
      EXPECT_LT(wake_ms[kRounds / 2], 5.0);
      EXPECT_LT(wake_ms.back(), 50.0);
      ASSERT_TRUE(store->Set("read", "1").ok());
    } else {
      for (int r = 0; r < kRounds; ++r) {
        auto m = poll.NextRemote();
        ASSERT_TRUE(m.ok()) << m.status().ToString();
        std::this_thread::sleep_for(milliseconds(30));
        const int64_t now = MonoNs();
        ASSERT_TRUE((*c)->PostMessage(&now, sizeof(now)).ok());
      }
      // Keep the connection open until the peer has read the last one.
      ASSERT_TRUE(store->Wait({"read"}, kTimeout).ok());
    }
  });
}

// Four ranks on two cores pass a token around a ring, waiting with
// Progress + WaitForActivity: oversubscribed ranks must still progress fast.
TEST(ShmBackendTest, OversubscribedTokenRingProgresses) {
  constexpr int kRanks = 4;
  constexpr int kLaps = 500;
  const std::string job = NewJobId();
  TempDir dir;
  RunRanks(kRanks, [&](int rank) {
    auto store = StoreAt(dir.path());
    auto b = OpenOrDie(rank, kRanks, job);
    ASSERT_TRUE(store && b);
    const int next = (rank + 1) % kRanks, prev = (rank + kRanks - 1) % kRanks;
    // Connect in an order that cannot deadlock: the lower rank first.
    std::unique_ptr<Connection> to_next, from_prev;
    for (int p : {std::min(next, prev), std::max(next, prev)}) {
      auto c = ConnectThroughStore(*b, *store, "t", rank, p, 0, kTimeout);
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      (p == next ? to_next : from_prev) = std::move(*c);
    }
    ASSERT_TRUE(store->Add("ready", 1).ok());
    while (*store->Add("ready", 0) < kRanks) std::this_thread::sleep_for(milliseconds(1));
    const auto t0 = Clock::now();
    Poller poll(*b, *from_prev);
    for (int lap = 0; lap < kLaps; ++lap) {
      uint32_t token = 0;
      if (rank != 0) {
        auto m = poll.Next(Kind::kMessage);
        ASSERT_TRUE(m.ok()) << m.status().ToString();
        std::memcpy(&token, m->data, 4);
        ASSERT_EQ(token, static_cast<uint32_t>(lap * kRanks + rank));
      }
      ++token;
      if (rank == 0) token = lap * kRanks + 1;
      ASSERT_TRUE(to_next->PostMessage(&token, 4).ok());
      if (rank == 0) {
        auto m = poll.Next(Kind::kMessage);
        ASSERT_TRUE(m.ok()) << m.status().ToString();
        std::memcpy(&token, m->data, 4);
        ASSERT_EQ(token, static_cast<uint32_t>((lap + 1) * kRanks));
      }
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    if (rank == 0) {
      std::printf("[ shm      ] %d ranks, %d hops: %.1f us per hop\n", kRanks, kLaps * kRanks,
                  secs * 1e6 / (kLaps * kRanks));
    }
    EXPECT_LT(secs, 10.0);
    ASSERT_TRUE(store->Add("finished", 1).ok());
    while (*store->Add("finished", 0) < kRanks) std::this_thread::sleep_for(milliseconds(1));
  });
}

// Small-message one-way latency (ping-pong / 2) and large-write bandwidth
// against memcpy, printed for the record (asserted only loosely: the
// machine is shared).
TEST(ShmBackendTest, ReportsLatencyAndBandwidth) {
  constexpr int kPingPongs = 20000;
  constexpr size_t kBytes = 4u << 20;
  constexpr int kWrites = 32;
  const std::string job = NewJobId();
  TempDir dir;
  RunRanks(2, [&](int rank) {
    auto store = StoreAt(dir.path());
    auto b = OpenOrDie(rank, 2, job);
    ASSERT_TRUE(store && b);
    auto region = b->Allocate(kBytes);
    ASSERT_TRUE(region.ok());
    ASSERT_TRUE(store->Set("r" + std::to_string(rank), (*region)->Describe()).ok());
    auto c = ConnectThroughStore(*b, *store, "t", rank, 1 - rank, 0, kTimeout);
    ASSERT_TRUE(c.ok());
    auto rr = (*c)->ImportRegion(*store->Get("r" + std::to_string(1 - rank), kTimeout));
    ASSERT_TRUE(rr.ok());
    Completion buf[16];
    // Ping-pong: spin on Progress briefly, then WaitForActivity.
    auto await_message = [&]() -> bool {
      for (int spins = 0;; ++spins) {
        auto n = (*c)->Progress(buf, 1);
        if (!n.ok()) return false;
        if (*n == 1 && buf[0].kind == Kind::kMessage) return true;
        if (*n == 0 && spins > 2000) b->WaitForActivity(milliseconds(1));
      }
    };
    const uint64_t ping = 42;
    const auto t0 = Clock::now();
    for (int i = 0; i < kPingPongs; ++i) {
      if (rank == 0) {
        ASSERT_TRUE((*c)->PostMessage(&ping, 8).ok());
        ASSERT_TRUE(await_message());
      } else {
        ASSERT_TRUE(await_message());
        ASSERT_TRUE((*c)->PostMessage(&ping, 8).ok());
      }
    }
    const double lat_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() /
                          kPingPongs / 2;
    if (rank == 0) {
      // Bandwidth: kWrites writes of kBytes into the peer's pool segment.
      auto src = b->Allocate(kBytes);
      ASSERT_TRUE(src.ok());
      std::memset((*src)->data(), 1, kBytes);
      Poller poll(*b, **c);
      const auto t1 = Clock::now();
      for (int i = 0; i < kWrites; ++i) {
        ASSERT_TRUE(poll.Retry([&] { return (*c)->PostWrite(**src, 0, *rr, 0, kBytes, i, i); }).ok());
      }
      const double shm_s = std::chrono::duration<double>(Clock::now() - t1).count();
      std::vector<char> a(kBytes, 1), d(kBytes, 0);
      const auto t2 = Clock::now();
      for (int i = 0; i < kWrites; ++i) {
        std::memcpy(d.data(), a.data(), kBytes);
        asm volatile("" : : "r"(d.data()) : "memory");
      }
      const double cpy_s = std::chrono::duration<double>(Clock::now() - t2).count();
      const double shm_gbs = kBytes * kWrites / shm_s / 1e9, cpy_gbs = kBytes * kWrites / cpy_s / 1e9;
      std::printf("[ shm      ] 8-byte message one-way latency %.3f us; %zu-byte writes %.2f GB/s, "
                  "memcpy %.2f GB/s (%.2fx)\n",
                  lat_us, kBytes, shm_gbs, cpy_gbs, shm_gbs / cpy_gbs);
      EXPECT_LT(lat_us, 1000.0);
      ASSERT_TRUE((*c)->PostMessage("end", 3).ok());
      EXPECT_TRUE(poll.Next(Kind::kMessage).ok());
    } else {
      Poller poll(*b, **c);
      for (int i = 0; i < kWrites; ++i) ASSERT_TRUE(poll.Next(Kind::kWriteReceived).ok());
      ASSERT_TRUE(poll.Next(Kind::kMessage).ok());
      ASSERT_TRUE((*c)->PostMessage("end", 3).ok());
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
}

// ---------------------------------------------------------------------------
// In one process.

TEST(ShmBackendTest, BadArgumentsAreInvalidAndNotSticky) {
  const std::string job = NewJobId();
  LocalPair p = MakeLocalPair(job);
  ASSERT_TRUE(p.c0 && p.c1);
  BackendOptions bad;
  bad.rank = 2;
  bad.world_size = 2;
  EXPECT_EQ(OpenShmBackend(bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.b0->CreateEndpoint(-1, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.b0->CreateEndpoint(2, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.b0->Allocate(0).status().code(), StatusCode::kInvalidArgument);
  char scratch[64];
  EXPECT_EQ(p.b0->Register(nullptr, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.b0->Register(scratch, 0).status().code(), StatusCode::kInvalidArgument);

  auto src = p.b0->Allocate(100);
  auto dst = p.b1->Allocate(200);
  ASSERT_TRUE(src.ok() && dst.ok());
  EXPECT_EQ((*src)->size(), 100u);
  auto rr = p.c0->ImportRegion((*dst)->Describe());
  ASSERT_TRUE(rr.ok()) << rr.status().ToString();
  auto& c = *p.c0;
  auto code = [](const Status& s) { return s.code(); };
  EXPECT_EQ(code(c.PostWrite(**src, 101, *rr, 0, 0, 0, 0)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.PostWrite(**src, 50, *rr, 0, 51, 0, 0)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.PostWrite(**src, 1, *rr, 0, SIZE_MAX, 0, 0)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.PostWrite(**src, 0, *rr, 201, 0, 0, 0)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.PostWrite(**src, 0, *rr, 150, 51, 0, 0)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.PostWrite(**src, 0, *rr, SIZE_MAX, 2, 0, 0)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.PostWrite(**src, 0, RemoteRegion{7, 200}, 0, 1, 0, 0)),
            StatusCode::kInvalidArgument);
  // RemoteRegion::size is not trusted: the imported size is.
  EXPECT_EQ(code(c.PostWrite(**src, 0, RemoteRegion{rr->id, 1u << 30}, 199, 2, 0, 0)),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.PostMessage(scratch, kMaxMessageBytes + 1)), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(c.PostMessage(nullptr, 1)), StatusCode::kInvalidArgument);
  Completion out[4];
  EXPECT_EQ(*c.Progress(out, 0), 0u);
  // Edge ranges that are fine, and the connection still works.
  ASSERT_TRUE(c.PostWrite(**src, 100, *rr, 200, 0, 1, 11).ok());
  ASSERT_TRUE(c.PostWrite(**src, 0, *rr, 100, 100, 2, 12).ok());
  ASSERT_TRUE(c.PostMessage(scratch, kMaxMessageBytes).ok());
  ASSERT_TRUE(c.PostMessage(nullptr, 0).ok());
  Poller p0(*p.b0, *p.c0), p1(*p.b1, *p.c1);
  EXPECT_EQ(p0.Next(Kind::kWriteDone)->wr_id, 11u);
  EXPECT_EQ(p0.Next(Kind::kWriteDone)->wr_id, 12u);
  auto w1 = p1.NextRemote();
  auto w2 = p1.NextRemote();
  auto m1 = p1.NextRemote();
  auto m2 = p1.NextRemote();
  ASSERT_TRUE(w1.ok() && w2.ok() && m1.ok() && m2.ok());
  EXPECT_EQ(w1->imm, 1u);
  EXPECT_EQ(w1->len, 0u);
  EXPECT_EQ(w2->len, 100u);
  EXPECT_EQ(m1->len, kMaxMessageBytes);
  EXPECT_EQ(m2->kind, Kind::kMessage);
  EXPECT_EQ(m2->len, 0u);
}

TEST(ShmBackendTest, ForeignOrMalformedBlobsAreInvalidArgument) {
  const std::string job = NewJobId();
  auto b0 = OpenOrDie(0, 2, job);
  auto b1 = OpenOrDie(1, 2, job);
  auto other = OpenOrDie(1, 2, job + "-other");
  ASSERT_TRUE(b0 && b1 && other);
  auto e0 = b0->CreateEndpoint(1, 5);
  auto e1 = b1->CreateEndpoint(0, 5);
  auto e1_tag = b1->CreateEndpoint(0, 6);
  auto e1_other = other->CreateEndpoint(0, 5);
  auto e0_self = b0->CreateEndpoint(0, 5);
  ASSERT_TRUE(e0.ok() && e1.ok() && e1_tag.ok() && e1_other.ok() && e0_self.ok());
  const auto deadline = Clock::now() + kTimeout;
  auto expect_invalid = [&](const std::string& blob, const std::string& what) {
    auto c = (*e0)->Connect(blob, deadline);
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument) << what << ": " << c.status().ToString();
  };
  auto foreign = (*e0)->Connect((*e1_other)->Describe(), deadline);
  EXPECT_EQ(foreign.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(foreign.status().message().find(job + "-other"), std::string::npos)
      << foreign.status().message();
  expect_invalid((*e1_tag)->Describe(), "other tag");
  expect_invalid((*e0_self)->Describe(), "another rank's endpoint");
  expect_invalid("", "empty");
  expect_invalid("garbage that is long enough to look like something", "garbage");
  const std::string good = (*e1)->Describe();
  for (size_t n = 0; n < good.size(); ++n) expect_invalid(good.substr(0, n), "truncated");
  expect_invalid(good + "x", "trailing byte");
  std::string bad_version = good;
  bad_version[4] = 9;
  expect_invalid(bad_version, "version");

  auto region = b1->Allocate(4096);
  ASSERT_TRUE(region.ok());
  expect_invalid((*region)->Describe(), "a region blob");

  // The valid blob still connects after all that.
  auto c0 = (*e0)->Connect(good, deadline);
  ASSERT_TRUE(c0.ok()) << c0.status().ToString();
  EXPECT_EQ((*e0)->Connect(good, deadline).status().code(), StatusCode::kFailedPrecondition);

  // Region blobs.
  auto import_code = [&](const std::string& blob) { return (*c0)->ImportRegion(blob).status().code(); };
  EXPECT_EQ(import_code(""), StatusCode::kInvalidArgument);
  EXPECT_EQ(import_code(good), StatusCode::kInvalidArgument) << "an endpoint blob";
  const std::string rblob = (*region)->Describe();
  for (size_t n = 0; n < rblob.size(); ++n) {
    EXPECT_EQ(import_code(rblob.substr(0, n)), StatusCode::kInvalidArgument) << n;
  }
  auto foreign_region = other->Allocate(4096);
  ASSERT_TRUE(foreign_region.ok());
  EXPECT_EQ(import_code((*foreign_region)->Describe()), StatusCode::kInvalidArgument);
  auto own_region = b0->Allocate(4096);
  ASSERT_TRUE(own_region.ok());
  EXPECT_EQ(import_code((*own_region)->Describe()), StatusCode::kInvalidArgument)
      << "rank 0's region into the connection to rank 1";
  // White-box: fields after "CISH" v t len job | rank pid size mode | fd bytes inode seg_id.
  const size_t seg_at = 8 + job.size() + 4 + 4 + 8 + 1;
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  ASSERT_GE(null_fd, 0);
  std::string wrong_fd = rblob;
  for (int i = 0; i < 4; ++i) wrong_fd[seg_at + i] = static_cast<char>(null_fd >> (24 - 8 * i));
  EXPECT_EQ(import_code(wrong_fd), StatusCode::kInvalidArgument) << "an fd that is not the segment";
  close(null_fd);
  std::string wrong_id = rblob;
  wrong_id[seg_at + 4 + 8 + 8 + 7] ^= 1;
  EXPECT_EQ(import_code(wrong_id), StatusCode::kInvalidArgument);
  std::string too_big = rblob;
  too_big[seg_at - 2] = 0x20;  // size > segment
  EXPECT_EQ(import_code(too_big), StatusCode::kInvalidArgument);
  auto ok = (*c0)->ImportRegion(rblob);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
}

// This process's memory on explicit (hugetlb) huge pages, in KiB.
int HugetlbKib() {
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  long kib = 0, v = 0;
  while (in >> key) {
    if (key == "Shared_Hugetlb:" || key == "Private_Hugetlb:") {
      in >> v;
      kib += v;
    }
  }
  return static_cast<int>(kib);
}

// Two backends of one process, each with a pool segment of `bytes`: rank 0
// writes a pattern into rank 1's through the connection. Returns "" when
// the pattern arrived, else what went wrong; *where gets both Describes.
std::string WriteThroughPools(size_t bytes, std::string* where, int* huge_kib = nullptr) {
  LocalPair p = MakeLocalPair(NewJobId());
  if (!p.c0 || !p.c1) return "no connection";
  auto src = p.b0->Allocate(bytes);
  auto dst = p.b1->Allocate(bytes);
  if (!src.ok()) return src.status().ToString();
  if (!dst.ok()) return dst.status().ToString();
  auto rr = p.c0->ImportRegion((*dst)->Describe());
  if (!rr.ok()) return rr.status().ToString();
  FillPattern(static_cast<uint8_t*>((*src)->data()), bytes, 0, kSeed);
  Status s = p.c0->PostWrite(**src, 0, *rr, 0, bytes, 9, 10);
  if (!s.ok()) return s.ToString();
  Poller p0(*p.b0, *p.c0), p1(*p.b1, *p.c1);
  auto done = p0.Next(Kind::kWriteDone);
  auto got = p1.Next(Kind::kWriteReceived);
  if (!done.ok() || !got.ok()) return "no completion";
  const size_t good = CheckPattern(static_cast<uint8_t*>((*dst)->data()), bytes, 0, kSeed);
  if (good != bytes) return "pattern wrong from byte " + std::to_string(good);
  *where = p.b1->Describe() + " / " + p.b0->Describe();
  if (huge_kib != nullptr) *huge_kib = HugetlbKib();
  return "";
}

// Segments are memfds, not files in /dev/shm: a full /dev/shm (a small
// tmpfs, as containers have) does not stop the transport. In a child with
// its own mount namespace, /dev/shm is a 64 KiB tmpfs filled to ENOSPC.
TEST(ShmBackendTest, AFullDevShmDoesNotMatter) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(pipefd[0]);
    auto say = [&](const std::string& m, int code) {
      (void)!write(pipefd[1], m.data(), m.size());
      _exit(code);
    };
    if (unshare(CLONE_NEWNS) != 0) say(std::string("unshare(CLONE_NEWNS): ") + strerror(errno), 77);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64k") != 0) {
      say(std::string("mounting a small tmpfs on /dev/shm: ") + strerror(errno), 77);
    }
    const int fd = open("/dev/shm/filler", O_CREAT | O_WRONLY, 0600);
    if (fd < 0) say("cannot create /dev/shm/filler", 1);
    char block[4096] = {};
    while (write(fd, block, sizeof block) > 0) {
    }
    if (errno != ENOSPC) say(std::string("filling /dev/shm: ") + strerror(errno), 1);
    std::string where;
    const std::string why = WriteThroughPools(8 << 20, &where);
    say(why.empty() ? where : why, why.empty() ? 0 : 1);
  }
  close(pipefd[1]);
  std::string said;
  char buf[512];
  ssize_t n;
  while ((n = read(pipefd[0], buf, sizeof buf)) > 0) said.append(buf, static_cast<size_t>(n));
  close(pipefd[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << said;
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "needs a private mount namespace (root): " << said;
  EXPECT_EQ(WEXITSTATUS(status), 0) << said;
}

int ReadProcInt(const char* path) {
  std::ifstream in(path);
  int v = -1;
  in >> v;
  return v;
}
bool WriteProcInt(const char* path, int v) {
  std::ofstream out(path);
  out << v << "\n";
  out.flush();
  return static_cast<bool>(out);
}

// Pool segments of 2 MiB and more try explicit huge pages first. With none
// reserved, too few, or enough, a pool works and carries data; with enough,
// it is on huge pages. Needs /proc/sys/vm/nr_hugepages writable (root) for
// the last two; the system's value is put back. CTest runs it alone.
TEST(ShmHugePages, PoolsWithNoneTooFewOrEnough) {
  const char* knob = "/proc/sys/vm/nr_hugepages";
  const int before = ReadProcInt(knob);
  std::string where;
  if (before != 0 || access(knob, W_OK) != 0) {
    EXPECT_EQ(WriteThroughPools(4 << 20, &where), "") << "with the system's " << before << " huge pages";
    GTEST_SKIP() << knob << " is " << before << (access(knob, W_OK) != 0 ? ", read-only" : ", not 0")
                 << ": only the system's setting was tried";
  }
  struct Restore {
    const char* knob;
    int value;
    ~Restore() { WriteProcInt(knob, value); }
  } restore{knob, before};
  // 4 MiB pools are two 2 MiB pages each; 1 page is too few for either.
  for (int pages : {0, 1, 8}) {
    ASSERT_TRUE(WriteProcInt(knob, pages));
    const int got = ReadProcInt(knob);
    int hugetlb_kib = -1;
    const std::string why = WriteThroughPools(4 << 20, &where, &hugetlb_kib);
    EXPECT_EQ(why, "") << pages << " huge pages reserved";
    // ("N on huge pages" counts transparent huge pages too, which
    // MADV_COLLAPSE gives without any reserved.)
    if (pages < 2) {
      EXPECT_EQ(hugetlb_kib, 0) << "a 4 MiB pool on " << pages << " reserved huge pages";
    }
    if (pages == 8 && got == 8) {
      // Both pools, and rank 0's mapping of rank 1's: 3 x 4 MiB.
      EXPECT_EQ(hugetlb_kib, 12288) << "both pools on the reserved huge pages";
    }
    std::printf("[ info ] %d huge pages reserved (%d granted), %d KiB of this process on them: %s\n", pages,
                got, hugetlb_kib, where.c_str());
  }
}

// The descriptions as pure functions (shm_wire.h): what a peer publishes
// decodes to what was encoded, and every malformed or foreign blob is
// refused with a reason, before any segment is touched.
shm::EndpointDesc SampleEndpoint() {
  shm::EndpointDesc d;
  d.rank = 3;
  d.peer = 1;
  d.tag = 77;
  d.pid = 4242;
  d.doorbell = {5, 4096, 11, 0x1111222233334444ull};
  d.ring = {6, sizeof(shm::RingShared), 12, 0x5555666677778888ull};
  d.ring_entries = shm::kRingEntries;
  d.entry_bytes = shm::kEntryBytes;
  return d;
}

TEST(ShmWire, EndpointRoundTripsAndRefusesWhatIsWrong) {
  const shm::EndpointDesc d = SampleEndpoint();
  const std::string blob = shm::EncodeEndpoint("job-a", d);
  auto back = shm::DecodeEndpoint(blob, "job-a");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->peer, 1);
  EXPECT_EQ(back->tag, 77u);
  EXPECT_EQ(back->pid, 4242u);
  EXPECT_EQ(back->ring.seg_id, d.ring.seg_id);
  EXPECT_EQ(back->doorbell.inode, 11u);
  EXPECT_EQ(shm::EncodeEndpoint("job-a", *back), blob);

  auto why = [](const StatusOr<shm::EndpointDesc>& r) {
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    return r.status().message();
  };
  for (size_t n = 0; n < blob.size(); ++n) {
    EXPECT_FALSE(shm::DecodeEndpoint(blob.substr(0, n), "job-a").ok()) << "cut at " << n;
  }
  EXPECT_NE(why(shm::DecodeEndpoint(blob + "x", "job-a")).find("malformed"), std::string::npos);
  std::string v = blob;
  v[4] = 2;
  EXPECT_NE(why(shm::DecodeEndpoint(v, "job-a")).find("version 2"), std::string::npos);
  shm::RegionDesc r;
  r.rank = 3;
  r.pid = 4242;
  EXPECT_NE(why(shm::DecodeEndpoint(shm::EncodeRegion("job-a", r), "job-a")).find("memory region"),
            std::string::npos);
  // Another job's blob names that job, escaped (its bytes come from outside).
  const std::string stranger = why(shm::DecodeEndpoint(shm::EncodeEndpoint("evil\njob", d), "job-a"));
  EXPECT_NE(stranger.find("'evil\\x0ajob'"), std::string::npos) << stranger;
  EXPECT_EQ(stranger.find('\n'), std::string::npos) << stranger;

  shm::EndpointDesc bad = d;
  bad.ring_entries = 512;
  EXPECT_NE(why(shm::DecodeEndpoint(shm::EncodeEndpoint("job-a", bad), "job-a")).find("incompatible layout"),
            std::string::npos);
  bad = d;
  bad.ring.bytes = 64;
  EXPECT_FALSE(shm::DecodeEndpoint(shm::EncodeEndpoint("job-a", bad), "job-a").ok()) << "ring too small";
  bad = d;
  bad.doorbell.bytes = 1;
  EXPECT_FALSE(shm::DecodeEndpoint(shm::EncodeEndpoint("job-a", bad), "job-a").ok()) << "doorbell too small";
  for (uint32_t pid : {0u, 0x80000000u, 0xffffffffu}) {
    bad = d;
    bad.pid = pid;
    EXPECT_NE(why(shm::DecodeEndpoint(shm::EncodeEndpoint("job-a", bad), "job-a")).find("pid"), std::string::npos)
        << pid;
  }
  bad = d;
  bad.rank = -1;
  EXPECT_FALSE(shm::DecodeEndpoint(shm::EncodeEndpoint("job-a", bad), "job-a").ok()) << "negative rank";
}

TEST(ShmWire, RegionRoundTripsAndStaysInsideItsSegment) {
  shm::RegionDesc seg;
  seg.rank = 2;
  seg.pid = 99;
  seg.size = 1000;
  seg.mode = shm::RegionMode::kSegment;
  seg.segment = {7, 4096, 13, 0xabcdef};
  seg.offset = 3096;
  const std::string blob = shm::EncodeRegion("j", seg);
  auto back = shm::DecodeRegion(blob, "j");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->mode, shm::RegionMode::kSegment);
  EXPECT_EQ(back->offset, 3096u);
  EXPECT_EQ(back->segment.seg_id, 0xabcdefu);
  EXPECT_EQ(shm::EncodeRegion("j", *back), blob);
  for (size_t n = 0; n < blob.size(); ++n) EXPECT_FALSE(shm::DecodeRegion(blob.substr(0, n), "j").ok()) << n;
  EXPECT_FALSE(shm::DecodeRegion(blob + "x", "j").ok());
  EXPECT_FALSE(shm::DecodeRegion(blob, "k").ok()) << "another job";
  EXPECT_FALSE(shm::DecodeRegion(shm::EncodeEndpoint("j", SampleEndpoint()), "j").ok()) << "an endpoint";

  shm::RegionDesc bad = seg;
  bad.offset = 3097;  // one byte past the segment's end
  EXPECT_NE(shm::DecodeRegion(shm::EncodeRegion("j", bad), "j").status().message().find("exceeds its segment"),
            std::string::npos);
  bad.offset = ~0ull;  // offset + size would wrap
  EXPECT_FALSE(shm::DecodeRegion(shm::EncodeRegion("j", bad), "j").ok());
  bad = seg;
  bad.pid = 0;
  EXPECT_FALSE(shm::DecodeRegion(shm::EncodeRegion("j", bad), "j").ok());
  std::string mode = blob;
  mode[8 + 1 + 4 + 4 + 8] = 3;  // "CISH" v t len(2) job(1) | rank pid size | mode
  EXPECT_FALSE(shm::DecodeRegion(mode, "j").ok()) << "unknown mode";

  shm::RegionDesc caller;
  caller.rank = 2;
  caller.pid = 99;
  caller.size = 4096;
  caller.mode = shm::RegionMode::kCaller;
  caller.address = 0x7f0000001000ull;
  const std::string cblob = shm::EncodeRegion("j", caller);
  auto cback = shm::DecodeRegion(cblob, "j");
  ASSERT_TRUE(cback.ok()) << cback.status().ToString();
  EXPECT_EQ(cback->address, caller.address);
  EXPECT_EQ(shm::EncodeRegion("j", *cback), cblob);
  caller.address = ~0ull - 10;
  EXPECT_NE(shm::DecodeRegion(shm::EncodeRegion("j", caller), "j").status().message().find("wraps"),
            std::string::npos);
}

// A connection to oneself (peer == rank) works like any other.
TEST(ShmBackendTest, SelfConnection) {
  auto b = OpenOrDie(0, 1, NewJobId());
  ASSERT_TRUE(b);
  auto e = b->CreateEndpoint(0, 0);
  ASSERT_TRUE(e.ok());
  auto conn = (*e)->Connect((*e)->Describe(), Clock::now() + kTimeout);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  auto region = b->Allocate(4096);
  ASSERT_TRUE(region.ok());
  auto rr = (*conn)->ImportRegion((*region)->Describe());
  ASSERT_TRUE(rr.ok());
  auto* p = static_cast<uint8_t*>((*region)->data());
  FillPattern(p, 100, 0, kSeed);
  ASSERT_TRUE((*conn)->PostWrite(**region, 0, *rr, 1000, 100, 3, 4).ok());
  ASSERT_TRUE((*conn)->PostMessage("me", 2).ok());
  Poller poll(*b, **conn);
  EXPECT_EQ(poll.Next(Kind::kWriteReceived)->imm, 3u);
  EXPECT_EQ(poll.Next(Kind::kWriteDone)->wr_id, 4u);
  EXPECT_EQ(poll.Next(Kind::kMessage)->len, 2u);
  EXPECT_EQ(CheckPattern(p + 1000, 100, 0, kSeed), 100u);
}

// Register() of a range inside an Allocate()d region describes the shared
// segment: the peer can address it directly.
TEST(ShmBackendTest, RegisterInsidePoolIsDirect) {
  LocalPair p = MakeLocalPair(NewJobId());
  ASSERT_TRUE(p.c0 && p.c1);
  auto pool = p.b1->Allocate(1 << 16);
  ASSERT_TRUE(pool.ok());
  auto* base = static_cast<char*>((*pool)->data());
  auto sub = p.b1->Register(base + 4096, 8192);
  ASSERT_TRUE(sub.ok());
  std::vector<char> plain(8192);
  auto cma = p.b1->Register(plain.data(), plain.size());
  ASSERT_TRUE(cma.ok());
  auto rs = p.c0->ImportRegion((*sub)->Describe());
  auto rc = p.c0->ImportRegion((*cma)->Describe());
  ASSERT_TRUE(rs.ok() && rc.ok());
  EXPECT_EQ(rs->size, 8192u);
  char* direct = static_cast<char*>(p.c0->PeerMemoryPointer(*rs, 10));
  ASSERT_NE(direct, nullptr);
  direct[0] = 'z';
  EXPECT_EQ(base[4096 + 10], 'z') << "the same memory through both mappings";
  EXPECT_EQ(p.c0->PeerMemoryPointer(*rc, 10), nullptr);
  // The sub-range keeps its segment alive after the pool region is gone.
  pool->reset();
  auto again = p.c0->ImportRegion((*sub)->Describe());
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

// Nothing is left behind: no segment mapped or open after everything is
// destroyed, nothing in /dev/shm.
// Every segment (doorbell, rings, pool memory) is owner-only and sealed.
TEST(ShmBackendTest, SegmentsAreOwnerOnlyAndSealed) {
  const std::string job = NewJobId();
  LocalPair p = MakeLocalPair(job);
  ASSERT_TRUE(p.c0 && p.c1);
  auto r = p.b1->Allocate(1 << 20);
  ASSERT_TRUE(r.ok());
  int seen = 0;
  DIR* d = opendir("/proc/self/fd");
  ASSERT_NE(d, nullptr);
  while (dirent* e = readdir(d)) {
    char target[512];
    const std::string path = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0 || std::string(target, n).find("ciuic-" + job) == std::string::npos) continue;
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 07777, 0600u) << std::string(target, n);
    const int fd = static_cast<int>(std::strtol(e->d_name, nullptr, 10));  // a /proc/self/fd entry
    const int seals = fcntl(fd, F_GET_SEALS);
    EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
        << std::string(target, n);
    ++seen;
  }
  closedir(d);
  EXPECT_GE(seen, 3);  // two doorbells, a ring, the pool segment
}

TEST(ShmBackendTest, NoLeftovers) {
  const std::string job = NewJobId();
  {
    LocalPair p = MakeLocalPair(job);
    ASSERT_TRUE(p.c0 && p.c1);
    auto r = p.b1->Allocate(1 << 20);
    ASSERT_TRUE(r.ok());
    ASSERT_TRUE(p.c0->ImportRegion((*r)->Describe()).ok());
    EXPECT_GT(CountSelfReferences("ciuic-" + job), 0);
    EXPECT_NE(p.b1->Describe().find("segments=3"), std::string::npos) << p.b1->Describe();
  }
  EXPECT_EQ(CountSelfReferences("ciuic-" + job), 0);
  EXPECT_EQ(CountDevShm("ciuic"), 0);
}

}  // namespace
}  // namespace ciuic::transport
