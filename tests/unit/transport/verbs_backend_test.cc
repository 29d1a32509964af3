// The verbs backend: its device-free helpers (CIUIC_IB_HCA syntax, wire
// formats, striping rule) everywhere, and the backend itself on a real
// device: forked ranks on one device (the Soft-RoCE guest runs them on
// rxe0: tools/rxe-vm/rxe-vm run -- build-verbs/tests/unit/transport/verbs_backend_test).
//
// Without a usable device the device tests skip with the reason (here: "no
// RDMA devices found"); CIUIC_TEST_REQUIRE_VERBS=1 turns that into a failure.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <dirent.h>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"
#include "tests/util/multiproc.h"
#include "transport/backends.h"
#if defined(CIUIC_HAVE_VERBS)
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_wire.h"
#include "tests/util/backend_skip.h"
#endif

namespace ciuic::transport {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::RankResult;
using testing::RunRanks;

constexpr milliseconds kTimeout{30000};


Config BaseConfig() {
  auto c = Config::FromEnv();
  return c.ok() ? *c : Config();
}

BackendOptions Options(int rank, int n, const std::string& job, int qps = 1) {
  BackendOptions o;
  o.rank = rank;
  o.world_size = n;
  o.job_id = job;
  o.secret = "verbs-test-secret";  // the handshakes prove it
  o.config = BaseConfig();
  o.config.ib_qps_per_peer = qps;
  return o;
}

// The job id shared by a test's ranks: the test name and the parent's pid.
std::string JobId() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string("vbt-") + info->name() + "-" + std::to_string(getpid());
}

#define SKIP_WITHOUT_VERBS() CIUIC_SKIP_UNLESS_BACKEND(BackendKind::kVerbs, Options(0, 1, "probe"))

std::string ResultsText(const std::vector<RankResult>& results) {
  std::string s;
  for (const auto& r : results) s += r.Describe() + "\n";
  return s;
}

// A reproducible pattern, 8 bytes at a time (cheap under TCG emulation).
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
uint64_t Seed(int src, int dst, size_t k) { return (static_cast<uint64_t>(src) << 40) ^ (dst << 20) ^ k ^ 0x5eed; }
void Fill(uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = Mix(seed + i / 8);
    std::memcpy(p + i, &v, std::min<size_t>(8, n - i));
  }
}
// Index of the first wrong byte, or n.
size_t FirstWrong(const uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = Mix(seed + i / 8);
    const size_t m = std::min<size_t>(8, n - i);
    if (std::memcmp(p + i, &v, m) != 0) {
      for (size_t j = 0; j < m; ++j) {
        if (p[i + j] != reinterpret_cast<const uint8_t*>(&v)[j]) return i + j;
      }
    }
  }
  return n;
}

// ---------------------------------------------------------------------------
// Without a device: availability, and the helpers.

TEST(VerbsAvailability, ReasonWhenUnusable) {
  std::string why;
  const bool usable = VerbsUsable(Options(0, 1, "probe"), &why);
  auto be = OpenBackend(BackendKind::kVerbs, Options(0, 1, "probe"));
  EXPECT_EQ(be.ok(), usable) << be.status().ToString();
  if (usable) {
    EXPECT_TRUE(why.empty()) << why;
    EXPECT_NE((*be)->Describe().find("verbs "), std::string::npos) << (*be)->Describe();
    return;
  }
  EXPECT_FALSE(why.empty());
  EXPECT_NE(be.status().message().find(why), std::string::npos) << be.status().ToString() << " vs " << why;
#if defined(CIUIC_HAVE_VERBS)
  EXPECT_EQ(be.status().code(), StatusCode::kUnavailable) << be.status().ToString();
  struct stat st{};
  if (stat("/sys/class/infiniband", &st) != 0) {
    EXPECT_EQ(why, "no RDMA devices found");  // this machine: no RDMA in the kernel
  }
#else
  EXPECT_EQ(be.status().code(), StatusCode::kUnimplemented) << be.status().ToString();
#endif
}

#if defined(CIUIC_HAVE_VERBS)

TEST(VerbsHcaSpec, ParsesTheNcclSyntax) {
  auto empty = verbs::ParseHcaSpec("");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->entries.empty());
  EXPECT_TRUE(verbs::HcaAllows(*empty, "anything", 3));

  auto list = verbs::ParseHcaSpec("mlx5_0:1,mlx5_1");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->entries.size(), 2u);
  EXPECT_FALSE(list->exclude);
  EXPECT_FALSE(list->exact);
  EXPECT_EQ(list->entries[0].name, "mlx5_0");
  EXPECT_EQ(list->entries[0].port, 1);
  EXPECT_EQ(list->entries[1].port, -1);
  EXPECT_TRUE(verbs::HcaAllows(*list, "mlx5_0", 1));
  EXPECT_FALSE(verbs::HcaAllows(*list, "mlx5_0", 2));
  EXPECT_TRUE(verbs::HcaAllows(*list, "mlx5_1", 2));
  EXPECT_TRUE(verbs::HcaAllows(*list, "mlx5_10", 1));  // prefix match
  EXPECT_FALSE(verbs::HcaAllows(*list, "rxe0", 1));

  auto exact = verbs::ParseHcaSpec("=mlx5_1");
  ASSERT_TRUE(exact.ok());
  EXPECT_TRUE(exact->exact);
  EXPECT_TRUE(verbs::HcaAllows(*exact, "mlx5_1", 1));
  EXPECT_FALSE(verbs::HcaAllows(*exact, "mlx5_10", 1));

  auto excl = verbs::ParseHcaSpec("^=rxe0:1");
  ASSERT_TRUE(excl.ok());
  EXPECT_TRUE(excl->exclude);
  EXPECT_TRUE(excl->exact);
  EXPECT_FALSE(verbs::HcaAllows(*excl, "rxe0", 1));
  EXPECT_TRUE(verbs::HcaAllows(*excl, "rxe0", 2));
  EXPECT_TRUE(verbs::HcaAllows(*excl, "mlx5_0", 1));

  for (const char* bad : {",", "mlx5_0,", ",mlx5_0", "mlx5_0:", "mlx5_0:0", "mlx5_0:256", "mlx5_0:x", ":1", "^", "=",
                          "^="}) {
    auto s = verbs::ParseHcaSpec(bad);
    EXPECT_FALSE(s.ok()) << "'" << bad << "' was accepted";
    if (!s.ok()) {
      EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.status().message().find("CIUIC_IB_HCA"), std::string::npos) << s.status().ToString();
    }
  }
}

// The receiver's rule (HeadIsStriped on the last WR of the head) must agree
// with the sender's split for every length, QP count and WR size limit.
// Devices are tried in this order: the topology plan's, then those on this
// CPU's node, then the rest, each group as verbs lists them.
TEST(VerbsHcaSpec, DevicesAreTriedThePlansFirst) {
  const std::vector<std::string> names = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"};
  const std::vector<int> numas = {0, 0, 1, 1};
  EXPECT_EQ(verbs::DeviceOrder(names, numas, 1, ""), (std::vector<size_t>{2, 3, 0, 1}));
  EXPECT_EQ(verbs::DeviceOrder(names, numas, 1, "mlx5_1"), (std::vector<size_t>{1, 2, 3, 0}));
  EXPECT_EQ(verbs::DeviceOrder(names, numas, -1, "mlx5_3"), (std::vector<size_t>{3, 0, 1, 2}));
  EXPECT_EQ(verbs::DeviceOrder(names, numas, -1, "mlx5_9"), (std::vector<size_t>{0, 1, 2, 3}));
}

TEST(VerbsStriping, ReceiverRecognisesEveryStripedWrite) {
  std::mt19937_64 rng(42);
  std::vector<uint64_t> lens = {0, 1, 7, 4096, verbs::kStripeMinPart - 1, verbs::kStripeMinPart,
                                verbs::kStripeMinPart + 1, 100 << 10, 192 << 10, (1u << 20) + 3, 16u << 20,
                                64u << 20, (1ull << 32) + 5};
  for (int i = 0; i < 300; ++i) lens.push_back(rng() % (40u << 20));
  for (uint64_t max_msg : {uint64_t{verbs::kStripeMinPart}, uint64_t{8} << 20, uint64_t{1} << 30}) {
    for (int nqps : {1, 2, 3, 4, 16}) {
      for (uint64_t len : lens) {
        verbs::WritePart buf[verbs::kMaxQpsPerPeer];
        const std::vector<verbs::WritePart> parts(buf, buf + verbs::SplitWrite(len, nqps, buf));
        ASSERT_TRUE(parts.size() == 1 || parts.size() == static_cast<size_t>(nqps)) << len;
        uint64_t at = 0;
        for (size_t p = 0; p < parts.size(); ++p) {
          EXPECT_EQ(parts[p].qp, static_cast<int>(p));
          EXPECT_EQ(parts[p].offset, at) << "len " << len << " nqps " << nqps;
          at += parts[p].len;
          if (p > 0) {
            EXPECT_EQ(parts[p].len % 4096, 0u);
          }
          const auto chunks = verbs::ChunkPart(parts[p].len, max_msg);
          uint64_t sum = 0;
          for (uint64_t c : chunks) {
            EXPECT_LE(c, max_msg);
            sum += c;
          }
          EXPECT_EQ(sum, parts[p].len);
          EXPECT_EQ(chunks.back(), std::min(parts[p].len, max_msg));
          if (p == 0) {
            EXPECT_EQ(verbs::HeadIsStriped(chunks.back(), nqps), parts.size() > 1)
                << "len " << len << " nqps " << nqps << " max_msg " << max_msg;
          }
        }
        EXPECT_EQ(at, len);
        if (nqps > 1 && len >= (uint64_t{verbs::kStripeMinPart} * nqps)) {
          // Large writes are balanced: no part more than 4 KiB per QP off.
          EXPECT_LE(parts[0].len - parts.back().len, 4096u * nqps) << len;
        }
      }
    }
  }
}

TEST(VerbsWire, EndpointRoundTripAndRejects) {
  verbs::EndpointInfo e;
  e.link_layer = verbs::kLinkEthernet;
  e.mtu = 3;
  e.port = 1;
  e.lid = 0;
  for (int i = 0; i < 16; ++i) e.gid[i] = static_cast<uint8_t>(i * 7);
  e.rank = 2;
  e.peer = 5;
  e.tag = 0xabcdef01;
  e.job_hash = verbs::JobHash("job");
  e.probe = {0x1234, 0xabcdef};
  e.keepalive_addr = 0x7fff00001000;
  e.keepalive_rkey = 99;
  for (int i = 0; i < 16; ++i) e.nonce[i] = static_cast<uint8_t>(200 - i);
  e.qps = {{11, 0x111111}, {12, 0x222222}, {13, 0x333333}};
  const std::string blob = verbs::EncodeEndpoint(e);
  EXPECT_EQ(blob.size(), 88u + 24u);
  auto d = verbs::DecodeEndpoint(blob);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->rank, 2);
  EXPECT_EQ(d->peer, 5);
  EXPECT_EQ(d->tag, 0xabcdef01u);
  EXPECT_EQ(d->job_hash, e.job_hash);
  EXPECT_EQ(d->mtu, 3);
  EXPECT_EQ(std::memcmp(d->gid, e.gid, 16), 0);
  EXPECT_EQ(d->probe.qpn, 0x1234u);
  EXPECT_EQ(d->keepalive_addr, e.keepalive_addr);
  EXPECT_EQ(std::memcmp(d->nonce, e.nonce, 16), 0);
  ASSERT_EQ(d->qps.size(), 3u);
  EXPECT_EQ(d->qps[2].qpn, 13u);
  EXPECT_EQ(d->qps[2].psn, 0x333333u);

  EXPECT_FALSE(verbs::DecodeEndpoint("").ok());
  EXPECT_FALSE(verbs::DecodeEndpoint(blob.substr(0, blob.size() - 1)).ok());
  EXPECT_FALSE(verbs::DecodeEndpoint(blob + "x").ok());
  std::string bad = blob;
  bad[0] ^= 1;
  EXPECT_FALSE(verbs::DecodeEndpoint(bad).ok());
  bad = blob;
  bad[9] = 0;  // no QPs
  EXPECT_FALSE(verbs::DecodeEndpoint(bad).ok());
  bad = blob;
  bad[7] = 9;  // MTU code
  EXPECT_FALSE(verbs::DecodeEndpoint(bad).ok());
  EXPECT_EQ(verbs::DecodeEndpoint("garbage").status().code(), StatusCode::kInvalidArgument);
  // A release-1 peer (no nonce: 16 bytes shorter) is named by its version,
  // not as a short description.
  std::string v1 = blob.substr(0, 72) + blob.substr(88);
  v1[4] = 1;
  v1[5] = 0;
  auto old = verbs::DecodeEndpoint(v1);
  ASSERT_FALSE(old.ok());
  EXPECT_NE(old.status().message().find("version 1, expected 2"), std::string::npos) << old.status().ToString();
}

TEST(VerbsWire, RegionAndHello) {
  verbs::RegionInfo r{77, 0x10000, 4096, verbs::JobHash("j"), 3};
  auto d = verbs::DecodeRegion(verbs::EncodeRegion(r));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->rkey, 77u);
  EXPECT_EQ(d->addr, 0x10000u);
  EXPECT_EQ(d->size, 4096u);
  EXPECT_EQ(d->rank, 3);
  r.size = 0;
  EXPECT_FALSE(verbs::DecodeRegion(verbs::EncodeRegion(r)).ok());
  r.size = 10;
  r.addr = ~uint64_t{0} - 4;
  EXPECT_FALSE(verbs::DecodeRegion(verbs::EncodeRegion(r)).ok());
  EXPECT_FALSE(verbs::DecodeRegion("garbage").ok());

  verbs::Hello h{4, 1, 9, 12345, 3};
  uint8_t buf[verbs::kHelloBytes];
  const Digest key = verbs::DataKey("secret", "job");
  uint8_t mine[16], theirs[16];
  for (int i = 0; i < 16; ++i) {
    mine[i] = static_cast<uint8_t>(i);
    theirs[i] = static_cast<uint8_t>(100 + i);
  }
  verbs::EncodeHello(h, key, mine, theirs, buf);
  // The receiver checks with the sender's nonce first.
  EXPECT_TRUE(verbs::HelloMacMatches(buf, key, mine, theirs));
  EXPECT_FALSE(verbs::HelloMacMatches(buf, key, theirs, mine));  // a reflected hello
  EXPECT_FALSE(verbs::HelloMacMatches(buf, verbs::DataKey("guess", "job"), mine, theirs));
  EXPECT_FALSE(verbs::HelloMacMatches(buf, verbs::DataKey("secret", "job2"), mine, theirs));
  for (size_t i = 0; i < sizeof(buf); ++i) {
    uint8_t flipped[verbs::kHelloBytes];
    std::memcpy(flipped, buf, sizeof(buf));
    flipped[i] ^= 0x01;
    EXPECT_FALSE(verbs::HelloMacMatches(flipped, key, mine, theirs)) << i;
  }
  uint8_t old[verbs::kHelloBytes];
  std::memcpy(old, buf, sizeof(buf));
  old[3] = '1';  // "CVH1"
  EXPECT_NE(verbs::DecodeHello(old, 28).status().message().find("CVH1"), std::string::npos);
  auto hd = verbs::DecodeHello(buf, sizeof(buf));
  ASSERT_TRUE(hd.ok());
  EXPECT_EQ(hd->rank, 4);
  EXPECT_EQ(hd->peer, 1);
  EXPECT_EQ(hd->tag, 9u);
  EXPECT_EQ(hd->job_hash, 12345u);
  EXPECT_EQ(hd->nqps, 3u);
  EXPECT_FALSE(verbs::DecodeHello(buf, sizeof(buf) - 1).ok());

  const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 2, 15};
  EXPECT_TRUE(verbs::GidIsIpv4Mapped(v4));
  EXPECT_EQ(verbs::GidText(v4), "::ffff:10.0.2.15");
  const uint8_t link_local[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_FALSE(verbs::GidIsIpv4Mapped(link_local));
  EXPECT_FALSE(verbs::GidIsZero(link_local));
}

#endif  // CIUIC_HAVE_VERBS

// ---------------------------------------------------------------------------
// On a device, in one process.

// Two backends of one process as ranks 0 and 1, connected from two threads.
struct Pair {
  std::unique_ptr<Backend> be[2];
  std::unique_ptr<Connection> conn[2];
};

Status MakePair(Pair* p, const std::string& job, uint32_t tag, int qps0 = 1, int qps1 = 1) {
  CIUIC_ASSIGN_OR_RETURN(p->be[0], OpenBackend(BackendKind::kVerbs, Options(0, 2, job, qps0)));
  CIUIC_ASSIGN_OR_RETURN(p->be[1], OpenBackend(BackendKind::kVerbs, Options(1, 2, job, qps1)));
  CIUIC_ASSIGN_OR_RETURN(auto e0, p->be[0]->CreateEndpoint(1, tag));
  CIUIC_ASSIGN_OR_RETURN(auto e1, p->be[1]->CreateEndpoint(0, tag));
  const auto deadline = Clock::now() + kTimeout;
  StatusOr<std::unique_ptr<Connection>> c1 = InternalError("not run");
  std::thread t([&] { c1 = e1->Connect(e0->Describe(), deadline); });
  auto c0 = e0->Connect(e1->Describe(), deadline);
  t.join();
  if (!c0.ok()) return c0.status();
  if (!c1.ok()) return c1.status();
  p->conn[0] = std::move(*c0);
  p->conn[1] = std::move(*c1);
  return Status::Ok();
}

// Progresses `conn` until `want` completions are collected or the deadline.
Status Collect(Backend& be, Connection& conn, std::vector<Completion>* out, size_t want,
               Clock::time_point deadline) {
  return WaitFor(
      be,
      [&]() -> StatusOr<bool> {
        Completion buf[32];
        CIUIC_ASSIGN_OR_RETURN(size_t n, conn.Progress(buf, 32));
        out->insert(out->end(), buf, buf + n);
        return n > 0;
      },
      [&] { return out->size() >= want; }, deadline,
      std::to_string(want) + " completions from rank " + std::to_string(conn.peer()));
}

TEST(VerbsBackend, ResourcesAndBadInput) {
  SKIP_WITHOUT_VERBS();
  auto be = OpenBackend(BackendKind::kVerbs, Options(0, 2, JobId()));
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  EXPECT_EQ((*be)->kind(), BackendKind::kVerbs);
  EXPECT_NE((*be)->Describe().find("verbs "), std::string::npos);
  EXPECT_EQ((*be)->Allocate(0).status().code(), StatusCode::kInvalidArgument);
  auto mr = (*be)->Allocate(5000);
  ASSERT_TRUE(mr.ok()) << mr.status().ToString();
  EXPECT_EQ(reinterpret_cast<uintptr_t>((*mr)->data()) % 4096, 0u);
  EXPECT_EQ((*mr)->size(), 5000u);
  const auto* bytes = static_cast<const uint8_t*>((*mr)->data());
  EXPECT_EQ(FirstWrong(bytes, 0, 0), 0u);
  for (size_t i = 0; i < 5000; ++i) ASSERT_EQ(bytes[i], 0) << i;
  std::vector<uint8_t> mine(10000);
  auto reg = (*be)->Register(mine.data() + 1, 9000);
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_EQ((*reg)->data(), mine.data() + 1);
  EXPECT_FALSE((*reg)->Describe().empty());
  EXPECT_EQ((*be)->Register(nullptr, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*be)->Register(mine.data(), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*be)->CreateEndpoint(-1, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*be)->CreateEndpoint(2, 0).status().code(), StatusCode::kInvalidArgument);
  auto ep = (*be)->CreateEndpoint(1, 3);
  ASSERT_TRUE(ep.ok()) << ep.status().ToString();
#if defined(CIUIC_HAVE_VERBS)
  auto info = verbs::DecodeEndpoint((*ep)->Describe());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->rank, 0);
  EXPECT_EQ(info->peer, 1);
  EXPECT_EQ(info->tag, 3u);
#endif
  auto bad = (*ep)->Connect("garbage", Clock::now() + milliseconds(100));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument) << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("peer rank 1"), std::string::npos) << bad.status().ToString();
  // Only one Connect per endpoint.
  EXPECT_EQ((*ep)->Connect("garbage", Clock::now()).status().code(), StatusCode::kFailedPrecondition);
  (*be)->WaitForActivity(std::chrono::microseconds(1000));  // nothing to wait for: returns
}

TEST(VerbsBackend, DeviceGidAndHcaSelection) {
  SKIP_WITHOUT_VERBS();
  BackendOptions o = Options(0, 1, JobId());
  o.config.ib_gid_index = -1;  // auto
  auto be = OpenBackend(BackendKind::kVerbs, o);
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  const std::string d = (*be)->Describe();
  // "verbs <dev>:<port> ..."
  const std::string dev = d.substr(6, d.find(':') - 6);
  if (d.find("RoCE") != std::string::npos) {
    EXPECT_NE(d.find("RoCE v2"), std::string::npos) << d;
    EXPECT_NE(d.find("::ffff:"), std::string::npos) << "auto GID should be the IPv4-mapped one: " << d;
  }
  be->reset();
  o.config.ib_hca = "=" + dev;
  auto named = OpenBackend(BackendKind::kVerbs, o);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ((*named)->Describe().substr(0, 6 + dev.size()), "verbs " + dev);
  named->reset();
  o.config.ib_hca = "=no_such_device";
  auto none = OpenBackend(BackendKind::kVerbs, o);
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("CIUIC_IB_HCA"), std::string::npos) << none.status().ToString();
  o.config.ib_hca = "mlx5_0:x";
  EXPECT_EQ(OpenBackend(BackendKind::kVerbs, o).status().code(), StatusCode::kInvalidArgument);
  o.config.ib_hca = "";
  o.config.ib_gid_index = 100000;
  auto gid = OpenBackend(BackendKind::kVerbs, o);
  EXPECT_EQ(gid.status().code(), StatusCode::kInvalidArgument) << gid.status().ToString();
  EXPECT_NE(gid.status().message().find("CIUIC_IB_GID_INDEX"), std::string::npos);
  o.config.ib_gid_index = -1;
  o.config.ib_qps_per_peer = 0;
  EXPECT_EQ(OpenBackend(BackendKind::kVerbs, o).status().code(), StatusCode::kInvalidArgument);
}

TEST(VerbsBackend, ConnectRespectsTheDeadlineAndNamesThePeer) {
  SKIP_WITHOUT_VERBS();
  const std::string job = JobId();
  auto a = OpenBackend(BackendKind::kVerbs, Options(0, 2, job));
  auto b = OpenBackend(BackendKind::kVerbs, Options(1, 2, job));
  ASSERT_TRUE(a.ok() && b.ok());
  auto ea = (*a)->CreateEndpoint(1, 0);
  auto eb = (*b)->CreateEndpoint(0, 0);  // never connects
  ASSERT_TRUE(ea.ok() && eb.ok());
  const auto start = Clock::now();
  auto c = (*ea)->Connect((*eb)->Describe(), start + milliseconds(1000));
  const auto took = Clock::now() - start;
  EXPECT_EQ(c.status().code(), StatusCode::kDeadlineExceeded) << c.status().ToString();
  EXPECT_NE(c.status().message().find("peer rank 1"), std::string::npos) << c.status().ToString();
  EXPECT_GE(took, milliseconds(900));
  EXPECT_LT(took, milliseconds(15000));  // generous: emulated CPUs are slow

  // Descriptions that do not fit this endpoint are refused up front.
  auto eb2 = (*b)->CreateEndpoint(0, 7);  // another tag
  auto ea2 = (*a)->CreateEndpoint(1, 0);
  ASSERT_TRUE(eb2.ok() && ea2.ok());
  auto wrong_tag = (*ea2)->Connect((*eb2)->Describe(), Clock::now() + milliseconds(500));
  EXPECT_EQ(wrong_tag.status().code(), StatusCode::kInvalidArgument) << wrong_tag.status().ToString();
  auto ea3 = (*a)->CreateEndpoint(1, 0);
  ASSERT_TRUE(ea3.ok());
  auto own = (*ea3)->Connect((*ea3)->Describe(), Clock::now() + milliseconds(500));  // its own blob
  EXPECT_EQ(own.status().code(), StatusCode::kInvalidArgument) << own.status().ToString();
}

// A rank without the job secret never gets a connection: each side checks
// the MAC of the other's handshake before the connection exists.
TEST(VerbsBackend, RanksWithDifferentSecretsNeverConnect) {
  SKIP_WITHOUT_VERBS();
  const std::string job = JobId();
  BackendOptions o1 = Options(1, 2, job);
  o1.secret = "a guess";
  auto a = OpenBackend(BackendKind::kVerbs, Options(0, 2, job));
  auto b = OpenBackend(BackendKind::kVerbs, o1);
  ASSERT_TRUE(a.ok() && b.ok());
  auto ea = (*a)->CreateEndpoint(1, 0);
  auto eb = (*b)->CreateEndpoint(0, 0);
  ASSERT_TRUE(ea.ok() && eb.ok());
  const auto deadline = Clock::now() + milliseconds(5000);
  StatusOr<std::unique_ptr<Connection>> cb = InternalError("not run");
  std::thread t([&] { cb = (*eb)->Connect((*ea)->Describe(), deadline); });
  auto ca = (*ea)->Connect((*eb)->Describe(), deadline);
  t.join();
  EXPECT_FALSE(ca.ok());
  EXPECT_FALSE(cb.ok());
  const std::string both = ca.status().ToString() + " | " + cb.status().ToString();
  EXPECT_NE(both.find("proof of the job secret"), std::string::npos) << both;
  EXPECT_TRUE(ca.status().code() == StatusCode::kFailedPrecondition ||
              cb.status().code() == StatusCode::kFailedPrecondition)
      << both;
}

TEST(VerbsBackend, QpCountMustMatch) {
  SKIP_WITHOUT_VERBS();
  Pair p;
  Status s = MakePair(&p, JobId(), 0, 1, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("CIUIC_IB_QPS_PER_PEER"), std::string::npos) << s.ToString();
}

// Writes both ways between two backends of one process, then messages,
// bad ranges, WaitForActivity's wake-up and the foreign-region check.
TEST(VerbsBackend, InProcessPairWritesAndMessages) {
  SKIP_WITHOUT_VERBS();
  Pair p;
  ASSERT_TRUE(MakePair(&p, JobId(), 11, 2, 2).ok());
  // mr[r]: rank r's inbox; src[r]: what it sends.
  std::unique_ptr<MemoryRegion> mr[2], src[2];
  RemoteRegion rr[2];
  for (int r = 0; r < 2; ++r) {
    auto m = p.be[r]->Allocate(1 << 20);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    mr[r] = std::move(*m);
    auto s = p.be[r]->Allocate(1 << 20);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    src[r] = std::move(*s);
  }
  for (int r = 0; r < 2; ++r) {
    auto imp = p.conn[r]->ImportRegion(mr[1 - r]->Describe());
    ASSERT_TRUE(imp.ok()) << imp.status().ToString();
    rr[r] = *imp;
    EXPECT_EQ(rr[r].size, 1u << 20);
  }
  // A region of the wrong rank (its own) and garbage are refused.
  EXPECT_EQ(p.conn[0]->ImportRegion(mr[0]->Describe()).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.conn[0]->ImportRegion("garbage").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.conn[0]->PostWrite(*mr[0], 0, RemoteRegion{99, 10}, 0, 1, 0, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.conn[0]->PostWrite(*mr[0], (1 << 20) - 10, rr[0], 0, 11, 0, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.conn[0]->PostWrite(*mr[0], 0, rr[0], SIZE_MAX - 5, 10, 0, 0).code(), StatusCode::kInvalidArgument);
  uint8_t big[kMaxMessageBytes + 1] = {};
  EXPECT_EQ(p.conn[0]->PostMessage(big, sizeof(big)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.conn[0]->max_outstanding(), 128u);

  const size_t sizes[] = {0, 1, 7, 4096, 200 << 10, (512 << 10) + 3};
  for (int r = 0; r < 2; ++r) {
    auto* s = static_cast<uint8_t*>(src[r]->data());
    size_t off = 0;
    for (size_t k = 0; k < 6; ++k) {
      Fill(s + off, sizes[k], Seed(r, 1 - r, k));
      ASSERT_TRUE(p.conn[r]->PostWrite(*src[r], off, rr[r], off, sizes[k], 0xF0000000u + k, 100 + k).ok());
      uint8_t msg[kMaxMessageBytes];
      Fill(msg, k * 10, Seed(r, 1 - r, 1000 + k));
      ASSERT_TRUE(p.conn[r]->PostMessage(msg, k * 10).ok());
      off += sizes[k] + 4096;
    }
  }
  const auto deadline = Clock::now() + kTimeout;
  for (int r = 0; r < 2; ++r) {
    std::vector<Completion> got;
    // 6 kWriteDone + 6 kWriteReceived + 6 kMessage (the peer's); the peer
    // must progress too for its writes' completions, so alternate.
    while (got.size() < 18 && Clock::now() < deadline) {
      Completion buf[8];
      auto n = p.conn[r]->Progress(buf, 8);
      ASSERT_TRUE(n.ok()) << n.status().ToString();
      got.insert(got.end(), buf, buf + *n);
      auto m = p.conn[1 - r]->Progress(buf, 0);  // moves the peer's queue, keeps its completions
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      if (*n == 0) p.be[r]->WaitForActivity(std::chrono::microseconds(500));
    }
    ASSERT_EQ(got.size(), 18u);
    // Expected from the peer: write 0, message 0, write 1, message 1, ...
    size_t done = 0, writes = 0, msgs = 0;
    const auto* d = static_cast<const uint8_t*>(mr[r]->data());
    for (const Completion& c : got) {
      if (c.kind == Completion::Kind::kWriteDone) {
        EXPECT_EQ(c.wr_id, 100 + done++);
      } else if (c.kind == Completion::Kind::kWriteReceived) {
        ASSERT_EQ(writes, msgs) << "a write overtook a message";
        EXPECT_EQ(c.imm, 0xF0000000u + writes) << "write order";
        size_t off = 0;
        for (size_t k = 0; k < writes; ++k) off += sizes[k] + 4096;
        EXPECT_EQ(FirstWrong(d + off, sizes[writes], Seed(1 - r, r, writes)), sizes[writes]) << "write " << writes;
        ++writes;
      } else {
        ASSERT_EQ(msgs + 1, writes) << "a message overtook its write";
        EXPECT_EQ(c.len, msgs * 10);
        EXPECT_EQ(FirstWrong(c.data, c.len, Seed(1 - r, r, 1000 + msgs)), c.len);
        ++msgs;
      }
    }
    EXPECT_EQ(done, 6u);
  }

  // WaitForActivity wakes up when a message arrives.
  std::thread sender([&] {
    std::this_thread::sleep_for(milliseconds(300));
    uint32_t v = 42;
    EXPECT_TRUE(p.conn[1]->PostMessage(&v, sizeof(v)).ok());
    Completion buf[4];
    (void)p.conn[1]->Progress(buf, 4);
  });
  Completion buf[4];
  ASSERT_TRUE(p.conn[0]->Progress(buf, 4).ok());
  const auto start = Clock::now();
  p.be[0]->WaitForActivity(std::chrono::microseconds(10000000));
  const auto slept = Clock::now() - start;
  sender.join();
  EXPECT_LT(slept, milliseconds(8000)) << "WaitForActivity slept through a message";
  std::vector<Completion> got;
  ASSERT_TRUE(Collect(*p.be[0], *p.conn[0], &got, 1, Clock::now() + kTimeout).ok());
  EXPECT_EQ(got[0].kind, Completion::Kind::kMessage);
}

// ---------------------------------------------------------------------------
// Forked ranks.

// Every rank writes `sizes` to every other rank (each followed by a
// message), all posted before any completion is awaited; receivers check the
// order write k, message k, write k+1, ... and every byte; senders check
// kWriteDone in wr_id order.
Status Exchange(int rank, int n, Store& store, int qps, const std::vector<size_t>& sizes, const std::string& job) {
  CIUIC_ASSIGN_OR_RETURN(auto be, OpenBackend(BackendKind::kVerbs, Options(rank, n, job, qps)));
  std::vector<size_t> offsets;
  size_t total = 0;
  for (size_t s : sizes) {
    offsets.push_back(total + 3);  // deliberately unaligned
    total += s + 64;
  }
  std::vector<std::unique_ptr<Connection>> conns(n);
  std::vector<std::unique_ptr<MemoryRegion>> src(n), inbox(n);
  std::vector<RemoteRegion> remote(n);
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    CIUIC_ASSIGN_OR_RETURN(conns[p], ConnectThroughStore(*be, store, "x", rank, p, 1, kTimeout));
    CIUIC_ASSIGN_OR_RETURN(inbox[p], be->Allocate(total));
    CIUIC_ASSIGN_OR_RETURN(src[p], be->Allocate(total));
    CIUIC_RETURN_IF_ERROR(store.Set("inbox/" + std::to_string(rank) + "-" + std::to_string(p), inbox[p]->Describe()));
    auto* s = static_cast<uint8_t*>(src[p]->data());
    for (size_t k = 0; k < sizes.size(); ++k) Fill(s + offsets[k], sizes[k], Seed(rank, p, k));
  }
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    CIUIC_ASSIGN_OR_RETURN(std::string blob, store.Get("inbox/" + std::to_string(p) + "-" + std::to_string(rank), kTimeout));
    CIUIC_ASSIGN_OR_RETURN(remote[p], conns[p]->ImportRegion(blob));
  }
  const auto deadline = Clock::now() + milliseconds(90000);
  std::vector<size_t> posted(n, 0), done(n, 0), received(n, 0), messages(n, 0);
  std::vector<bool> msg_posted(n, false);
  auto progress_all = [&]() -> StatusOr<bool> {
    bool any = false;
    for (int p = 0; p < n; ++p) {
      if (p == rank) continue;
      // Post what fits: write k, then message k.
      while (posted[p] < sizes.size()) {
        const size_t k = posted[p];
        if (!msg_posted[p]) {
          Status st = conns[p]->PostWrite(*src[p], offsets[k], remote[p], offsets[k], sizes[k],
                                          static_cast<uint32_t>(0xA0000000u + k), k);
          if (st.code() == StatusCode::kResourceExhausted) break;
          CIUIC_RETURN_IF_ERROR(st);
          msg_posted[p] = true;
        }
        const uint64_t tagged = (static_cast<uint64_t>(rank) << 32) | k;
        Status st = conns[p]->PostMessage(&tagged, sizeof(tagged));
        if (st.code() == StatusCode::kResourceExhausted) break;
        CIUIC_RETURN_IF_ERROR(st);
        msg_posted[p] = false;
        ++posted[p];
        any = true;
      }
      Completion buf[16];
      CIUIC_ASSIGN_OR_RETURN(size_t m, conns[p]->Progress(buf, 16));
      any = any || m > 0;
      for (size_t i = 0; i < m; ++i) {
        const Completion& c = buf[i];
        const std::string from = " (rank " + std::to_string(p) + ")";
        switch (c.kind) {
          case Completion::Kind::kWriteDone:
            if (c.wr_id != done[p]) return InternalError("kWriteDone " + std::to_string(c.wr_id) + " out of order" + from);
            ++done[p];
            break;
          case Completion::Kind::kWriteReceived: {
            const size_t k = received[p];
            if (k >= sizes.size() || messages[p] != k || c.imm != 0xA0000000u + k) {
              return InternalError("write with imm " + std::to_string(c.imm) + " out of order" + from);
            }
            const auto* d = static_cast<const uint8_t*>(inbox[p]->data());
            const size_t bad = FirstWrong(d + offsets[k], sizes[k], Seed(p, rank, k));
            if (bad != sizes[k]) {
              return DataLossError("byte " + std::to_string(bad) + " of the " + std::to_string(sizes[k]) +
                                   "-byte write" + from + " is wrong");
            }
            ++received[p];
            break;
          }
          case Completion::Kind::kMessage: {
            uint64_t v = 0;
            if (c.len != sizeof(v)) return DataLossError("message of " + std::to_string(c.len) + " bytes" + from);
            std::memcpy(&v, c.data, sizeof(v));
            const uint64_t want = (static_cast<uint64_t>(p) << 32) | messages[p];
            if (v != want || received[p] != messages[p] + 1) return InternalError("message out of order" + from);
            ++messages[p];
            break;
          }
        }
      }
    }
    return any;
  };
  auto finished = [&] {
    for (int p = 0; p < n; ++p) {
      if (p != rank && (done[p] < sizes.size() || messages[p] < sizes.size())) return false;
    }
    return true;
  };
  CIUIC_RETURN_IF_ERROR(WaitFor(*be, progress_all, finished, deadline, "the exchange"));
  // Nobody tears down before everyone has verified.
  CIUIC_RETURN_IF_ERROR(store.Add("verified", 1).status());
  return WaitFor(
      *be, progress_all,
      [&] {
        auto v = store.Add("verified", 0);
        return v.ok() && *v >= n;
      },
      deadline, "the other ranks to verify");
}

struct ExchangeCase {
  int ranks;
  int qps;
};

class VerbsExchange : public ::testing::TestWithParam<ExchangeCase> {};

TEST_P(VerbsExchange, AllSizesVerified) {
  SKIP_WITHOUT_VERBS();
  const ExchangeCase c = GetParam();
  std::vector<size_t> sizes = {0, 1, 7, 4096, (1u << 20) + 3};
  if (c.ranks == 2) sizes.push_back(16u << 20);
  const std::string job = JobId();
  auto results = RunRanks(c.ranks, [&](int rank, Store& store) {
    return Exchange(rank, c.ranks, store, c.qps, sizes, job);
  }, milliseconds(110000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

INSTANTIATE_TEST_SUITE_P(RanksAndQps, VerbsExchange,
                         ::testing::Values(ExchangeCase{2, 1}, ExchangeCase{2, 3}, ExchangeCase{3, 1},
                                           ExchangeCase{3, 3}),
                         [](const ::testing::TestParamInfo<ExchangeCase>& info) {
                           return std::to_string(info.param.ranks) + "ranks_" + std::to_string(info.param.qps) +
                                  "qps";
                         });

// Many operations of mixed kinds and sizes (striped and not) posted as fast
// as the connection takes them: the receiver sees them in posting order, the
// sender its kWriteDone in order, and every write's bytes have landed when
// its kWriteReceived is seen.
TEST(VerbsBackend, OrderingUnderLoadWithStriping) {
  SKIP_WITHOUT_VERBS();
  constexpr int kItems = 400;
  constexpr size_t kSlot = 200u << 10;
  const std::string job = JobId();
  auto size_of = [](int i) -> size_t {
    switch (i % 5) {
      case 0: return 8;
      case 1: return 0;
      case 2: return (70u << 10) + i;   // striped, uneven (< 3 x 64 KiB)
      case 3: return kSlot - (i % 7);   // striped, balanced
      default: return 0;                // a message
    }
  };
  auto results = RunRanks(2, [&](int rank, Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto be, OpenBackend(BackendKind::kVerbs, Options(rank, 2, job, 3)));
    CIUIC_ASSIGN_OR_RETURN(auto conn, ConnectThroughStore(*be, store, "o", rank, 1 - rank, 0, kTimeout));
    constexpr size_t kRing = 16;  // distinct slots: a slot is rewritten only after it was checked
    CIUIC_ASSIGN_OR_RETURN(auto mr, be->Allocate(kRing * kSlot));
    CIUIC_RETURN_IF_ERROR(store.Set("mr" + std::to_string(rank), mr->Describe()));
    CIUIC_ASSIGN_OR_RETURN(std::string blob, store.Get("mr" + std::to_string(1 - rank), kTimeout));
    CIUIC_ASSIGN_OR_RETURN(RemoteRegion rr, conn->ImportRegion(blob));
    const auto deadline = Clock::now() + milliseconds(90000);
    if (rank == 0) {
      // The source of item i is slot i % kRing; it is refilled only after
      // its previous write is done and the receiver released the slot
      // (credit messages keep at most kRing items in flight).
      auto* s = static_cast<uint8_t*>(mr->data());
      int posted = 0, done = 0, credit = 0;
      int writes_posted = 0;
      std::vector<int> write_item;  // wr_id -> item
      bool full_seen = false;
      while (done < writes_posted || posted < kItems) {
        // Slot i % kRing was last written by item i - kRing; 16 items hold
        // at least 12 writes, so with fewer than 12 writes in flight that
        // one is done (writes complete in order).
        if (posted < kItems && posted < credit + static_cast<int>(kRing) &&
            (posted % 5 == 4 || writes_posted - done < 12)) {
          const int i = posted;
          Status st;
          if (i % 5 == 4) {
            const uint32_t v = static_cast<uint32_t>(i);
            st = conn->PostMessage(&v, sizeof(v));
          } else {
            const size_t slot = (i % kRing) * kSlot;
            Fill(s + slot, size_of(i), Seed(0, 1, i));
            st = conn->PostWrite(*mr, slot, rr, slot, size_of(i), static_cast<uint32_t>(i), writes_posted);
          }
          if (st.ok()) {
            if (i % 5 != 4) {
              write_item.push_back(i);
              ++writes_posted;
            }
            ++posted;
            continue;
          }
          if (st.code() != StatusCode::kResourceExhausted) return st;
          full_seen = true;
        }
        Completion buf[32];
        CIUIC_ASSIGN_OR_RETURN(size_t n, conn->Progress(buf, 32));
        for (size_t k = 0; k < n; ++k) {
          if (buf[k].kind == Completion::Kind::kWriteDone) {
            if (buf[k].wr_id != static_cast<uint64_t>(done)) return InternalError("kWriteDone out of order");
            ++done;
          } else if (buf[k].kind == Completion::Kind::kMessage) {
            std::memcpy(&credit, buf[k].data, sizeof(credit));
          }
        }
        if (n == 0) be->WaitForActivity(std::chrono::microseconds(500));
        if (Clock::now() > deadline) return DeadlineExceededError("sender: " + std::to_string(done) + " done");
      }
      (void)full_seen;
      return store.Get("receiver-done", kTimeout).status();
    }
    const auto* d = static_cast<const uint8_t*>(mr->data());
    int seen = 0;
    while (seen < kItems) {
      Completion buf[32];
      CIUIC_ASSIGN_OR_RETURN(size_t n, conn->Progress(buf, 32));
      for (size_t k = 0; k < n; ++k) {
        const Completion& c = buf[k];
        const int i = seen;
        if (i % 5 == 4) {
          uint32_t v = 0;
          std::memcpy(&v, c.data, sizeof(v));
          if (c.kind != Completion::Kind::kMessage || c.len != 4 || v != static_cast<uint32_t>(i)) {
            return InternalError("item " + std::to_string(i) + ": expected message " + std::to_string(i));
          }
        } else {
          if (c.kind != Completion::Kind::kWriteReceived || c.imm != static_cast<uint32_t>(i)) {
            return InternalError("item " + std::to_string(i) + ": expected the write with imm " + std::to_string(i) +
                                 ", got kind " + std::to_string(static_cast<int>(c.kind)) + " imm " +
                                 std::to_string(c.imm));
          }
          const size_t slot = (i % kRing) * kSlot;
          const size_t bad = FirstWrong(d + slot, size_of(i), Seed(0, 1, i));
          if (bad != size_of(i)) {
            return DataLossError("item " + std::to_string(i) + ": byte " + std::to_string(bad) + " of " +
                                 std::to_string(size_of(i)) + " not landed at kWriteReceived");
          }
        }
        ++seen;
      }
      if (n > 0) {
        const int credit = seen;  // every item up to here is checked
        CIUIC_RETURN_IF_ERROR(conn->PostMessage(&credit, sizeof(credit)));
      } else {
        be->WaitForActivity(std::chrono::microseconds(500));
      }
      if (seen % 97 == 0) std::this_thread::sleep_for(milliseconds(2));  // a slow receiver now and then
      if (Clock::now() > deadline) return DeadlineExceededError("receiver: " + std::to_string(seen) + " seen");
    }
    CIUIC_RETURN_IF_ERROR(store.Set("receiver-done", "1"));
    // Let the last credit messages leave before the connection goes.
    std::vector<Completion> rest;
    (void)Collect(*be, *conn, &rest, 1000000, Clock::now() + milliseconds(200));
    return Status::Ok();
  }, milliseconds(110000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// A peer that exits in the middle: the survivor gets a sticky kUnavailable
// naming it within the (shortened) ACK timeout, whether it was sending to
// the dead peer (its writes time out) or only receiving (the keepalive does).
enum class Dies { kReceiver, kSender };

class VerbsPeerExit : public ::testing::TestWithParam<Dies> {};

TEST_P(VerbsPeerExit, SurvivorGetsAnErrorNamingThePeer) {
  SKIP_WITHOUT_VERBS();
  const Dies dies = GetParam();
  const std::string job = JobId();
  auto results = RunRanks(2, [&](int rank, Store& store) -> Status {
    BackendOptions opt = Options(rank, 2, job, 2);
    opt.config.ib_timeout = 14;  // 67 ms per try: the peer is declared dead in ~0.5 s
    opt.config.ib_retry_cnt = 7;
    CIUIC_ASSIGN_OR_RETURN(auto be, OpenBackend(BackendKind::kVerbs, opt));
    CIUIC_ASSIGN_OR_RETURN(auto conn, ConnectThroughStore(*be, store, "d", rank, 1 - rank, 0, kTimeout));
    CIUIC_ASSIGN_OR_RETURN(auto mr, be->Allocate(1 << 20));
    CIUIC_RETURN_IF_ERROR(store.Set("mr" + std::to_string(rank), mr->Describe()));
    CIUIC_ASSIGN_OR_RETURN(std::string blob, store.Get("mr" + std::to_string(1 - rank), kTimeout));
    CIUIC_ASSIGN_OR_RETURN(RemoteRegion rr, conn->ImportRegion(blob));
    const bool i_die = (rank == 1);
    const bool survivor_sends = dies == Dies::kReceiver;
    std::vector<Completion> got;
    if (i_die) {
      if (survivor_sends) {
        // Take a few writes, then vanish without any cleanup.
        CIUIC_RETURN_IF_ERROR(Collect(*be, *conn, &got, 3, Clock::now() + kTimeout));
      } else {
        for (int k = 0; k < 3; ++k) CIUIC_RETURN_IF_ERROR(conn->PostWrite(*mr, 0, rr, 0, 4096, k, k));
        CIUIC_RETURN_IF_ERROR(Collect(*be, *conn, &got, 3, Clock::now() + kTimeout));
      }
      std::fflush(nullptr);
      _exit(0);
    }
    const auto start = Clock::now();
    Status error;
    size_t received = 0;
    uint64_t next = 0;
    while (Clock::now() - start < milliseconds(30000)) {
      if (survivor_sends) {
        Status st = conn->PostWrite(*mr, 0, rr, (next % 8) * (64 << 10), 64 << 10, 0, next);
        if (st.ok()) {
          ++next;
        } else if (st.code() != StatusCode::kResourceExhausted) {
          error = st;
          break;
        }
      }
      Completion buf[16];
      auto n = conn->Progress(buf, 16);
      if (!n.ok()) {
        error = n.status();
        break;
      }
      for (size_t i = 0; i < *n; ++i) received += buf[i].kind == Completion::Kind::kWriteReceived;
      if (*n == 0 && !survivor_sends) be->WaitForActivity(std::chrono::microseconds(2000));
    }
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
    if (error.ok()) return InternalError("no error within 30 s of the peer's exit");
    if (error.code() != StatusCode::kUnavailable || error.message().find("peer rank 1") == std::string::npos) {
      return InternalError("unexpected error: " + error.ToString());
    }
    if (!survivor_sends && received != 3) return InternalError("received " + std::to_string(received) + " of 3 writes");
    // Sticky: every later call returns the same first error.
    Completion buf[4];
    auto again = conn->Progress(buf, 4);
    if (again.ok() || !(again.status() == error)) return InternalError("the error is not sticky");
    if (!(conn->PostMessage("x", 1) == error)) return InternalError("PostMessage after the error: not the same error");
    std::fprintf(stderr, "survivor saw after %lld ms: %s\n", static_cast<long long>(took.count()),
                 error.ToString().c_str());
    return Status::Ok();
  }, milliseconds(100000));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].ok()) << ResultsText(results);
  EXPECT_TRUE(results[1].ok()) << ResultsText(results);
}

INSTANTIATE_TEST_SUITE_P(WhoDies, VerbsPeerExit, ::testing::Values(Dies::kReceiver, Dies::kSender),
                         [](const ::testing::TestParamInfo<Dies>& info) {
                           return std::string(info.param == Dies::kReceiver ? "Receiver" : "Sender");
                         });

// Async events: the port going down fails every connection of the backend
// with an error naming the peer, although nothing is in flight. Intrusive
// (takes the device's netdev down and up again, as root), so it runs only
// where CIUIC_TEST_VERBS_PORT_FLAP=1 (the Soft-RoCE guest); last in the file
// so the other tests do not see the flap, and it waits for the port to be
// back before it ends.
TEST(VerbsZLast, PortDownFailsEveryConnection) {
  SKIP_WITHOUT_VERBS();
  const char* flap = getenv("CIUIC_TEST_VERBS_PORT_FLAP");
  if (flap == nullptr || std::string(flap) != "1") {
    GTEST_SKIP() << "intrusive: set CIUIC_TEST_VERBS_PORT_FLAP=1 to take the device's netdev down (Soft-RoCE guest)";
  }
  Pair p;
  ASSERT_TRUE(MakePair(&p, JobId(), 0).ok());
  const std::string d = p.be[0]->Describe();  // "verbs <dev>:<port> ..."
  const std::string dev = d.substr(6, d.find(':') - 6);
  const std::string port = d.substr(d.find(':') + 1, d.find(' ', 6) - d.find(':') - 1);
  // The netdev behind the port: any GID entry's ndevs file names it.
  std::string netdev;
  const std::string ndevs = "/sys/class/infiniband/" + dev + "/ports/" + port + "/gid_attrs/ndevs/";
  for (int i = 0; i < 16 && netdev.empty(); ++i) {
    FILE* f = std::fopen((ndevs + std::to_string(i)).c_str(), "r");
    if (f == nullptr) continue;
    char buf[64] = {};
    if (std::fgets(buf, sizeof(buf), f) != nullptr) netdev = buf;
    std::fclose(f);
    while (!netdev.empty() && (netdev.back() == '\n' || netdev.back() == ' ')) netdev.pop_back();
  }
  if (netdev.empty()) GTEST_SKIP() << dev << " port " << port << " has no netdev (InfiniBand?)";
  ASSERT_EQ(std::system(("ip link set " + netdev + " down").c_str()), 0);
  Status err[2];
  const auto until = Clock::now() + milliseconds(15000);
  while ((err[0].ok() || err[1].ok()) && Clock::now() < until) {
    for (int r = 0; r < 2; ++r) {
      Completion buf[4];
      if (!err[r].ok()) continue;
      auto n = p.conn[r]->Progress(buf, 4);
      if (!n.ok()) err[r] = n.status();
    }
    p.be[0]->WaitForActivity(std::chrono::microseconds(5000));
    p.be[1]->WaitForActivity(std::chrono::microseconds(5000));
  }
  ASSERT_EQ(std::system(("ip link set " + netdev + " up").c_str()), 0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(err[r].code(), StatusCode::kUnavailable) << err[r].ToString();
    EXPECT_NE(err[r].message().find("peer rank " + std::to_string(1 - r)), std::string::npos) << err[r].ToString();
    EXPECT_NE(err[r].message().find("async event"), std::string::npos) << err[r].ToString();
  }
  // Back to normal: the port is active again with its GID.
  std::string why;
  const auto back = Clock::now() + milliseconds(20000);
  bool usable = false;
  while (!(usable = VerbsUsable(Options(0, 1, "probe"), &why)) && Clock::now() < back) {
    std::this_thread::sleep_for(milliseconds(100));
  }
  EXPECT_TRUE(usable) << "the port did not come back: " << why;
}

}  // namespace
}  // namespace ciuic::transport
