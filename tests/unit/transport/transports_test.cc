// Transports: one backend and pool per kind a rank's peers use, each peer
// routed to its kind, and the sleep over all of them.
#include "transport/transports.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

namespace ciuic::transport {
namespace {

std::map<BackendKind, BackendOptions> Options(int rank, int n) {
  BackendOptions o;
  o.rank = rank;
  o.world_size = n;
  o.job_id = "transports-test-" + std::to_string(getpid());
  o.config.socket_ifname = "lo";
  return {{BackendKind::kShm, o}, {BackendKind::kTcp, o}};
}

TEST(Transports, EachPeerGoesToItsKindWithAPoolOfThatKind) {
  // Rank 1 of 4: ranks 0 and 3 share its host, rank 2 is elsewhere.
  const std::vector<BackendKind> route = {BackendKind::kShm, BackendKind::kTcp, BackendKind::kTcp, BackendKind::kShm};
  auto t = Transports::Open(1, route, Options(1, 4), 1 << 20);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Transports& ts = **t;
  EXPECT_FALSE(ts.uniform());
  EXPECT_EQ(ts.Name(), "shm+tcp");
  EXPECT_EQ(ts.KindOf(0), BackendKind::kShm);
  EXPECT_EQ(ts.KindOf(2), BackendKind::kTcp);
  EXPECT_EQ(ts.KindOf(3), BackendKind::kShm);
  EXPECT_EQ(ts.For(0).kind(), BackendKind::kShm);
  EXPECT_EQ(ts.For(2).kind(), BackendKind::kTcp);
  EXPECT_EQ(&ts.For(0), &ts.For(3));  // one backend per kind
  EXPECT_EQ(&ts.For(0), ts.Find(BackendKind::kShm));
  EXPECT_EQ(ts.Find(BackendKind::kVerbs), nullptr);
  EXPECT_EQ(ts.FindPool(BackendKind::kVerbs), nullptr);
  EXPECT_NE(&ts.PoolFor(0), &ts.PoolFor(2));
  EXPECT_EQ(&ts.PoolFor(0), ts.FindPool(BackendKind::kShm));
  // A pool's leases come from its own backend's memory.
  auto a = ts.PoolFor(0).Acquire(4096);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(ts.PoolFor(0).allocated_bytes(), 1u << 20);
  EXPECT_EQ(ts.PoolFor(2).allocated_bytes(), 0u);
  ts.PoolFor(0).Release(*a);
  EXPECT_NE(ts.Describe().find(" + "), std::string::npos) << ts.Describe();
  // With nothing to wake it, a sleep of 50 ms returns after a slice, not
  // the whole time (the caller sleeps again): shm hand-offs are seen.
  const auto start = std::chrono::steady_clock::now();
  ts.WaitForActivity(std::chrono::milliseconds(50));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(40));
}

// A post already waiting in shm ends the sleep at once, before the network
// backend's slice: 2000 sleeps take far less than 2000 slices.
TEST(Transports, AnShmPostAlreadyThereEndsTheSleepAtOnce) {
  using Clock = std::chrono::steady_clock;
  // Rank 0 of 3: rank 1 shares its host, rank 2 is elsewhere.
  auto t = Transports::Open(0, {BackendKind::kShm, BackendKind::kShm, BackendKind::kTcp}, Options(0, 3), 1 << 20);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  Transports& ts = **t;
  Backend* shm = ts.Find(BackendKind::kShm);
  ASSERT_NE(shm, nullptr);
  auto e = shm->CreateEndpoint(0, 0);  // a connection to itself carries the post
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  auto conn = (*e)->Connect((*e)->Describe(), Clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  EXPECT_FALSE(ts.AnyActivity());
  ASSERT_TRUE((*conn)->PostMessage("hi", 2).ok());
  EXPECT_TRUE(shm->AnyActivity());
  EXPECT_TRUE(ts.AnyActivity());
  constexpr int kSleeps = 2000;
  const auto start = Clock::now();
  for (int i = 0; i < kSleeps; ++i) ts.WaitForActivity(std::chrono::seconds(1));
  EXPECT_LT(Clock::now() - start, kSleeps * Transports::kSlice / 2)
      << "a sleep with an shm post waiting still slept on the network";
  Completion c;
  size_t got = 0;
  for (int i = 0; i < 1000 && got == 0; ++i) {
    auto n = (*conn)->Progress(&c, 1);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    got = *n;
  }
  ASSERT_EQ(got, 1u);
  EXPECT_EQ(c.len, 2u);
  EXPECT_FALSE(ts.AnyActivity()) << "the post was read";
}

TEST(Transports, OneKindIsThatBackendAlone) {
  auto t = Transports::Open(0, {BackendKind::kTcp, BackendKind::kTcp}, Options(0, 2), 1 << 20);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE((*t)->uniform());
  EXPECT_EQ((*t)->Name(), "tcp");
  EXPECT_EQ((*t)->Find(BackendKind::kShm), nullptr);
  auto single = Transports::Open(0, {BackendKind::kShm}, Options(0, 1), 1 << 20);
  ASSERT_TRUE(single.ok()) << single.status().ToString();
  EXPECT_EQ((*single)->Name(), "shm");
}

TEST(Transports, BadRoutesAndMissingOptionsAreNamed) {
  EXPECT_EQ(Transports::Open(0, {}, Options(0, 1), 1 << 20).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Transports::Open(3, {BackendKind::kShm, BackendKind::kShm}, Options(3, 2), 1 << 20).status().code(),
            StatusCode::kInvalidArgument);
  auto s = Transports::Open(0, {BackendKind::kShm, BackendKind::kVerbs}, Options(0, 2), 1 << 20);
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("verbs"), std::string::npos) << s.status().ToString();
}

}  // namespace
}  // namespace ciuic::transport
