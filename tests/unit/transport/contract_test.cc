// The transport contract: behaviour every backend (shm, tcp, verbs) must
// share, run on each backend available here. Ranks are forked processes that
// meet through a FileStore (tests/util/multiproc.h).
//
// verbs needs an RDMA device: on machines without one these tests skip with
// the reason, unless CIUIC_TEST_REQUIRE_VERBS=1 (the Soft-RoCE guest) makes
// that a failure.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>

#include "transport/transport.h"
#include "tests/util/backend_skip.h"
#include "tests/util/multiproc.h"

namespace ciuic::transport {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::RankResult;
using testing::RunRanks;

constexpr milliseconds kStoreTimeout{20000};

std::string ResultsText(const std::vector<RankResult>& results) {
  std::string s;
  for (const auto& r : results) s += r.Describe() + "\n";
  return s;
}

void ExpectAllOk(const std::vector<RankResult>& results) {
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// Deterministic byte pattern of a write (src -> dst, item k).
uint8_t Pattern(int src, int dst, size_t k, size_t i) {
  return static_cast<uint8_t>((i * 131 + k * 17 + src * 7 + dst * 3 + (i >> 11)) & 0xff);
}

using LinkProgress = std::function<StatusOr<bool>()>;

// Link chunk c from rank `src` to `dst`: `len` bytes of Pattern. The send
// waits (progressing with `progress`) for a free slot, fills and commits it.
Status SendPatternChunk(Backend& be, Link& link, const LinkProgress& progress, int src, int dst, int c, size_t len,
                        Clock::time_point deadline) {
  void* slot = nullptr;
  CIUIC_RETURN_IF_ERROR(WaitFor(be, progress, [&] { return (slot = link.AcquireSend()) != nullptr; }, deadline,
                                "a free slot for chunk " + std::to_string(c)));
  auto* p = static_cast<uint8_t*>(slot);
  for (size_t i = 0; i < len; ++i) p[i] = Pattern(src, dst, c, i);
  return link.CommitSend(len);
}

// Waits for the next chunk and checks that it is chunk c of `len` bytes
// from `src` to `dst` (the caller releases it).
Status ExpectPatternChunk(Backend& be, Link& link, int src, int dst, int c, size_t len, Clock::time_point deadline) {
  size_t got = 0;
  const void* data = nullptr;
  CIUIC_RETURN_IF_ERROR(WaitFor(be, [&]() { return link.Progress(); },
                                [&] { return (data = link.PeekRecv(&got)) != nullptr; }, deadline,
                                "chunk " + std::to_string(c)));
  if (got != len) return DataLossError("chunk " + std::to_string(c) + " has " + std::to_string(got) + " bytes");
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < len; ++i) {
    if (p[i] != Pattern(src, dst, c, i)) return DataLossError("chunk " + std::to_string(c) + " byte " + std::to_string(i));
  }
  return Status::Ok();
}

class ContractTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override { CIUIC_SKIP_UNLESS_BACKEND(GetParam(), Options(0, 1)); }

  static BackendOptions Options(int rank, int n) {
    BackendOptions o;
    o.rank = rank;
    o.world_size = n;
    o.job_id = "contract-" + std::to_string(getpid());
    auto config = Config::FromEnv();
    if (config.ok()) o.config = *config;
    return o;
  }
  // In a child: the job id must be the same in every rank, so it is taken
  // from the parent's pid.
  static BackendOptions ChildOptions(int rank, int n) {
    BackendOptions o = Options(rank, n);
    o.job_id = "contract-" + std::to_string(getppid());
    return o;
  }
  // In a child of a 2-rank test: the backend, a 1 MiB pool and a Link of
  // 4 slots of `slot` bytes to the other rank (in this order, so the link
  // goes first when the struct is destroyed).
  struct PairLink {
    std::unique_ptr<Backend> be;
    std::unique_ptr<BufferPool> pool;
    std::unique_ptr<Link> link;
  };
  static StatusOr<PairLink> OpenPairLink(BackendKind kind, int rank, Store& store, const std::string& name,
                                         uint32_t tag, size_t slot) {
    PairLink p;
    CIUIC_ASSIGN_OR_RETURN(p.be, OpenBackend(kind, ChildOptions(rank, 2)));
    p.pool = std::make_unique<BufferPool>(*p.be, 1u << 20);
    LinkOptions lo;
    lo.slot_size = slot;
    lo.nslots = 4;
    CIUIC_ASSIGN_OR_RETURN(p.link, Link::Create(*p.be, *p.pool, store, name, rank, 1 - rank, tag, lo, kStoreTimeout));
    return p;
  }
};

// Progresses `conn` until `want` completions of `kind` have been collected
// (others are appended too), or the deadline. `also` (may be empty) runs on
// every pass: the caller's other connections must keep moving too, as a
// real program's do (a peer's send to this rank may wait on them).
Status Collect(Backend& be, Connection& conn, std::vector<Completion>* out, Completion::Kind kind,
               size_t want, Clock::time_point deadline,
               const std::function<StatusOr<bool>()>& also = nullptr) {
  size_t have = 0;
  for (const auto& c : *out) have += c.kind == kind;
  return WaitFor(
      be,
      [&]() -> StatusOr<bool> {
        Completion buf[32];
        CIUIC_ASSIGN_OR_RETURN(size_t n, conn.Progress(buf, 32));
        for (size_t i = 0; i < n; ++i) {
          out->push_back(buf[i]);
          have += buf[i].kind == kind;
        }
        bool other = false;
        if (also != nullptr) {
          CIUIC_ASSIGN_OR_RETURN(other, also());
        }
        return n > 0 || other;
      },
      [&] { return have >= want; }, deadline,
      "completions from rank " + std::to_string(conn.peer()));
}

// Every rank connects to every other, each pair writes the sizes in
// `sizes` both ways into Allocate()d regions at unaligned offsets, and the
// receivers verify every byte.
Status AllPairsWrites(BackendKind kind, int rank, int n, Store& store,
                      const std::vector<size_t>& sizes, const BackendOptions& opt) {
  CIUIC_ASSIGN_OR_RETURN(auto be, OpenBackend(kind, opt));
  std::vector<size_t> offsets;
  size_t total = 0;
  for (size_t s : sizes) {
    offsets.push_back(total + 3);  // deliberately unaligned
    total += s + 64;
  }
  CIUIC_ASSIGN_OR_RETURN(auto src, be->Allocate(total));
  std::vector<std::unique_ptr<Connection>> conns(n);
  std::vector<std::unique_ptr<MemoryRegion>> inbox(n);
  std::vector<RemoteRegion> remote(n);
  // Generous: filling and checking 64 MiB takes seconds in the emulated
  // Soft-RoCE guest (and under sanitizers); the test's own limit is 120 s.
  const auto deadline = Clock::now() + milliseconds(90000);
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    CIUIC_ASSIGN_OR_RETURN(conns[p], ConnectThroughStore(*be, store, "c", rank, p, 0, kStoreTimeout));
    CIUIC_ASSIGN_OR_RETURN(inbox[p], be->Allocate(total));
    CIUIC_RETURN_IF_ERROR(store.Set("inbox/" + std::to_string(rank) + "-" + std::to_string(p),
                                    inbox[p]->Describe()));
  }
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    CIUIC_ASSIGN_OR_RETURN(std::string blob,
                           store.Get("inbox/" + std::to_string(p) + "-" + std::to_string(rank), kStoreTimeout));
    CIUIC_ASSIGN_OR_RETURN(remote[p], conns[p]->ImportRegion(blob));
    if (remote[p].size < total) return InternalError("imported region too small");
  }
  // Post all writes to every peer, then collect; the source is filled per
  // peer before that peer's writes.
  std::vector<std::vector<Completion>> got(n);
  int current = -1;  // the peer being collected from; the others are kept moving
  auto others = [&]() -> StatusOr<bool> {
    bool any = false;
    for (int q = 0; q < n; ++q) {
      if (q == rank || q == current) continue;
      Completion buf[32];
      CIUIC_ASSIGN_OR_RETURN(size_t m, conns[q]->Progress(buf, 32));
      got[q].insert(got[q].end(), buf, buf + m);
      any |= m > 0;
    }
    return any;
  };
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    current = p;
    auto* s = static_cast<uint8_t*>(src->data());
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (size_t i = 0; i < sizes[k]; ++i) s[offsets[k] + i] = Pattern(rank, p, k, i);
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (;;) {
        Status st = conns[p]->PostWrite(*src, offsets[k], remote[p], offsets[k], sizes[k],
                                        static_cast<uint32_t>(1000 + k), k);
        if (st.ok()) break;
        if (st.code() != StatusCode::kResourceExhausted) return st;
        CIUIC_RETURN_IF_ERROR(Collect(*be, *conns[p], &got[p], Completion::Kind::kWriteDone, 1, deadline, others));
      }
    }
    // The source is reused for the next peer: wait for local completion.
    CIUIC_RETURN_IF_ERROR(
        Collect(*be, *conns[p], &got[p], Completion::Kind::kWriteDone, sizes.size(), deadline, others));
  }
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    current = p;
    CIUIC_RETURN_IF_ERROR(
        Collect(*be, *conns[p], &got[p], Completion::Kind::kWriteReceived, sizes.size(), deadline, others));
    size_t k = 0, done = 0;
    for (const auto& c : got[p]) {
      if (c.kind == Completion::Kind::kWriteDone) {
        if (c.wr_id != done++) return InternalError("kWriteDone out of order from rank " + std::to_string(p));
        continue;
      }
      if (c.kind != Completion::Kind::kWriteReceived) return InternalError("unexpected completion");
      if (c.imm != 1000 + k) {
        return InternalError("imm " + std::to_string(c.imm) + " where " + std::to_string(1000 + k) +
                             " was expected, from rank " + std::to_string(p));
      }
      ++k;
    }
    const auto* d = static_cast<const uint8_t*>(inbox[p]->data());
    for (size_t kk = 0; kk < sizes.size(); ++kk) {
      for (size_t i = 0; i < sizes[kk]; ++i) {
        if (d[offsets[kk] + i] != Pattern(p, rank, kk, i)) {
          return DataLossError("byte " + std::to_string(i) + " of the " + std::to_string(sizes[kk]) +
                               "-byte write from rank " + std::to_string(p) + " is wrong");
        }
      }
    }
  }
  // Everyone has verified before anyone tears down (a close is not an error
  // for data already delivered, but keep the test about data).
  CIUIC_RETURN_IF_ERROR(store.Add("done", 1).status());
  return WaitFor(
      *be, [&]() -> StatusOr<bool> { return false; },
      [&] {
        auto v = store.Add("done", 0);
        return v.ok() && *v >= n;
      },
      deadline, "the other ranks to finish");
}

TEST_P(ContractTest, TwoRanksAllSizes) {
  const BackendKind kind = GetParam();
  const std::vector<size_t> sizes = {0, 1, 7, 4096, (1u << 20) + 3, 64u << 20};
  auto results = RunRanks(2, [&](int rank, Store& store) {
    return AllPairsWrites(kind, rank, 2, store, sizes, ChildOptions(rank, 2));
  }, milliseconds(120000));
  ExpectAllOk(results);
}

TEST_P(ContractTest, ThreeRanks) {
  const BackendKind kind = GetParam();
  const std::vector<size_t> sizes = {0, 1, 7, 4096, (1u << 20) + 3, 4u << 20};
  auto results = RunRanks(3, [&](int rank, Store& store) {
    return AllPairsWrites(kind, rank, 3, store, sizes, ChildOptions(rank, 3));
  }, milliseconds(120000));
  ExpectAllOk(results);
}

TEST_P(ContractTest, FourRanks) {
  const BackendKind kind = GetParam();
  const std::vector<size_t> sizes = {0, 1, 4096, (1u << 20) + 3};
  auto results = RunRanks(4, [&](int rank, Store& store) {
    return AllPairsWrites(kind, rank, 4, store, sizes, ChildOptions(rank, 4));
  }, milliseconds(120000));
  ExpectAllOk(results);
}

// Three ranks build their links to both neighbours at once, without
// waiting (Link::Builder, as a ring of sends and receives on a new tag
// does): every rank polls the link to its next neighbour first, so a
// handshake that blocked until the peer answered would wait in a cycle.
TEST_P(ContractTest, LinkBuildersInACycleOfRanks) {
  const BackendKind kind = GetParam();
  auto results = RunRanks(3, [&](int rank, Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, OpenBackend(kind, ChildOptions(rank, 3)));
    BufferPool pool(*be, 1u << 20);
    LinkOptions lo;
    lo.slot_size = 4096;
    lo.nslots = 4;
    const int next = (rank + 1) % 3, prev = (rank + 2) % 3;
    const auto deadline = Clock::now() + milliseconds(60000);
    std::unique_ptr<Link::Builder> builders[2];
    std::unique_ptr<Link> links[2];
    for (int i = 0; i < 2; ++i) {
      CIUIC_ASSIGN_OR_RETURN(builders[i], Link::Builder::Start(*be, pool, store, "cycle", rank, i == 0 ? next : prev,
                                                               5, lo, kStoreTimeout));
    }
    // Every endpoint is published before anyone polls: each rank's first
    // poll finds its next neighbour's, so the cycle is there at once.
    CIUIC_RETURN_IF_ERROR(store.Set("started/" + std::to_string(rank), "1"));
    for (int r = 0; r < 3; ++r) CIUIC_RETURN_IF_ERROR(store.Get("started/" + std::to_string(r), kStoreTimeout).status());
    while (links[0] == nullptr || links[1] == nullptr) {
      for (int i = 0; i < 2; ++i) {
        if (links[i] != nullptr) continue;
        CIUIC_ASSIGN_OR_RETURN(links[i], builders[i]->Poll());
      }
      if (Clock::now() > deadline) return DeadlineExceededError("links to both neighbours not built in 60 s");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    Link& to_next = *links[0];
    Link& from_prev = *links[1];
    auto progress = [&]() -> StatusOr<bool> {
      CIUIC_ASSIGN_OR_RETURN(bool a, to_next.Progress());
      CIUIC_ASSIGN_OR_RETURN(bool b, from_prev.Progress());
      return a || b;
    };
    CIUIC_RETURN_IF_ERROR(SendPatternChunk(*be, to_next, progress, rank, next, 0, 1000, deadline));
    size_t got = 0;
    const void* data = nullptr;
    CIUIC_RETURN_IF_ERROR(WaitFor(*be, progress, [&] { return (data = from_prev.PeekRecv(&got)) != nullptr; },
                                  deadline, "the chunk from rank " + std::to_string(prev)));
    if (got != 1000) return DataLossError("the chunk has " + std::to_string(got) + " bytes, not 1000");
    for (size_t i = 0; i < got; ++i) {
      if (static_cast<const uint8_t*>(data)[i] != Pattern(prev, rank, 0, i)) return DataLossError("byte " + std::to_string(i));
    }
    CIUIC_RETURN_IF_ERROR(from_prev.ReleaseRecv());
    CIUIC_RETURN_IF_ERROR(WaitFor(*be, progress, [&] { return to_next.sends_in_flight() == 0; }, deadline, "the send"));
    // Nobody closes before every rank has its chunk.
    CIUIC_RETURN_IF_ERROR(store.Set("got/" + std::to_string(rank), "1"));
    for (int r = 0; r < 3; ++r) CIUIC_RETURN_IF_ERROR(store.Get("got/" + std::to_string(r), kStoreTimeout).status());
    return Status::Ok();
  }, milliseconds(120000));
  ExpectAllOk(results);
}

// Writes and messages posted interleaved arrive in posting order; many are
// posted before any progress (until the connection says it is full).
TEST_P(ContractTest, OrderingAndManyOutstanding) {
  const BackendKind kind = GetParam();
  constexpr int kItems = 2000;
  auto results = RunRanks(2, [&](int rank, Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto be, OpenBackend(kind, ChildOptions(rank, 2)));
    const int peer = 1 - rank;
    CIUIC_ASSIGN_OR_RETURN(auto conn, ConnectThroughStore(*be, store, "o", rank, peer, 7, kStoreTimeout));
    CIUIC_ASSIGN_OR_RETURN(auto mr, be->Allocate(kItems * 8));
    CIUIC_RETURN_IF_ERROR(store.Set("mr" + std::to_string(rank), mr->Describe()));
    CIUIC_ASSIGN_OR_RETURN(std::string blob, store.Get("mr" + std::to_string(peer), kStoreTimeout));
    CIUIC_ASSIGN_OR_RETURN(RemoteRegion rr, conn->ImportRegion(blob));
    const auto deadline = Clock::now() + kStoreTimeout;
    std::vector<Completion> got;
    if (rank == 0) {
      auto* s = static_cast<uint64_t*>(mr->data());
      for (int i = 0; i < kItems; ++i) s[i] = 0xC0FFEE0000ull + i;
      int posted = 0;
      bool saw_full = false;
      while (posted < kItems) {
        Status st;
        if (posted % 3 == 2) {
          const uint32_t v = static_cast<uint32_t>(posted);
          st = conn->PostMessage(&v, sizeof(v));
        } else {
          st = conn->PostWrite(*mr, posted * 8, rr, posted * 8, 8, posted, posted);
        }
        if (st.ok()) {
          ++posted;
          continue;
        }
        if (st.code() != StatusCode::kResourceExhausted) return st;
        saw_full = true;
        Completion buf[64];
        CIUIC_ASSIGN_OR_RETURN(size_t n, conn->Progress(buf, 64));
        got.insert(got.end(), buf, buf + n);
      }
      (void)saw_full;  // a backend may have room for all of them
      const size_t writes = kItems - kItems / 3;
      CIUIC_RETURN_IF_ERROR(Collect(*be, *conn, &got, Completion::Kind::kWriteDone, writes, deadline));
      CIUIC_RETURN_IF_ERROR(Collect(*be, *conn, &got, Completion::Kind::kMessage, 1, deadline));
      return Status::Ok();
    }
    // Receiver: progress slowly (sleep now and then) and check the order.
    const size_t total = kItems;
    size_t seen = 0;
    while (seen < total) {
      if (seen % 500 == 0) std::this_thread::sleep_for(milliseconds(5));
      Completion buf[64];
      CIUIC_ASSIGN_OR_RETURN(size_t n, conn->Progress(buf, 64));
      for (size_t i = 0; i < n; ++i) {
        const Completion& c = buf[i];
        const int idx = static_cast<int>(seen);
        if (idx % 3 == 2) {
          uint32_t v = 0;
          if (c.kind != Completion::Kind::kMessage || c.len != 4) {
            return InternalError("item " + std::to_string(idx) + ": expected a 4-byte message");
          }
          std::memcpy(&v, c.data, 4);
          if (v != static_cast<uint32_t>(idx)) return InternalError("message out of order at " + std::to_string(idx));
        } else {
          if (c.kind != Completion::Kind::kWriteReceived || c.imm != static_cast<uint32_t>(idx)) {
            return InternalError("item " + std::to_string(idx) + ": expected write with imm " + std::to_string(idx));
          }
          const uint64_t v = static_cast<uint64_t*>(mr->data())[idx];
          if (v != 0xC0FFEE0000ull + idx) return DataLossError("payload of write " + std::to_string(idx));
        }
        ++seen;
      }
      if (n == 0) be->WaitForActivity(std::chrono::microseconds(1000));
    }
    const uint32_t bye = 1;
    CIUIC_RETURN_IF_ERROR(conn->PostMessage(&bye, sizeof(bye)));
    // Give the message time to leave before the connection is destroyed.
    std::vector<Completion> rest;
    auto until = Clock::now() + milliseconds(200);
    while (Clock::now() < until) {
      Completion buf[8];
      auto n = conn->Progress(buf, 8);
      if (!n.ok()) break;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return Status::Ok();
  }, milliseconds(120000));
  ExpectAllOk(results);
}

// The Link's credits: a fast sender and a slow receiver through a 4-slot
// ring; every chunk arrives intact and in order, and the sender is held
// back (AcquireSend returns nullptr) instead of overrunning.
TEST_P(ContractTest, LinkFlowControlSlowReceiver) {
  const BackendKind kind = GetParam();
  constexpr int kChunks = 300;
  auto results = RunRanks(2, [&](int rank, Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(PairLink pl, OpenPairLink(kind, rank, store, "l", 3, 4096));
    Backend* be = pl.be.get();
    Link* link = pl.link.get();
    const auto deadline = Clock::now() + milliseconds(60000);
    auto progress = [&]() { return link->Progress(); };
    if (rank == 0) {
      int held_back = 0;
      for (int c = 0; c < kChunks; ++c) {
        if (!link->CanSend()) ++held_back;
        CIUIC_RETURN_IF_ERROR(SendPatternChunk(*be, *link, progress, 0, 1, c, 1 + (c * 37) % 4096, deadline));
      }
      CIUIC_RETURN_IF_ERROR(WaitFor(*be, progress, [&] { return link->sends_in_flight() == 0; }, deadline, "sends"));
      if (held_back == 0) return InternalError("the sender was never held back by a slow receiver");
      CIUIC_RETURN_IF_ERROR(store.Set("sender-done", "1"));
      return store.Get("receiver-done", kStoreTimeout).status();
    }
    for (int c = 0; c < kChunks; ++c) {
      CIUIC_RETURN_IF_ERROR(ExpectPatternChunk(*be, *link, 0, 1, c, 1 + (c * 37) % 4096, deadline));
      if (c % 20 == 0) std::this_thread::sleep_for(milliseconds(3));  // slow receiver
      CIUIC_RETURN_IF_ERROR(link->ReleaseRecv());
    }
    CIUIC_RETURN_IF_ERROR(store.Get("sender-done", kStoreTimeout).status());
    return store.Set("receiver-done", "1");
  }, milliseconds(120000));
  ExpectAllOk(results);
}

// A two-way exchange of small chunks in lockstep (the traffic of a small
// all-reduce): the ring keeps going on credits alone, and where messages
// ride with writes (tcp) every credit goes out beside a chunk, never as a
// message of its own; elsewhere they go in batches of half the chunks a
// link may have unreleased, at most 32 (small chunks take only their bytes
// of the ring, so with 4 slots that is 32 chunks, not 2).
TEST_P(ContractTest, LinkCreditsRideWithChunksInAnExchange) {
  const BackendKind kind = GetParam();
  constexpr int kRounds = 256;
  auto results = RunRanks(2, [&](int rank, Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(PairLink pl, OpenPairLink(kind, rank, store, "x", 4, 4096));
    Backend* be = pl.be.get();
    Link* link = pl.link.get();
    const auto deadline = Clock::now() + milliseconds(60000);
    auto progress = [&]() { return link->Progress(); };
    auto send = [&](int c) { return SendPatternChunk(*be, *link, progress, rank, 1 - rank, c, 8 + c % 56, deadline); };
    auto recv = [&](int c) -> Status {
      CIUIC_RETURN_IF_ERROR(ExpectPatternChunk(*be, *link, 1 - rank, rank, c, 8 + c % 56, deadline));
      return link->ReleaseRecv();
    };
    for (int c = 0; c < kRounds; ++c) {
      if (rank == 0) {
        CIUIC_RETURN_IF_ERROR(send(c));
        CIUIC_RETURN_IF_ERROR(recv(c));
      } else {
        CIUIC_RETURN_IF_ERROR(recv(c));
        CIUIC_RETURN_IF_ERROR(send(c));
      }
    }
    CIUIC_RETURN_IF_ERROR(WaitFor(*be, progress, [&] { return link->sends_in_flight() == 0; }, deadline, "sends"));
    const uint64_t all = link->credit_messages(), alone = link->credit_messages_alone();
    const std::string counts = "rank " + std::to_string(rank) + ": " + std::to_string(all) + " credit messages, " +
                               std::to_string(alone) + " alone";
    const uint64_t batch = std::min<uint64_t>(link->max_chunks() / 2, 32);
    if (link->max_chunks() != 256) {
      return InternalError("a link of 4 slots may have " + std::to_string(link->max_chunks()) +
                           " chunks unreleased, not 256");
    }
    if (kind == BackendKind::kTcp) {
      // Each release is followed by this rank's next chunk, which carries it.
      if (all < kRounds - 1 || alone != 0) {
        return InternalError(counts + " (want >= " + std::to_string(kRounds - 1) + ", 0 alone)");
      }
    } else if (all != alone || all + 1 < kRounds / batch || all > kRounds / batch) {
      return InternalError(counts + " (want " + std::to_string(kRounds / batch - 1) + " or " +
                           std::to_string(kRounds / batch) + ", all alone)");
    }
    // Both are done with the link: wait for the peer without touching it
    // (the peer may already have closed its side).
    CIUIC_RETURN_IF_ERROR(store.Add("done", 1).status());
    return WaitFor(*be, []() -> StatusOr<bool> { return false; },
                   [&] { auto v = store.Add("done", 0); return v.ok() && *v >= 2; }, deadline, "the peer");
  }, milliseconds(120000));
  ExpectAllOk(results);
}

// Small chunks take only their own bytes of the peer's ring: a link of 4
// slots of 8 KiB takes 256 chunks of 8 B before the receiver releases any
// (then no more: a bounded number unreleased). Full-size chunks still take
// a slot each, and no more than 4 slots' worth are under way: after a
// 100 B chunk (which puts the ring off its slot boundaries) 3 full ones go
// and the next waits for a release; the 3 after that (a credit for the
// last chunk may be withheld: the sender is sure of 3 of its 4 slots) go
// around the ring's end. Every byte is checked.
TEST_P(ContractTest, LinkSmallChunksTakeOnlyTheirBytes) {
  const BackendKind kind = GetParam();
  auto results = RunRanks(2, [&](int rank, Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(PairLink pl, OpenPairLink(kind, rank, store, "b", 6, 8192));
    Backend* be = pl.be.get();
    Link* link = pl.link.get();
    const auto deadline = Clock::now() + milliseconds(60000);
    auto progress = [&]() { return link->Progress(); };
    // Chunk lengths in three rounds: 256 small ones; one of 100 B and 3
    // full ones; 3 full ones.
    std::vector<size_t> lens(256, 8);
    lens.push_back(100);
    for (int i = 0; i < 6; ++i) lens.push_back(8192);
    const int ends[3] = {256, 260, 263};
    if (rank == 0) {
      int c = 0;
      for (int round = 0; round < 3; ++round) {
        if (round > 0) {
          CIUIC_RETURN_IF_ERROR(store.Get("released" + std::to_string(round - 1), kStoreTimeout).status());
        }
        for (; c < ends[round]; ++c) {
          // Nothing of this round is released: a wait here (to the short
          // deadline) would mean the chunk does not fit.
          CIUIC_RETURN_IF_ERROR(
              SendPatternChunk(*be, *link, progress, 0, 1, c, lens[c], Clock::now() + milliseconds(5000)));
        }
        for (int i = 0; i < 100; ++i) CIUIC_RETURN_IF_ERROR(link->Progress().status());
        if (round < 2 && (link->CanSend() || link->AcquireSend() != nullptr)) {
          return InternalError("round " + std::to_string(round) + ": chunk " + std::to_string(c) +
                               " was let through with none of its round released");
        }
        CIUIC_RETURN_IF_ERROR(store.Set("sent" + std::to_string(round), "1"));
      }
      CIUIC_RETURN_IF_ERROR(WaitFor(*be, progress, [&] { return link->sends_in_flight() == 0; }, deadline, "sends"));
      return store.Get("released2", kStoreTimeout).status();
    }
    int c = 0;
    for (int round = 0; round < 3; ++round) {
      CIUIC_RETURN_IF_ERROR(store.Get("sent" + std::to_string(round), kStoreTimeout).status());
      for (; c < ends[round]; ++c) {
        CIUIC_RETURN_IF_ERROR(ExpectPatternChunk(*be, *link, 0, 1, c, lens[c], deadline));
        CIUIC_RETURN_IF_ERROR(link->ReleaseRecv());
      }
      // The credits go out now (half the chunks, or half the slots' bytes).
      CIUIC_RETURN_IF_ERROR(link->Progress().status());
      CIUIC_RETURN_IF_ERROR(store.Set("released" + std::to_string(round), "1"));
    }
    return Status::Ok();
  }, milliseconds(120000));
  ExpectAllOk(results);
}

// Beyond 64 unreleased chunks a sender goes on only while less than 1 MiB
// is under way: a link of 4 slots of 512 KiB takes 64 chunks of 16 KiB
// (1 MiB) with none released, and the 65th waits although the ring has
// room for it; once they are released the next 64 go. Every byte is
// checked.
TEST_P(ContractTest, LinkMidSizeChunksRunAheadByBytes) {
  const BackendKind kind = GetParam();
  constexpr int kBatch = 64;
  constexpr size_t kLen = 16 << 10;
  auto results = RunRanks(2, [&](int rank, Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(PairLink pl, OpenPairLink(kind, rank, store, "m", 8, 512 << 10));
    Backend* be = pl.be.get();
    Link* link = pl.link.get();
    const auto deadline = Clock::now() + milliseconds(60000);
    auto progress = [&]() { return link->Progress(); };
    for (int round = 0; round < 2; ++round) {
      const int first = round * kBatch;
      if (rank == 0) {
        if (round > 0) CIUIC_RETURN_IF_ERROR(store.Get("released0", kStoreTimeout).status());
        for (int c = first; c < first + kBatch; ++c) {
          CIUIC_RETURN_IF_ERROR(
              SendPatternChunk(*be, *link, progress, 0, 1, c, kLen, Clock::now() + milliseconds(5000)));
        }
        for (int i = 0; i < 100; ++i) CIUIC_RETURN_IF_ERROR(link->Progress().status());
        if (link->CanSend() || link->AcquireSend() != nullptr) {
          return InternalError("round " + std::to_string(round) + ": chunk " + std::to_string(first + kBatch) +
                               " was let through with 1 MiB under way");
        }
        CIUIC_RETURN_IF_ERROR(store.Set("sent" + std::to_string(round), "1"));
        continue;
      }
      CIUIC_RETURN_IF_ERROR(store.Get("sent" + std::to_string(round), kStoreTimeout).status());
      for (int c = first; c < first + kBatch; ++c) {
        CIUIC_RETURN_IF_ERROR(ExpectPatternChunk(*be, *link, 0, 1, c, kLen, deadline));
        CIUIC_RETURN_IF_ERROR(link->ReleaseRecv());
      }
      CIUIC_RETURN_IF_ERROR(link->Progress().status());
      CIUIC_RETURN_IF_ERROR(store.Set("released" + std::to_string(round), "1"));
    }
    if (rank == 0) {
      CIUIC_RETURN_IF_ERROR(WaitFor(*be, progress, [&] { return link->sends_in_flight() == 0; }, deadline, "sends"));
      return store.Get("released1", kStoreTimeout).status();
    }
    return Status::Ok();
  }, milliseconds(120000));
  ExpectAllOk(results);
}

// A sender that expects nothing back progresses its sends only
// (Link::Progress(false)) while it has a free slot, and reads (credits)
// only when the ring is full; every chunk still arrives intact. Once all is
// handed over a tcp link says it has nothing pending (the executor then
// leaves it alone); backends that do not tell keep asking to be progressed.
TEST_P(ContractTest, LinkSendsProgressWithoutReceiving) {
  const BackendKind kind = GetParam();
  constexpr int kChunks = 100;
  auto results = RunRanks(2, [&](int rank, Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(PairLink pl, OpenPairLink(kind, rank, store, "s", 5, 4096));
    Backend* be = pl.be.get();
    Link* link = pl.link.get();
    const auto deadline = Clock::now() + milliseconds(60000);
    if (rank == 0) {
      int full = 0;
      auto sends_only = [&]() -> StatusOr<bool> { return link->Progress(link->CanSend() ? false : (++full, true)); };
      for (int c = 0; c < kChunks; ++c) {
        CIUIC_RETURN_IF_ERROR(SendPatternChunk(*be, *link, sends_only, 0, 1, c, 1 + (c * 53) % 4096, deadline));
      }
      CIUIC_RETURN_IF_ERROR(WaitFor(*be, sends_only, [&] { return link->sends_in_flight() == 0; }, deadline, "sends"));
      if (full == 0) return InternalError("the ring never filled: the receiver was never behind");
      if (kind == BackendKind::kTcp && link->SendsPending()) return InternalError("tcp link still has sends pending");
      if (kind != BackendKind::kTcp && !link->SendsPending()) {
        return InternalError("a backend that does not report its queue must keep asking for progress");
      }
      CIUIC_RETURN_IF_ERROR(store.Set("sender-done", "1"));
      return store.Get("receiver-done", kStoreTimeout).status();
    }
    for (int c = 0; c < kChunks; ++c) {
      CIUIC_RETURN_IF_ERROR(ExpectPatternChunk(*be, *link, 0, 1, c, 1 + (c * 53) % 4096, deadline));
      if (c % 25 == 0) std::this_thread::sleep_for(milliseconds(2));  // fall behind now and then
      CIUIC_RETURN_IF_ERROR(link->ReleaseRecv());
    }
    CIUIC_RETURN_IF_ERROR(store.Get("sender-done", kStoreTimeout).status());
    return store.Set("receiver-done", "1");
  }, milliseconds(120000));
  ExpectAllOk(results);
}

// Zero-copy sends through a Link: chunks go straight from registered caller
// memory (no staging slot) on links that are not direct; a chunk's source
// may be reused once sends_done() passes it (here it is scribbled over at
// once, and the receiver must still see the original bytes). Direct links
// (shm) refuse and the sender uses AcquireSend.
TEST_P(ContractTest, LinkZeroCopySendsFromCallerMemory) {
  const BackendKind kind = GetParam();
  constexpr int kChunks = 200;
  constexpr size_t kSlot = 8192;
  auto results = RunRanks(2, [&](int rank, Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(PairLink pl, OpenPairLink(kind, rank, store, "zc", 5, kSlot));
    Backend* be = pl.be.get();
    Link* link = pl.link.get();
    const auto deadline = Clock::now() + milliseconds(60000);
    auto progress = [&]() { return link->Progress(); };
    auto len_of = [](int c) { return 1 + (static_cast<size_t>(c) * 997) % 8192; };
    if (rank == 0) {
      std::vector<uint8_t> caller(kChunks * kSlot);
      for (int c = 0; c < kChunks; ++c) {
        for (size_t i = 0; i < kSlot; ++i) caller[c * kSlot + i] = Pattern(0, 1, c, i);
      }
      CIUIC_ASSIGN_OR_RETURN(auto region, be->Register(caller.data(), caller.size()));
      if (link->writes_into_peer_memory()) {
        Status st = link->CommitSendFrom(*region, 0, 16);
        if (st.code() != StatusCode::kFailedPrecondition) {
          return InternalError("a direct link took a zero-copy send: " + st.ToString());
        }
      } else {
        if (link->CommitSendFrom(*region, 0, kSlot + 1).code() != StatusCode::kInvalidArgument ||
            link->CommitSendFrom(*region, caller.size() - 8, 16).code() != StatusCode::kInvalidArgument) {
          return InternalError("CommitSendFrom took a chunk larger than a slot or outside its region");
        }
      }
      std::vector<std::pair<uint64_t, int>> in_flight;  // (link chunk number, chunk)
      for (int c = 0; c < kChunks; ++c) {
        if (link->writes_into_peer_memory()) {
          void* slot = nullptr;
          CIUIC_RETURN_IF_ERROR(WaitFor(*be, progress, [&] { return (slot = link->AcquireSend()) != nullptr; },
                                        deadline, "a free slot"));
          std::memcpy(slot, &caller[c * kSlot], len_of(c));
          CIUIC_RETURN_IF_ERROR(link->CommitSend(len_of(c)));
          continue;
        }
        CIUIC_RETURN_IF_ERROR(WaitFor(*be, progress, [&] { return link->CanSend(); }, deadline, "a free slot"));
        in_flight.emplace_back(link->sends_committed(), c);
        CIUIC_RETURN_IF_ERROR(link->CommitSendFrom(*region, c * kSlot, len_of(c)));
        // Sources whose write completed may be reused: scribble over them.
        CIUIC_ASSIGN_OR_RETURN(bool any, link->Progress());
        (void)any;
        while (!in_flight.empty() && in_flight.front().first < link->sends_done()) {
          std::memset(&caller[in_flight.front().second * kSlot], 0xEE, kSlot);
          in_flight.erase(in_flight.begin());
        }
      }
      CIUIC_RETURN_IF_ERROR(WaitFor(*be, progress, [&] { return link->sends_in_flight() == 0; }, deadline, "sends"));
      CIUIC_RETURN_IF_ERROR(store.Set("zc-sent", "1"));
      return store.Get("zc-checked", kStoreTimeout).status();
    }
    for (int c = 0; c < kChunks; ++c) {
      size_t len = 0;
      const void* data = nullptr;
      CIUIC_RETURN_IF_ERROR(WaitFor(*be, progress, [&] { return (data = link->PeekRecv(&len)) != nullptr; },
                                    deadline, "chunk " + std::to_string(c)));
      if (len != len_of(c)) return DataLossError("chunk " + std::to_string(c) + " has " + std::to_string(len) + " bytes");
      const auto* q = static_cast<const uint8_t*>(data);
      for (size_t i = 0; i < len; ++i) {
        if (q[i] != Pattern(0, 1, c, i)) {
          return DataLossError("chunk " + std::to_string(c) + " byte " + std::to_string(i) +
                               (q[i] == 0xEE ? ": the source was reused before its write completed" : ""));
        }
      }
      CIUIC_RETURN_IF_ERROR(link->ReleaseRecv());
    }
    CIUIC_RETURN_IF_ERROR(store.Get("zc-sent", kStoreTimeout).status());
    return store.Set("zc-checked", "1");
  }, milliseconds(120000));
  ExpectAllOk(results);
}

// A rank that dies (SIGKILL) while the others are writing to it: every
// survivor gets an error naming it, well within the test's limit.
TEST_P(ContractTest, PeerDiesMidTransfer) {
  const BackendKind kind = GetParam();
  auto results = RunRanks(3, [&](int rank, Store& store) -> Status {
    BackendOptions opt = ChildOptions(rank, 3);
    opt.config.ib_timeout = 12;  // ~17 ms per retry: a dead verbs peer is seen in < 1 s
    opt.config.ib_retry_cnt = 3;
    CIUIC_ASSIGN_OR_RETURN(auto be, OpenBackend(kind, opt));
    BufferPool pool(*be, 1u << 20);
    LinkOptions lo;
    lo.slot_size = 64 << 10;
    lo.nslots = 4;
    std::vector<std::unique_ptr<Link>> links(3);
    for (int p = 0; p < 3; ++p) {
      if (p == rank) continue;
      CIUIC_ASSIGN_OR_RETURN(links[p], Link::Create(*be, pool, store, "d", rank, p, 0, lo, kStoreTimeout));
    }
    CIUIC_RETURN_IF_ERROR(store.Add("connected", 1).status());
    CIUIC_RETURN_IF_ERROR(WaitFor(*be, [&]() -> StatusOr<bool> { return false; },
                                  [&] { auto v = store.Add("connected", 0); return v.ok() && *v >= 3; },
                                  Clock::now() + kStoreTimeout, "all connected"));
    if (rank == 2) {
      // Receive a little, then die without any cleanup.
      for (int i = 0; i < 200; ++i) {
        for (int p = 0; p < 2; ++p) {
          (void)links[p]->Progress();
          size_t len;
          if (links[p]->PeekRecv(&len) != nullptr) (void)links[p]->ReleaseRecv();
        }
      }
      kill(getpid(), SIGKILL);
    }
    // Survivors stream to rank 2 (which stops consuming) and keep talking
    // to each other, until an error names rank 2.
    const auto deadline = Clock::now() + milliseconds(30000);
    const int other = 1 - rank;
    while (Clock::now() < deadline) {
      for (int p : {other, 2}) {
        auto any = links[p]->Progress();
        if (!any.ok()) {
          const std::string m = any.status().ToString();
          if (p != 2 || m.find("rank 2") == std::string::npos) {
            return InternalError("unexpected error from the link to rank " + std::to_string(p) + ": " + m);
          }
          // The expected error, naming the dead rank; the survivors finish
          // together so neither sees the other close first.
          CIUIC_RETURN_IF_ERROR(store.Add("survived", 1).status());
          return WaitFor(*be, [&]() -> StatusOr<bool> { return false; },
                         [&] { auto v = store.Add("survived", 0); return v.ok() && *v >= 2; },
                         Clock::now() + kStoreTimeout, "the other survivor");
        }
        void* slot = links[p]->AcquireSend();
        if (slot != nullptr) {
          std::memset(slot, rank, 1024);
          Status s = links[p]->CommitSend(1024);
          if (!s.ok() && p == 2 && s.ToString().find("rank 2") != std::string::npos) {
            CIUIC_RETURN_IF_ERROR(store.Add("survived", 1).status());
            return WaitFor(*be, [&]() -> StatusOr<bool> { return false; },
                           [&] { auto v = store.Add("survived", 0); return v.ok() && *v >= 2; },
                           Clock::now() + kStoreTimeout, "the other survivor");
          }
          if (!s.ok()) return s;
        }
        size_t len;
        if (links[p]->PeekRecv(&len) != nullptr) CIUIC_RETURN_IF_ERROR(links[p]->ReleaseRecv());
      }
      be->WaitForActivity(std::chrono::microseconds(200));
    }
    return DeadlineExceededError("no error about the dead rank 2 within 30 s");
  }, milliseconds(90000));
  ASSERT_EQ(results.size(), 3u);
  EXPECT_TRUE(results[0].ok()) << ResultsText(results);
  EXPECT_TRUE(results[1].ok()) << ResultsText(results);
  EXPECT_FALSE(results[2].exited) << ResultsText(results);
  EXPECT_EQ(results[2].signal, SIGKILL) << ResultsText(results);
}

// Registration cache over the backend's Register: miss, hit on a sub-range,
// miss elsewhere, invalidation, and a region invalidated while referenced
// stays usable until released.
TEST_P(ContractTest, RegistrationCache) {
  auto be = OpenBackend(GetParam(), Options(0, 1));
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  RegistrationCache cache(**be);
  std::vector<uint8_t> a(1 << 20), b(64 << 10);
  auto h1 = cache.Ref(a.data() + 100, 4096);
  ASSERT_TRUE(h1.ok()) << h1.status().ToString();
  EXPECT_EQ(static_cast<uint8_t*>(h1->region->data()) + h1->offset, a.data() + 100);
  auto h2 = cache.Ref(a.data() + 200, 1000);  // inside the first registration
  ASSERT_TRUE(h2.ok());
  EXPECT_EQ(h2->region, h1->region);
  EXPECT_EQ(cache.stats().hits, 1u);
  EXPECT_EQ(cache.stats().misses, 1u);
  auto h3 = cache.Ref(b.data(), b.size());
  ASSERT_TRUE(h3.ok());
  EXPECT_NE(h3->region, h1->region);
  EXPECT_EQ(cache.stats().misses, 2u);
  EXPECT_EQ(cache.stats().entries, 2u);
  cache.Invalidate(a.data(), a.size());
  EXPECT_EQ(cache.stats().invalidations, 1u);
  EXPECT_EQ(cache.stats().entries, 1u);
  // Still referenced: the region object lives on until Unref.
  EXPECT_EQ(static_cast<uint8_t*>(h1->region->data()) + h1->offset, a.data() + 100);
  cache.Unref(*h1);
  cache.Unref(*h2);
  auto h4 = cache.Ref(a.data() + 100, 4096);  // a miss again
  ASSERT_TRUE(h4.ok());
  EXPECT_EQ(cache.stats().misses, 3u);
  cache.Unref(*h3);
  cache.Unref(*h4);
  EXPECT_FALSE(cache.Ref(nullptr, 10).ok());
  EXPECT_FALSE(cache.Ref(a.data(), 0).ok());
}

// A peer writes into caller memory registered through the cache; the
// memory is then unmapped and new memory mapped at the same address. The
// next lookup must register the new memory (verbs pins pages: a cached
// registration would steer the write into the old pages, and the new buffer
// would never see it); the second write must land in the new memory.
TEST_P(ContractTest, RegistrationCacheFollowsMemoryRemappedAtTheSameAddress) {
  const BackendKind kind = GetParam();
  constexpr size_t kBytes = 256 << 10;
  auto results = RunRanks(2, [&](int rank, Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto be, OpenBackend(kind, ChildOptions(rank, 2)));
    CIUIC_ASSIGN_OR_RETURN(auto conn, ConnectThroughStore(*be, store, "rc", rank, 1 - rank, 0, kStoreTimeout));
    const auto deadline = Clock::now() + milliseconds(60000);
    std::vector<Completion> got;
    if (rank == 0) {  // the writer
      CIUIC_ASSIGN_OR_RETURN(auto src, be->Allocate(kBytes));
      for (int round = 0; round < 2; ++round) {
        CIUIC_ASSIGN_OR_RETURN(std::string blob, store.Get("target" + std::to_string(round), kStoreTimeout));
        CIUIC_ASSIGN_OR_RETURN(RemoteRegion rr, conn->ImportRegion(blob));
        auto* p = static_cast<uint8_t*>(src->data());
        for (size_t i = 0; i < kBytes - 8; ++i) p[i] = Pattern(0, 1, round, i);
        CIUIC_RETURN_IF_ERROR(conn->PostWrite(*src, 0, rr, 8, kBytes - 8, round, round));
        CIUIC_RETURN_IF_ERROR(Collect(*be, *conn, &got, Completion::Kind::kWriteDone, round + 1, deadline));
        CIUIC_RETURN_IF_ERROR(store.Get("checked" + std::to_string(round), kStoreTimeout).status());
      }
      return Status::Ok();
    }
    RegistrationCache cache(*be);
    void* addr = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (addr == MAP_FAILED) return InternalError("mmap failed");
    uint64_t first_region_id = 0;
    for (int round = 0; round < 2; ++round) {
      memset(addr, 0, kBytes);
      CIUIC_ASSIGN_OR_RETURN(RegistrationCache::Handle h, cache.Ref(addr, kBytes));
      if (round == 0) first_region_id = h.id;
      if (round == 1 && be->PinsRegisteredMemory() && h.id == first_region_id) {
        return DataLossError("the cache handed out the registration of unmapped memory (" +
                             std::to_string(cache.stats().released) + " released)");
      }
      CIUIC_RETURN_IF_ERROR(store.Set("target" + std::to_string(round), h.region->Describe()));
      CIUIC_RETURN_IF_ERROR(Collect(*be, *conn, &got, Completion::Kind::kWriteReceived, round + 1, deadline));
      const auto* p = static_cast<const uint8_t*>(addr);
      for (size_t i = 0; i < kBytes - 8; ++i) {
        if (p[8 + i] != Pattern(0, 1, round, i)) {
          return DataLossError("round " + std::to_string(round) + ": byte " + std::to_string(i) +
                               " did not land in the buffer at its address");
        }
      }
      cache.Unref(h);
      CIUIC_RETURN_IF_ERROR(store.Set("checked" + std::to_string(round), "1"));
      if (round == 0) {
        // New memory at the same address.
        if (munmap(addr, kBytes) != 0) return InternalError("munmap failed");
        void* again = mmap(addr, kBytes, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (again != addr) return InternalError("could not map new memory at the same address");
      }
    }
    munmap(addr, kBytes);
    return Status::Ok();
  }, milliseconds(90000));
  ExpectAllOk(results);
}

// Bad input to PostWrite/PostMessage: ranges outside either region,
// oversized messages.
TEST_P(ContractTest, BadRangesAreErrors) {
  const BackendKind kind = GetParam();
  auto results = RunRanks(2, [&](int rank, Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto be, OpenBackend(kind, ChildOptions(rank, 2)));
    CIUIC_ASSIGN_OR_RETURN(auto conn, ConnectThroughStore(*be, store, "b", rank, 1 - rank, 0, kStoreTimeout));
    CIUIC_ASSIGN_OR_RETURN(auto mr, be->Allocate(8192));
    CIUIC_RETURN_IF_ERROR(store.Set("mr" + std::to_string(rank), mr->Describe()));
    CIUIC_ASSIGN_OR_RETURN(std::string blob, store.Get("mr" + std::to_string(1 - rank), kStoreTimeout));
    CIUIC_ASSIGN_OR_RETURN(RemoteRegion rr, conn->ImportRegion(blob));
    if (conn->ImportRegion("garbage").ok()) return InternalError("a malformed region blob was accepted");
    auto expect_invalid = [](Status s, const char* what) -> Status {
      if (s.code() != StatusCode::kInvalidArgument) {
        return InternalError(std::string(what) + ": expected kInvalidArgument, got " + s.ToString());
      }
      return Status::Ok();
    };
    CIUIC_RETURN_IF_ERROR(expect_invalid(conn->PostWrite(*mr, 8000, rr, 0, 1000, 0, 0), "source past end"));
    CIUIC_RETURN_IF_ERROR(expect_invalid(conn->PostWrite(*mr, 0, rr, 8000, 1000, 0, 0), "target past end"));
    CIUIC_RETURN_IF_ERROR(expect_invalid(conn->PostWrite(*mr, SIZE_MAX - 10, rr, 0, 100, 0, 0), "source wraps"));
    uint8_t big[kMaxMessageBytes + 1] = {};
    CIUIC_RETURN_IF_ERROR(expect_invalid(conn->PostMessage(big, sizeof(big)), "oversized message"));
    // The connection still works after refused input.
    CIUIC_RETURN_IF_ERROR(conn->PostMessage(big, 4));
    std::vector<Completion> got;
    CIUIC_RETURN_IF_ERROR(Collect(*be, *conn, &got, Completion::Kind::kMessage, 1, Clock::now() + kStoreTimeout));
    CIUIC_RETURN_IF_ERROR(store.Add("bye", 1).status());
    return WaitFor(*be, [&]() -> StatusOr<bool> { return false; },
                   [&] { auto v = store.Add("bye", 0); return v.ok() && *v >= 2; },
                   Clock::now() + kStoreTimeout, "the peer");
  }, milliseconds(60000));
  ExpectAllOk(results);
}

INSTANTIATE_TEST_SUITE_P(Backends, ContractTest,
                         ::testing::Values(BackendKind::kShm, BackendKind::kTcp, BackendKind::kVerbs),
                         [](const ::testing::TestParamInfo<BackendKind>& info) {
                           return std::string(BackendName(info.param));
                         });

// The bootstrap store rejects a client that cannot prove the job secret, and
// serves one that can (the store is shared by every backend).
TEST(ContractStore, StrangerWithoutSecretIsRejected) {
  auto server = TcpStoreServer::Start("127.0.0.1", 0, "the-secret");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto stranger = TcpStoreClient::Connect("127.0.0.1", (*server)->port(), "wrong", milliseconds(5000));
  ASSERT_FALSE(stranger.ok());
  EXPECT_EQ(stranger.status().code(), StatusCode::kFailedPrecondition) << stranger.status().ToString();
  auto member = TcpStoreClient::Connect("127.0.0.1", (*server)->port(), "the-secret", milliseconds(5000));
  ASSERT_TRUE(member.ok()) << member.status().ToString();
  EXPECT_TRUE((*member)->Set("k", "v").ok());
}

}  // namespace
}  // namespace ciuic::transport
