// White-box tests of the tcp backend: interface selection, the byte
// formats, connection set-up (forged hellos, deadlines, a connection to
// oneself), striping and ordering, frames crafted on a raw socket that must
// be refused with kDataLoss, and peers that exit in the middle of a
// transfer. Multi-rank data tests fork real processes
// (tests/util/multiproc.h); the set-up and crafted-frame tests run two
// backends in one process, which works because the connecting side never
// waits for the accepting one.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"
#include "tests/util/multiproc.h"
#include "transport/backends.h"
#include "transport/tcp/tcp_backend.h"
#include "transport/tcp/tcp_iface.h"
#include "transport/tcp/tcp_wire.h"

namespace ciuic::transport {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::RankResult;
using testing::RunRanks;

constexpr milliseconds kTimeout{20000};

// Every test runs under an alarm, so a hang kills the binary instead of
// stalling the suite.
class TcpBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { alarm(60); }
  void TearDown() override { alarm(0); }
};

std::string JobId() { return "tcp-test-" + std::to_string(getpid()); }

// Every backend here proves this secret in its handshakes; crafted hellos
// and accept proofs use the key derived from it.
const char kSecret[] = "tcp-test-secret";
Digest Key(const std::string& job = JobId()) { return tcp::DataKey(kSecret, job); }

BackendOptions Options(int rank, int n, int nsocks = 1, const std::string& job = JobId()) {
  BackendOptions o;
  o.rank = rank;
  o.world_size = n;
  o.job_id = job;
  o.secret = kSecret;
  o.config.socket_ifname = "lo";
  o.config.socket_nsocks = nsocks;
  return o;
}

std::unique_ptr<Backend> Open(const BackendOptions& o) {
  auto b = OpenBackend(BackendKind::kTcp, o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? std::move(*b) : nullptr;
}

// A plain socket connected to 127.0.0.1:port (the test's stranger or
// crafted peer); -1 when the connect failed.
int ConnectLoopback(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string Results(const std::vector<RankResult>& rs) {
  std::string s;
  for (const auto& r : rs) s += r.Describe() + "\n";
  return s;
}

uint8_t Pattern(int src, int dst, size_t k, size_t i) {
  return static_cast<uint8_t>((i * 131 + k * 17 + src * 7 + dst * 3 + (i >> 11)) & 0xff);
}

// Progresses every connection until `done()` or the deadline; completions
// are appended per connection. Errors: the first Progress error, or
// kDeadlineExceeded.
Status Pump(Backend& be, const std::vector<Connection*>& conns,
            std::vector<std::vector<Completion>>* got, const std::function<bool()>& done,
            milliseconds limit = kTimeout) {
  const auto deadline = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > deadline) return DeadlineExceededError("pump timed out");
    size_t any = 0;
    for (size_t i = 0; i < conns.size(); ++i) {
      Completion buf[16];
      CIUIC_ASSIGN_OR_RETURN(size_t n, conns[i]->Progress(buf, 16));
      (*got)[i].insert((*got)[i].end(), buf, buf + n);
      any += n;
    }
    if (any == 0) be.WaitForActivity(std::chrono::microseconds(200));
  }
  return Status::Ok();
}

size_t Count(const std::vector<Completion>& v, Completion::Kind kind) {
  size_t n = 0;
  for (const auto& c : v) n += c.kind == kind;
  return n;
}

// ------------------------------------------------------------- interfaces

tcp::Interface Itf(const std::string& name, const char* addr, bool up = true, bool lo = false) {
  tcp::Interface i;
  i.name = name;
  i.up = up;
  i.loopback = lo;
  if (std::strchr(addr, ':') != nullptr) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&i.addr);
    in6->sin6_family = AF_INET6;
    inet_pton(AF_INET6, addr, &in6->sin6_addr);
  } else {
    auto* in = reinterpret_cast<sockaddr_in*>(&i.addr);
    in->sin_family = AF_INET;
    inet_pton(AF_INET, addr, &in->sin_addr);
  }
  return i;
}

std::vector<tcp::Interface> FakeInterfaces() {
  return {Itf("lo", "127.0.0.1", true, true), Itf("docker0", "172.17.0.1"),
          Itf("eth0", "10.0.0.5"),           Itf("eth1", "10.1.0.5", false),
          Itf("ib0", "fd00::5"),             Itf("eth10", "10.2.0.5")};
}

std::string Pick(const std::string& spec) {
  auto r = tcp::SelectInterface(spec, FakeInterfaces());
  return r.ok() ? r->name : r.status().ToString();
}

TEST_F(TcpBackendTest, InterfaceSpecs) {
  EXPECT_EQ(Pick(""), "docker0");       // first up, non-loopback, IPv4
  EXPECT_EQ(Pick("eth"), "eth0");       // prefix; eth1 is down
  EXPECT_EQ(Pick("=eth10"), "eth10");   // exact
  EXPECT_EQ(Pick("eth1"), "eth10");     // prefix "eth1": eth1 down, eth10 up
  EXPECT_EQ(Pick("^docker"), "eth0");   // exclude
  EXPECT_EQ(Pick("^=eth0,docker0"), "eth10");
  EXPECT_EQ(Pick("ib"), "ib0");         // IPv6 when nothing else matches
  EXPECT_EQ(Pick("lo"), "lo");
  EXPECT_EQ(Pick("ib,eth0"), "eth0");   // IPv4 first among the matches
  // Only loopback left when everything else is excluded.
  EXPECT_EQ(Pick("^docker,eth,ib"), "lo");

  auto none = tcp::SelectInterface("=eth", FakeInterfaces());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(none.status().message().find("CIUIC_SOCKET_IFNAME"), std::string::npos);
  EXPECT_NE(none.status().message().find("eth0 10.0.0.5"), std::string::npos) << none.status().message();
  EXPECT_NE(none.status().message().find("eth1 10.1.0.5 (down)"), std::string::npos);
  auto down = tcp::SelectInterface("=eth1", FakeInterfaces());
  EXPECT_EQ(down.status().code(), StatusCode::kUnavailable);
  for (const char* bad : {"^", "=", ",", "^=,"}) {
    auto r = tcp::SelectInterface(bad, FakeInterfaces());
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("CIUIC_SOCKET_IFNAME"), std::string::npos);
  }
  auto empty = tcp::SelectInterface("", {});
  EXPECT_EQ(empty.status().code(), StatusCode::kUnavailable);
}

TEST_F(TcpBackendTest, OpenNamesTheKnobs) {
  BackendOptions o = Options(0, 1);
  o.config.socket_ifname = "nosuchif9";
  auto b = OpenBackend(BackendKind::kTcp, o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(b.status().message().find("CIUIC_SOCKET_IFNAME='nosuchif9'"), std::string::npos);
  EXPECT_NE(b.status().message().find("lo 127.0.0.1"), std::string::npos) << b.status().message();
  o.config.socket_ifname = "^";
  EXPECT_EQ(OpenBackend(BackendKind::kTcp, o).status().code(), StatusCode::kInvalidArgument);
  o = Options(0, 1, 17);
  b = OpenBackend(BackendKind::kTcp, o);
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(b.status().message().find("CIUIC_SOCKET_NSOCKS"), std::string::npos);
  // Exact loopback, and the default (whatever this machine has) both open.
  o = Options(0, 1);
  o.config.socket_ifname = "=lo";
  auto lo = OpenBackend(BackendKind::kTcp, o);
  ASSERT_TRUE(lo.ok()) << lo.status().ToString();
  EXPECT_NE((*lo)->Describe().find("lo 127.0.0.1:"), std::string::npos) << (*lo)->Describe();
  o.config.socket_ifname = "";
  EXPECT_TRUE(OpenBackend(BackendKind::kTcp, o).ok());
}

// ------------------------------------------------------------ byte formats

TEST_F(TcpBackendTest, WireRoundTrips) {
  tcp::EndpointInfo e;
  e.rank = 3;
  e.peer = 9;
  e.tag = 0xdeadbeef;
  e.nsocks = 4;
  e.instance = 0x0102030405060708ull;
  for (int i = 0; i < 16; ++i) e.nonce[i] = static_cast<uint8_t>(i * 11);
  e.family = 4;
  e.address = {127, 0, 0, 1};
  e.port = 4242;
  e.job_id = "job";
  const std::string blob = tcp::EncodeEndpoint(e);
  auto d = tcp::DecodeEndpoint(blob);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->rank, 3);
  EXPECT_EQ(d->peer, 9);
  EXPECT_EQ(d->tag, 0xdeadbeefu);
  EXPECT_EQ(d->nsocks, 4);
  EXPECT_EQ(d->instance, e.instance);
  EXPECT_EQ(d->nonce, e.nonce);
  EXPECT_EQ(d->job_id, "job");
  EXPECT_EQ(tcp::EndpointAddress(*d), "127.0.0.1:4242");
  for (size_t cut = 0; cut < blob.size(); ++cut) {
    EXPECT_FALSE(tcp::DecodeEndpoint(blob.substr(0, cut)).ok()) << cut;
  }
  EXPECT_FALSE(tcp::DecodeEndpoint(blob + "x").ok());
  tcp::EndpointInfo bad = e;
  bad.nsocks = 17;
  EXPECT_FALSE(tcp::DecodeEndpoint(tcp::EncodeEndpoint(bad)).ok());

  tcp::RegionInfo r{5, 77, 12, 0xabcdef01, 1ull << 40};
  auto rd = tcp::DecodeRegion(tcp::EncodeRegion(r));
  ASSERT_TRUE(rd.ok());
  EXPECT_EQ(rd->rank, 5);
  EXPECT_EQ(rd->instance, 77u);
  EXPECT_EQ(rd->id, 12u);
  EXPECT_EQ(rd->key, 0xabcdef01u);
  EXPECT_EQ(rd->size, 1ull << 40);
  EXPECT_FALSE(tcp::DecodeRegion(blob).ok());

  tcp::Hello h;
  h.rank = 2;
  h.tag = 5;
  h.socket_index = 3;
  h.nsocks = 4;
  h.acceptor_nonce = e.nonce;
  h.job_id = "job";
  const std::string hb = tcp::EncodeHello(h, Key());
  ASSERT_EQ(hb.size(), tcp::kHelloFixedBytes + 3 + tcp::kMacBytes);
  tcp::Hello h2;
  size_t job_len = 0;
  ASSERT_TRUE(tcp::DecodeHelloFixed(reinterpret_cast<const uint8_t*>(hb.data()), &h2, &job_len).ok());
  EXPECT_EQ(h2.rank, 2);
  EXPECT_EQ(h2.socket_index, 3);
  EXPECT_EQ(h2.acceptor_nonce, e.nonce);
  EXPECT_EQ(job_len, 3u);
  const auto* hp = reinterpret_cast<const uint8_t*>(hb.data());
  EXPECT_TRUE(tcp::HelloMacMatches(Key(), hp, tcp::kHelloFixedBytes + 3));
  EXPECT_FALSE(tcp::HelloMacMatches(Key("other-job"), hp, tcp::kHelloFixedBytes + 3));
  EXPECT_FALSE(tcp::HelloMacMatches(tcp::DataKey("other-secret", JobId()), hp, tcp::kHelloFixedBytes + 3));
  for (size_t i = 0; i < hb.size(); ++i) {  // any flipped bit, in the fields or the MAC
    std::string flipped = hb;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x10);
    EXPECT_FALSE(tcp::HelloMacMatches(Key(), reinterpret_cast<const uint8_t*>(flipped.data()),
                                      tcp::kHelloFixedBytes + 3))
        << i;
  }
  // The accept proof depends on the socket and both nonces.
  const std::string proof = tcp::EncodeAcceptProof(h, Key());
  EXPECT_EQ(proof.size(), tcp::kAcceptProofBytes);
  tcp::Hello other = h;
  other.socket_index = 2;
  EXPECT_NE(tcp::EncodeAcceptProof(other, Key()), proof);
  other = h;
  other.connector_nonce[0] ^= 1;
  EXPECT_NE(tcp::EncodeAcceptProof(other, Key()), proof);
  EXPECT_NE(tcp::EncodeAcceptProof(h, Key("other-job")), proof);
  // The hello of the protocol before the MAC is named as such.
  std::string old = hb;
  old[3] = '1';
  Status st_old = tcp::DecodeHelloFixed(reinterpret_cast<const uint8_t*>(old.data()), &h2, &job_len);
  EXPECT_NE(st_old.message().find("CTH1"), std::string::npos) << st_old.ToString();
  h.socket_index = 4;  // not below nsocks
  const std::string hbad = tcp::EncodeHello(h, Key());
  EXPECT_FALSE(tcp::DecodeHelloFixed(reinterpret_cast<const uint8_t*>(hbad.data()), &h2, &job_len).ok());

  tcp::FrameHeader f;
  f.type = tcp::kFrameWrite;
  f.flags = tcp::kFlagLast;
  f.region_id = 1;
  f.region_key = 2;
  f.length = 3;
  f.offset = 0x123456789aull;
  f.imm = 0xfeedface;
  f.seq = 0xffffffff;
  uint8_t bytes[tcp::kFrameHeaderBytes];
  tcp::EncodeFrameHeader(f, bytes);
  tcp::FrameHeader g;
  ASSERT_TRUE(tcp::DecodeFrameHeader(bytes, &g));
  EXPECT_EQ(g.type, f.type);
  EXPECT_EQ(g.flags, f.flags);
  EXPECT_EQ(g.offset, f.offset);
  EXPECT_EQ(g.imm, f.imm);
  EXPECT_EQ(g.seq, f.seq);
  bytes[0] ^= 1;
  EXPECT_FALSE(tcp::DecodeFrameHeader(bytes, &g));
}

// ------------------------------------------------- two backends, one process

struct Pair {
  std::unique_ptr<Backend> b0, b1;
  std::unique_ptr<Connection> c0, c1;  // c0 on rank 0 towards 1, c1 the reverse
};

Pair MakePair(int nsocks0, int nsocks1, uint32_t tag = 0) {
  Pair p;
  p.b0 = Open(Options(0, 2, nsocks0));
  p.b1 = Open(Options(1, 2, nsocks1));
  if (!p.b0 || !p.b1) return p;
  auto e0 = p.b0->CreateEndpoint(1, tag);
  auto e1 = p.b1->CreateEndpoint(0, tag);
  EXPECT_TRUE(e0.ok() && e1.ok());
  const auto deadline = Clock::now() + kTimeout;
  // Rank 0 connects (returns at once), rank 1 accepts.
  auto c0 = (*e0)->Connect((*e1)->Describe(), deadline);
  EXPECT_TRUE(c0.ok()) << c0.status().ToString();
  auto c1 = (*e1)->Connect((*e0)->Describe(), deadline);
  EXPECT_TRUE(c1.ok()) << c1.status().ToString();
  if (c0.ok()) p.c0 = std::move(*c0);
  if (c1.ok()) p.c1 = std::move(*c1);
  return p;
}

// One round of Progress on every connection (completions appended).
Status ProgressOnce(const std::vector<Connection*>& conns, std::vector<std::vector<Completion>>* got) {
  for (size_t i = 0; i < conns.size(); ++i) {
    Completion buf[16];
    CIUIC_ASSIGN_OR_RETURN(size_t n, conns[i]->Progress(buf, 16));
    (*got)[i].insert((*got)[i].end(), buf, buf + n);
  }
  return Status::Ok();
}

// Writes and messages interleaved, with writes long enough to be striped
// over several sockets: the receiver sees them in posting order, and a
// write's bytes are all in place when its completion is delivered (each
// round writes fresh data into zeroed slots and checks on delivery).
void StripedOrdering(int nsocks) {
  Pair p = MakePair(nsocks, nsocks);
  ASSERT_TRUE(p.c0 && p.c1);
  constexpr size_t kBig = (3u << 19) + 5;  // 1.5 MiB + 5: 4 pieces
  constexpr int kGroups = 8;               // per round: big write, message, empty write, 7 B write
  constexpr size_t kSmallAt = kGroups * kBig;
  constexpr size_t kBytes = kSmallAt + kGroups * 8;
  auto src = p.b0->Allocate(kBytes);
  auto dst = p.b1->Allocate(kBytes);
  ASSERT_TRUE(src.ok() && dst.ok());
  auto rr = p.c0->ImportRegion((*dst)->Describe());
  ASSERT_TRUE(rr.ok()) << rr.status().ToString();
  auto* s = static_cast<uint8_t*>((*src)->data());
  auto* d = static_cast<uint8_t*>((*dst)->data());
  std::mt19937 rng(1234);
  std::vector<std::vector<Completion>> got(2);
  const std::vector<Connection*> both = {p.c0.get(), p.c1.get()};
  uint32_t id = 0;
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < kBytes; ++i) s[i] = static_cast<uint8_t>(rng());
    std::memset(d, 0, kBytes);
    got[0].clear();
    got[1].clear();
    const uint32_t first = id;
    for (int g = 0; g < kGroups; ++g) {
      for (int kind = 0; kind < 4; ++kind, ++id) {
        Status st;
        for (;;) {
          const size_t small = kSmallAt + g * 8;
          if (kind == 0) st = p.c0->PostWrite(**src, g * kBig, *rr, g * kBig, kBig, id, id);
          if (kind == 1) st = p.c0->PostMessage(&id, sizeof(id));
          if (kind == 2) st = p.c0->PostWrite(**src, 0, *rr, kBytes, 0, id, id);
          if (kind == 3) st = p.c0->PostWrite(**src, small, *rr, small, 7, id, id);
          if (st.code() != StatusCode::kResourceExhausted) break;
          ASSERT_TRUE(ProgressOnce(both, &got).ok());
        }
        ASSERT_TRUE(st.ok()) << st.ToString();
      }
    }
    // Check each completion as soon as it is delivered.
    size_t checked = 0;
    std::string failure;
    Status st = Pump(*p.b1, both, &got, [&] {
      for (; checked < got[1].size() && failure.empty(); ++checked) {
        const Completion& c = got[1][checked];
        const uint32_t want = first + static_cast<uint32_t>(checked);
        const int kind = static_cast<int>(checked % 4);
        const size_t g = checked / 4;
        if (kind == 1) {
          uint32_t v = 0;
          std::memcpy(&v, c.data, 4);
          if (c.kind != Completion::Kind::kMessage || c.len != 4 || v != want) {
            failure = "item " + std::to_string(want) + " is not its message";
          }
          continue;
        }
        const uint32_t want_len = kind == 0 ? kBig : kind == 2 ? 0 : 7;
        if (c.kind != Completion::Kind::kWriteReceived || c.imm != want || c.len != want_len) {
          failure = "item " + std::to_string(want) + " is not its write";
        } else if (kind == 0 && std::memcmp(d + g * kBig, s + g * kBig, kBig) != 0) {
          failure = "big write " + std::to_string(want) + " delivered before all its bytes";
        } else if (kind == 3 && std::memcmp(d + kSmallAt + g * 8, s + kSmallAt + g * 8, 7) != 0) {
          failure = "small write " + std::to_string(want);
        }
      }
      return !failure.empty() || (got[1].size() == kGroups * 4 &&
                                  Count(got[0], Completion::Kind::kWriteDone) == kGroups * 3);
    });
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_EQ(failure, "");
    // kWriteDone in posting order.
    uint64_t next = first;
    for (const auto& c : got[0]) {
      ASSERT_EQ(c.kind, Completion::Kind::kWriteDone);
      if (next % 4 == 1) ++next;  // messages have none
      EXPECT_EQ(c.wr_id, next);
      ++next;
    }
  }
}

TEST_F(TcpBackendTest, StripedOrderingOneSocket) { StripedOrdering(1); }
TEST_F(TcpBackendTest, StripedOrderingFourSockets) { StripedOrdering(4); }

TEST_F(TcpBackendTest, SocketCountIsTheSmallerOfTheTwo) {
  Pair p = MakePair(4, 2);
  ASSERT_TRUE(p.c0 && p.c1);
  auto src = p.b1->Allocate(3 << 20);
  auto dst = p.b0->Allocate(3 << 20);
  ASSERT_TRUE(src.ok() && dst.ok());
  std::memset((*src)->data(), 0x5a, 3 << 20);
  auto rr = p.c1->ImportRegion((*dst)->Describe());
  ASSERT_TRUE(rr.ok());
  ASSERT_TRUE(p.c1->PostWrite(**src, 0, *rr, 0, 3 << 20, 9, 1).ok());
  std::vector<std::vector<Completion>> got(2);
  ASSERT_TRUE(Pump(*p.b0, {p.c0.get(), p.c1.get()}, &got,
                   [&] { return Count(got[0], Completion::Kind::kWriteReceived) == 1; })
                  .ok());
  EXPECT_EQ(got[0][0].imm, 9u);
  EXPECT_EQ(static_cast<uint8_t*>((*dst)->data())[(3 << 20) - 1], 0x5a);
}

TEST_F(TcpBackendTest, ConnectionToItself) {
  auto b = Open(Options(0, 1, 2));
  ASSERT_TRUE(b);
  auto e = b->CreateEndpoint(0, 1);
  ASSERT_TRUE(e.ok());
  auto c = (*e)->Connect((*e)->Describe(), Clock::now() + kTimeout);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto mr = b->Allocate(2 << 20);
  ASSERT_TRUE(mr.ok());
  auto* m = static_cast<uint8_t*>((*mr)->data());
  for (size_t i = 0; i < (1u << 20); ++i) m[i] = Pattern(0, 0, 0, i);
  auto rr = (*c)->ImportRegion((*mr)->Describe());
  ASSERT_TRUE(rr.ok());
  ASSERT_TRUE((*c)->PostWrite(**mr, 0, *rr, 1 << 20, 1 << 20, 42, 7).ok());
  std::vector<std::vector<Completion>> got(1);
  ASSERT_TRUE(Pump(*b, {c->get()}, &got, [&] { return got[0].size() == 2; }).ok());
  EXPECT_EQ(Count(got[0], Completion::Kind::kWriteDone), 1u);
  EXPECT_EQ(Count(got[0], Completion::Kind::kWriteReceived), 1u);
  EXPECT_EQ(std::memcmp(m, m + (1 << 20), 1 << 20), 0);
}

TEST_F(TcpBackendTest, ForgedHellosAreRejectedAndTheRealPeerConnects) {
  auto b0 = Open(Options(0, 2));
  auto b1 = Open(Options(1, 2));
  ASSERT_TRUE(b0 && b1);
  auto e0 = b0->CreateEndpoint(1, 0);
  auto e1 = b1->CreateEndpoint(0, 0);
  ASSERT_TRUE(e0.ok() && e1.ok());
  auto info1 = tcp::DecodeEndpoint((*e1)->Describe());
  auto info0 = tcp::DecodeEndpoint((*e0)->Describe());
  ASSERT_TRUE(info1.ok() && info0.ok());
  auto raw_connect = [&](const std::string& bytes) {
    const int fd = ConnectLoopback(info1->port);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
    return fd;
  };
  tcp::Hello good;
  good.rank = 0;
  good.tag = 0;
  good.socket_index = 0;
  good.nsocks = 1;
  good.acceptor_nonce = info1->nonce;
  good.connector_nonce = info0->nonce;
  good.job_id = JobId();
  std::vector<int> strangers;
  tcp::Hello h = good;
  h.acceptor_nonce[3] ^= 0x40;  // a guessed nonce
  strangers.push_back(raw_connect(tcp::EncodeHello(h, Key())));
  strangers.push_back(raw_connect(std::string(100, 'G')));  // not a hello at all
  h = good;
  h.job_id = "another-job";
  strangers.push_back(raw_connect(tcp::EncodeHello(h, Key())));
  h = good;
  h.tag = 1;  // right nonce, wrong endpoint
  strangers.push_back(raw_connect(tcp::EncodeHello(h, Key())));
  h = good;
  h.connector_nonce[0] ^= 1;  // knows the acceptor's nonce, is not rank 0's endpoint
  strangers.push_back(raw_connect(tcp::EncodeHello(h, Key())));
  // Knows both nonces (read from the store or the wire) but not the secret:
  // its hello would otherwise take the real peer's socket slot.
  strangers.push_back(raw_connect(tcp::EncodeHello(good, tcp::DataKey("a guess", JobId()))));
  // A valid-looking header with absurd lengths: the job id length is
  // refused before anything is read or allocated for it.
  std::string absurd = tcp::EncodeHello(good, Key()).substr(0, tcp::kHelloFixedBytes);
  absurd[tcp::kHelloFixedBytes - 2] = absurd[tcp::kHelloFixedBytes - 1] = '\xff';
  strangers.push_back(raw_connect(absurd));
  // A frame header claiming 4 GiB instead of a hello.
  {
    tcp::FrameHeader f;
    f.type = tcp::kFrameWrite;
    f.length = 0xffffffffu;
    uint8_t fb[tcp::kFrameHeaderBytes + 22];
    tcp::EncodeFrameHeader(f, fb);
    std::memset(fb + tcp::kFrameHeaderBytes, 0, 22);
    strangers.push_back(raw_connect(std::string(reinterpret_cast<char*>(fb), sizeof(fb))));
  }
  // Silent: connects and sends nothing; it must not hold up the real peer.
  const int silent = raw_connect(std::string());

  const auto deadline = Clock::now() + kTimeout;
  auto c0 = (*e0)->Connect((*e1)->Describe(), deadline);
  ASSERT_TRUE(c0.ok()) << c0.status().ToString();
  auto c1 = (*e1)->Connect((*e0)->Describe(), deadline);
  ASSERT_TRUE(c1.ok()) << c1.status().ToString();
  // Every stranger was closed by the acceptor, without a byte of reply.
  for (int fd : strangers) {
    pollfd pfd{fd, POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 5000), 1);
    char c;
    EXPECT_LE(recv(fd, &c, 1, 0), 0);
    close(fd);
  }
  // The real connector's socket got the acceptor's proof and nothing else:
  // c0 reads it before any frame (below).
  close(silent);
  // The real connection works both ways.
  const uint32_t v = 77;
  ASSERT_TRUE((*c0)->PostMessage(&v, 4).ok());
  ASSERT_TRUE((*c1)->PostMessage(&v, 4).ok());
  std::vector<std::vector<Completion>> got(2);
  ASSERT_TRUE(Pump(*b1, {c0->get(), c1->get()}, &got,
                   [&] { return got[0].size() == 1 && got[1].size() == 1; })
                  .ok());
  EXPECT_EQ(got[0][0].kind, Completion::Kind::kMessage);
  EXPECT_EQ(got[1][0].len, 4u);
}

TEST_F(TcpBackendTest, ConnectDeadlinesAndRefusals) {
  auto b1 = Open(Options(1, 2));
  ASSERT_TRUE(b1);
  auto e1 = b1->CreateEndpoint(0, 0);
  ASSERT_TRUE(e1.ok());
  std::string blob0;
  {
    auto b0 = Open(Options(0, 2));
    ASSERT_TRUE(b0);
    auto e0 = b0->CreateEndpoint(1, 0);
    ASSERT_TRUE(e0.ok());
    blob0 = (*e0)->Describe();
  }  // rank 0 is gone: its port refuses, and it never connects to us
  const auto t0 = Clock::now();
  auto c1 = (*e1)->Connect(blob0, t0 + milliseconds(300));
  ASSERT_FALSE(c1.ok());
  EXPECT_EQ(c1.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(c1.status().message().find("rank 0"), std::string::npos) << c1.status().message();
  EXPECT_GE(Clock::now() - t0, milliseconds(300));
  EXPECT_LT(Clock::now() - t0, milliseconds(3000));

  // The other way round: rank 0 connecting to a rank 1 that is gone.
  auto b0 = Open(Options(0, 2));
  auto e0 = b0->CreateEndpoint(1, 0);
  ASSERT_TRUE(e0.ok());
  std::string blob1;
  {
    auto gone = Open(Options(1, 2));
    auto e = gone->CreateEndpoint(0, 0);
    ASSERT_TRUE(e.ok());
    blob1 = (*e)->Describe();
  }
  auto c0 = (*e0)->Connect(blob1, Clock::now() + milliseconds(2000));
  ASSERT_FALSE(c0.ok());
  EXPECT_EQ(c0.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c0.status().message().find("rank 1"), std::string::npos) << c0.status().message();

  // Descriptions that do not fit are refused before any socket is opened.
  auto e0b = b0->CreateEndpoint(1, 0);
  ASSERT_TRUE(e0b.ok());
  EXPECT_EQ((*e0b)->Connect("junk", Clock::now()).status().code(), StatusCode::kInvalidArgument);
  auto other_job = Open(Options(1, 2, 1, "some-other-job"));
  auto ej = other_job->CreateEndpoint(0, 0);
  ASSERT_TRUE(ej.ok());
  auto cj = (*e0b)->Connect((*ej)->Describe(), Clock::now() + kTimeout);
  EXPECT_EQ(cj.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(cj.status().message().find("some-other-job"), std::string::npos);
  auto e_tag = b1->CreateEndpoint(0, 5);
  ASSERT_TRUE(e_tag.ok());
  EXPECT_EQ((*e0b)->Connect((*e_tag)->Describe(), Clock::now()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(b0->CreateEndpoint(2, 0).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TcpBackendTest, RegionsAndLimits) {
  Pair p = MakePair(1, 1);
  ASSERT_TRUE(p.c0 && p.c1);
  EXPECT_EQ(p.b0->Allocate(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.b0->Register(nullptr, 8).status().code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> mine(4096, 1);
  auto reg = p.b0->Register(mine.data(), mine.size());
  ASSERT_TRUE(reg.ok());
  EXPECT_EQ((*reg)->data(), mine.data());
  // Pool memory is usable at once and zeroed.
  auto pool = p.b1->Allocate(3 << 20);
  ASSERT_TRUE(pool.ok());
  EXPECT_EQ((*pool)->size(), 3u << 20);
  EXPECT_EQ(static_cast<uint8_t*>((*pool)->data())[(3 << 20) - 1], 0);
  // Rank 1's connection to rank 0 takes only rank 0's region descriptions.
  EXPECT_EQ(p.c1->ImportRegion((*pool)->Describe()).status().code(), StatusCode::kInvalidArgument);
  auto rr = p.c0->ImportRegion((*pool)->Describe());
  ASSERT_TRUE(rr.ok());
  EXPECT_EQ(rr->size, 3u << 20);
  EXPECT_EQ(p.c0->PostWrite(**reg, 0, RemoteRegion{rr->id + 1, 10}, 0, 1, 0, 0).code(),
            StatusCode::kInvalidArgument);
  // max_outstanding writes, then kResourceExhausted until progress.
  size_t posted = 0;
  Status st;
  while ((st = p.c0->PostWrite(**reg, 0, *rr, 0, 16, 0, posted)).ok()) ++posted;
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(posted, p.c0->max_outstanding());
  size_t msgs = 0;
  while ((st = p.c0->PostMessage("x", 1)).ok()) ++msgs;
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_GT(msgs, 0u);
  std::vector<std::vector<Completion>> got(2);
  ASSERT_TRUE(Pump(*p.b1, {p.c0.get(), p.c1.get()}, &got,
                   [&] { return got[1].size() == posted + msgs; })
                  .ok());
  EXPECT_TRUE(p.c0->PostWrite(**reg, 0, *rr, 0, 16, 0, 0).ok());
}

// A region described, deregistered and its id reused: a write aimed at the
// old description is refused by the receiver (stale key).
TEST_F(TcpBackendTest, StaleRegionIsDataLoss) {
  Pair p = MakePair(1, 1);
  ASSERT_TRUE(p.c0 && p.c1);
  auto src = p.b0->Allocate(4096);
  ASSERT_TRUE(src.ok());
  std::string old_blob;
  {
    auto old = p.b1->Allocate(4096);
    ASSERT_TRUE(old.ok());
    old_blob = (*old)->Describe();
  }
  auto fresh = p.b1->Allocate(4096);  // takes the same id
  ASSERT_TRUE(fresh.ok());
  auto rr = p.c0->ImportRegion(old_blob);
  ASSERT_TRUE(rr.ok());
  ASSERT_TRUE(p.c0->PostWrite(**src, 0, *rr, 0, 8, 1, 1).ok());
  std::vector<std::vector<Completion>> got(2);
  Status st = Pump(*p.b1, {p.c0.get(), p.c1.get()}, &got, [] { return false; }, milliseconds(5000));
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("stale"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.message();
}

// ------------------------------------------------------- crafted frames

// Rank 1's backend with a connection whose peer "rank 0" is a raw socket in
// the test, which knows rank 1's nonce from its description.
struct Crafted {
  std::unique_ptr<Backend> b1;
  std::unique_ptr<Connection> c1;
  std::unique_ptr<MemoryRegion> region;
  tcp::RegionInfo info;
  int raw = -1;
  ~Crafted() {
    if (raw >= 0) close(raw);
  }
  void Send(const tcp::FrameHeader& h, const std::string& payload = "") {
    uint8_t bytes[tcp::kFrameHeaderBytes];
    tcp::EncodeFrameHeader(h, bytes);
    std::string all(reinterpret_cast<char*>(bytes), sizeof(bytes));
    all += payload;
    ASSERT_EQ(send(raw, all.data(), all.size(), MSG_NOSIGNAL), static_cast<ssize_t>(all.size()));
  }
  tcp::FrameHeader Write(uint64_t offset, uint32_t len, uint32_t seq) const {
    tcp::FrameHeader h;
    h.type = tcp::kFrameWrite;
    h.flags = tcp::kFlagLast;
    h.region_id = info.id;
    h.region_key = info.key;
    h.offset = offset;
    h.length = len;
    h.imm = 1000 + seq;
    h.seq = seq;
    return h;
  }
  // Progresses until an error (returned) or `limit`.
  Status ProgressUntilError(std::vector<Completion>* got, milliseconds limit = milliseconds(5000)) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      Completion buf[8];
      auto n = c1->Progress(buf, 8);
      if (!n.ok()) return n.status();
      got->insert(got->end(), buf, buf + *n);
      b1->WaitForActivity(std::chrono::microseconds(1000));
    }
    return Status::Ok();
  }
};

std::unique_ptr<Crafted> MakeCrafted() {
  auto c = std::make_unique<Crafted>();
  c->b1 = Open(Options(1, 2));
  if (!c->b1) return nullptr;
  auto e1 = c->b1->CreateEndpoint(0, 3);
  EXPECT_TRUE(e1.ok());
  auto info1 = tcp::DecodeEndpoint((*e1)->Describe());
  EXPECT_TRUE(info1.ok());
  tcp::EndpointInfo fake;  // what "rank 0" publishes
  fake.rank = 0;
  fake.peer = 1;
  fake.tag = 3;
  fake.nsocks = 1;
  fake.instance = 99;
  fake.nonce.fill(0x42);
  fake.address = {127, 0, 0, 1};
  fake.port = 9;  // never used: rank 0 is the connecting side
  fake.job_id = JobId();
  c->raw = ConnectLoopback(info1->port);
  EXPECT_GE(c->raw, 0);
  tcp::Hello h;
  h.rank = 0;
  h.tag = 3;
  h.nsocks = 1;
  h.acceptor_nonce = info1->nonce;
  h.connector_nonce = fake.nonce;
  h.job_id = JobId();
  const std::string hello = tcp::EncodeHello(h, Key());
  EXPECT_EQ(send(c->raw, hello.data(), hello.size(), MSG_NOSIGNAL), static_cast<ssize_t>(hello.size()));
  auto conn = (*e1)->Connect(tcp::EncodeEndpoint(fake), Clock::now() + kTimeout);
  EXPECT_TRUE(conn.ok()) << conn.status().ToString();
  if (!conn.ok()) return nullptr;
  c->c1 = std::move(*conn);
  // The acceptor's first bytes: its proof of the secret for this socket.
  std::string proof(tcp::kAcceptProofBytes, '\0');
  EXPECT_EQ(recv(c->raw, proof.data(), proof.size(), MSG_WAITALL), static_cast<ssize_t>(proof.size()));
  EXPECT_EQ(proof, tcp::EncodeAcceptProof(h, Key()));
  auto mr = c->b1->Allocate(4096);
  EXPECT_TRUE(mr.ok());
  c->region = std::move(*mr);
  c->info = *tcp::DecodeRegion(c->region->Describe());
  return c;
}

TEST_F(TcpBackendTest, CraftedValidFramesAreDelivered) {
  auto c = MakeCrafted();
  ASSERT_TRUE(c);
  c->Send(c->Write(10, 5, 0), "hello");
  tcp::FrameHeader m;
  m.type = tcp::kFrameMessage;
  m.flags = tcp::kFlagLast;
  m.length = 3;
  m.seq = 1;
  c->Send(m, "abc");
  // A write of two pieces: only the last one completes it.
  tcp::FrameHeader first = c->Write(100, 2, 2);
  first.flags = 0;
  c->Send(first, "xy");
  c->Send(c->Write(102, 1, 3), "z");
  std::vector<Completion> got;
  const auto deadline = Clock::now() + milliseconds(5000);
  while (got.size() < 3 && Clock::now() < deadline) {
    Completion buf[8];
    auto n = c->c1->Progress(buf, 8);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    got.insert(got.end(), buf, buf + *n);
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].kind, Completion::Kind::kWriteReceived);
  EXPECT_EQ(got[0].imm, 1000u);
  EXPECT_EQ(got[1].kind, Completion::Kind::kMessage);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(got[1].data), got[1].len), "abc");
  EXPECT_EQ(got[0].len, 5u);
  EXPECT_EQ(got[2].imm, 1003u);
  EXPECT_EQ(got[2].len, 3u);
  const char* d = static_cast<const char*>(c->region->data());
  EXPECT_EQ(std::string(d + 10, 5), "hello");
  EXPECT_EQ(std::string(d + 100, 3), "xyz");
}

struct BadFrame {
  const char* name;
  std::function<void(Crafted&)> send;
  const char* says;  // part of the error message
};

class TcpBadFrameTest : public TcpBackendTest, public ::testing::WithParamInterface<int> {};

std::vector<BadFrame> BadFrames() {
  return {
      {"unknown region id", [](Crafted& c) { auto h = c.Write(0, 4, 0); h.region_id = 77; c.Send(h, "abcd"); },
       "region id 77 is not registered"},
      {"region id 0", [](Crafted& c) { auto h = c.Write(0, 4, 0); h.region_id = 0; c.Send(h, "abcd"); },
       "not registered"},
      {"wrong key", [](Crafted& c) { auto h = c.Write(0, 4, 0); h.region_key ^= 1; c.Send(h, "abcd"); },
       "stale key"},
      {"offset past the end", [](Crafted& c) { c.Send(c.Write(4093, 4, 0), "abcd"); }, "outside region"},
      {"offset wraps", [](Crafted& c) { c.Send(c.Write(~uint64_t{0} - 1, 4, 0), "abcd"); }, "outside region"},
      {"oversized piece", [](Crafted& c) { c.Send(c.Write(0, tcp::kPieceBytes + 1, 0)); }, "write piece"},
      {"bad sequence", [](Crafted& c) { c.Send(c.Write(0, 1, 0), "a"); c.Send(c.Write(0, 1, 2), "b"); },
       "sequence 2, expected 1"},
      {"bad magic", [](Crafted& c) { c.Send(c.Write(0, 0, 0)); const char junk[32] = {1}; ASSERT_EQ(send(c.raw, junk, 32, 0), 32); },
       "bad magic"},
      {"unknown type", [](Crafted& c) { auto h = c.Write(0, 0, 0); h.type = 9; c.Send(h); }, "unknown type"},
      {"long message", [](Crafted& c) {
         tcp::FrameHeader m;
         m.type = tcp::kFrameMessage;
         m.flags = tcp::kFlagLast;
         m.length = kMaxMessageBytes + 1;
         c.Send(m, std::string(kMaxMessageBytes + 1, 'm'));
       }, "message of 65 bytes"},
  };
}

TEST_P(TcpBadFrameTest, IsDataLossNamingThePeer) {
  const BadFrame bad = BadFrames()[GetParam()];
  SCOPED_TRACE(bad.name);
  auto c = MakeCrafted();
  ASSERT_TRUE(c);
  bad.send(*c);
  std::vector<Completion> got;
  Status st = c->ProgressUntilError(&got);
  ASSERT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_NE(st.message().find("peer rank 0 (127.0.0.1:9)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(bad.says), std::string::npos) << st.message();
  // Nothing of the bad frame was written.
  const auto* d = static_cast<const uint8_t*>(c->region->data());
  EXPECT_NE(std::string(reinterpret_cast<const char*>(d), 4), "abcd");
  // Sticky, for every call.
  Completion buf[4];
  EXPECT_EQ(c->c1->Progress(buf, 4).status(), st);
  EXPECT_EQ(c->c1->PostMessage("x", 1), st);
  // And the sender's socket was closed.
  pollfd pfd{c->raw, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  char x;
  EXPECT_LE(recv(c->raw, &x, 1, 0), 0);
}

INSTANTIATE_TEST_SUITE_P(Frames, TcpBadFrameTest, ::testing::Range(0, 10),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string n = BadFrames()[info.param].name;
                           for (char& ch : n) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

TEST_F(TcpBackendTest, TruncatedFrameAndCleanCloseAreUnavailable) {
  {
    auto c = MakeCrafted();
    ASSERT_TRUE(c);
    c->Send(c->Write(0, 100, 0), "only part");
    shutdown(c->raw, SHUT_WR);
    std::vector<Completion> got;
    Status st = c->ProgressUntilError(&got);
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_NE(st.message().find("tcp: peer rank 0 (127.0.0.1:9) closed the connection in the middle"),
              std::string::npos)
        << st.message();
  }
  {
    // A goodbye after a message: the message is delivered first.
    auto c = MakeCrafted();
    ASSERT_TRUE(c);
    tcp::FrameHeader m;
    m.type = tcp::kFrameMessage;
    m.flags = tcp::kFlagLast;
    m.length = 1;
    c->Send(m, "q");
    tcp::FrameHeader bye;
    bye.type = tcp::kFrameGoodbye;
    bye.seq = 1;
    c->Send(bye);
    std::vector<Completion> got;
    Status st = c->ProgressUntilError(&got);
    EXPECT_EQ(got.size(), 1u);
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
    EXPECT_NE(st.message().find("closed the connection (it destroyed the connection)"),
              std::string::npos)
        << st.message();
  }
}

// ------------------------------------------------------ forked ranks

// Each pair of ranks writes `sizes` both ways into Allocate()d regions at
// unaligned offsets; receivers check every byte and the posting order.
Status AllPairs(int rank, int n, int nsocks, Store& store, const std::vector<size_t>& sizes) {
  BackendOptions opt = Options(rank, n, nsocks, "pairs-" + std::to_string(getppid()));
  CIUIC_ASSIGN_OR_RETURN(auto be, OpenBackend(BackendKind::kTcp, opt));
  std::vector<size_t> offsets;
  size_t total = 0;
  for (size_t s : sizes) {
    offsets.push_back(total + 5);
    total += s + 64;
  }
  CIUIC_ASSIGN_OR_RETURN(auto src, be->Allocate(total));
  std::vector<std::unique_ptr<Connection>> conns(n);
  std::vector<std::unique_ptr<MemoryRegion>> inbox(n);
  std::vector<RemoteRegion> remote(n);
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    CIUIC_ASSIGN_OR_RETURN(conns[p], ConnectThroughStore(*be, store, "t", rank, p, 0, kTimeout));
    CIUIC_ASSIGN_OR_RETURN(inbox[p], be->Allocate(total));
    CIUIC_RETURN_IF_ERROR(store.Set("in/" + std::to_string(rank) + "-" + std::to_string(p), inbox[p]->Describe()));
  }
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    CIUIC_ASSIGN_OR_RETURN(std::string b, store.Get("in/" + std::to_string(p) + "-" + std::to_string(rank), kTimeout));
    CIUIC_ASSIGN_OR_RETURN(remote[p], conns[p]->ImportRegion(b));
  }
  std::vector<Connection*> all;
  for (auto& c : conns) {
    if (c) all.push_back(c.get());
  }
  std::vector<std::vector<Completion>> got(all.size());
  auto idx = [&](int p) { return static_cast<size_t>(p < rank ? p : p - 1); };
  auto* s = static_cast<uint8_t*>(src->data());
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (size_t i = 0; i < sizes[k]; ++i) s[offsets[k] + i] = Pattern(rank, p, k, i);
    }
    for (size_t k = 0; k < sizes.size(); ++k) {
      CIUIC_RETURN_IF_ERROR(conns[p]->PostWrite(*src, offsets[k], remote[p], offsets[k], sizes[k],
                                                static_cast<uint32_t>(k), k));
    }
    // The source is refilled for the next peer once these writes are done;
    // every connection keeps moving meanwhile.
    CIUIC_RETURN_IF_ERROR(Pump(*be, all, &got, [&] {
      return Count(got[idx(p)], Completion::Kind::kWriteDone) == sizes.size();
    }));
  }
  CIUIC_RETURN_IF_ERROR(Pump(*be, all, &got, [&] {
    for (const auto& g : got) {
      if (Count(g, Completion::Kind::kWriteReceived) < sizes.size()) return false;
    }
    return true;
  }));
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    uint32_t k = 0;
    for (const auto& c : got[idx(p)]) {
      if (c.kind != Completion::Kind::kWriteReceived) continue;
      if (c.len != sizes[k]) return InternalError("kWriteReceived.len " + std::to_string(c.len));
      if (c.imm != k++) return InternalError("imm out of order from rank " + std::to_string(p));
    }
    const auto* d = static_cast<const uint8_t*>(inbox[p]->data());
    for (size_t kk = 0; kk < sizes.size(); ++kk) {
      for (size_t i = 0; i < sizes[kk]; ++i) {
        if (d[offsets[kk] + i] != Pattern(p, rank, kk, i)) {
          return DataLossError("byte " + std::to_string(i) + " of the " + std::to_string(sizes[kk]) +
                               "-byte write from rank " + std::to_string(p));
        }
      }
      // The guard bytes around each write are untouched.
      if (d[offsets[kk] - 1] != 0 || d[offsets[kk] + sizes[kk]] != 0) {
        return DataLossError("write " + std::to_string(kk) + " from rank " + std::to_string(p) +
                             " spilled outside its range");
      }
    }
  }
  // Nobody tears down before everyone has verified.
  CIUIC_RETURN_IF_ERROR(store.Add("verified", 1).status());
  const auto deadline = Clock::now() + kTimeout;
  while (*store.Add("verified", 0) < n) {
    if (Clock::now() > deadline) return DeadlineExceededError("waiting for the others");
    std::this_thread::sleep_for(milliseconds(2));
  }
  return Status::Ok();
}

const std::vector<size_t> kSizes = {0, 1, 7, 4096, (1u << 20) + 3, 64u << 20};

class TcpRanksTest : public TcpBackendTest,
                     public ::testing::WithParamInterface<std::tuple<int, int>> {};

TEST_P(TcpRanksTest, AllSizesVerified) {
  const int n = std::get<0>(GetParam());
  const int nsocks = std::get<1>(GetParam());
  auto rs = RunRanks(n, [&](int rank, Store& store) { return AllPairs(rank, n, nsocks, store, kSizes); },
                     milliseconds(50000));
  for (const auto& r : rs) EXPECT_TRUE(r.ok()) << Results(rs);
}

INSTANTIATE_TEST_SUITE_P(RanksBySockets, TcpRanksTest,
                         ::testing::Combine(::testing::Values(2, 3), ::testing::Values(1, 4)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" +
                                  std::to_string(std::get<1>(info.param)) + "socks";
                         });

// CLOCK_MONOTONIC is shared by the processes of one machine.
int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// Rank 1 _exit()s in the middle of a 256 MiB write (as its sender when
// victim_sends, else as its receiver); rank 0's Progress fails with
// kUnavailable naming rank 1 within a second of the exit.
Status PeerExits(int rank, Store& store, int nsocks, bool victim_sends) {
  BackendOptions opt = Options(rank, 2, nsocks, "exit-" + std::to_string(getppid()));
  CIUIC_ASSIGN_OR_RETURN(auto be, OpenBackend(BackendKind::kTcp, opt));
  CIUIC_ASSIGN_OR_RETURN(auto conn, ConnectThroughStore(*be, store, "x", rank, 1 - rank, 0, kTimeout));
  // More than every socket buffer on the way can hold.
  constexpr size_t kBytes = 256u << 20;
  CIUIC_ASSIGN_OR_RETURN(auto mr, be->Allocate(kBytes));
  CIUIC_RETURN_IF_ERROR(store.Set("mr" + std::to_string(rank), mr->Describe()));
  CIUIC_ASSIGN_OR_RETURN(std::string blob, store.Get("mr" + std::to_string(1 - rank), kTimeout));
  CIUIC_ASSIGN_OR_RETURN(RemoteRegion rr, conn->ImportRegion(blob));
  const bool sender = (rank == 1) == victim_sends;
  if (sender) CIUIC_RETURN_IF_ERROR(conn->PostWrite(*mr, 0, rr, 0, kBytes, 1, 1));
  if (rank == 1) {
    // Move some bytes, then vanish without any cleanup.
    Completion buf[4];
    CIUIC_RETURN_IF_ERROR(conn->Progress(buf, 4).status());
    if (!store.Set("exit_at", std::to_string(NowNs())).ok()) _exit(3);
    _exit(0);
  }
  // A receiving survivor starts late, so the victim cannot finish first.
  if (!sender) std::this_thread::sleep_for(milliseconds(100));
  const auto deadline = Clock::now() + kTimeout;
  Status st;
  while (Clock::now() < deadline) {
    Completion buf[4];
    auto n = conn->Progress(buf, 4);
    if (!n.ok()) {
      st = n.status();
      break;
    }
    if (*n > 0) return InternalError("a completion for a write that cannot have finished");
    be->WaitForActivity(std::chrono::microseconds(500));
  }
  const int64_t seen_at = NowNs();
  if (st.code() != StatusCode::kUnavailable) return InternalError("expected kUnavailable, got " + st.ToString());
  if (st.message().find("tcp: peer rank 1 (127.0.0.1:") == std::string::npos ||
      st.message().find("closed the connection") == std::string::npos) {
    return InternalError("the error does not name the dead rank: " + st.message());
  }
  CIUIC_ASSIGN_OR_RETURN(std::string at, store.Get("exit_at", kTimeout));
  const int64_t latency_ms = (seen_at - std::stoll(at)) / 1000000;
  if (latency_ms > 1000) return InternalError("the exit was noticed after " + std::to_string(latency_ms) + " ms");
  // Sticky.
  Completion buf[1];
  if (!(conn->Progress(buf, 1).status() == st)) return InternalError("the error is not sticky");
  return Status::Ok();
}

TEST_F(TcpBackendTest, SenderExitsMidTransfer) {
  for (int nsocks : {1, 4}) {
    auto rs = RunRanks(2, [&](int rank, Store& store) { return PeerExits(rank, store, nsocks, true); },
                       milliseconds(30000));
    for (const auto& r : rs) EXPECT_TRUE(r.ok()) << "nsocks " << nsocks << "\n" << Results(rs);
  }
}

TEST_F(TcpBackendTest, ReceiverExitsMidTransfer) {
  for (int nsocks : {1, 4}) {
    auto rs = RunRanks(2, [&](int rank, Store& store) { return PeerExits(rank, store, nsocks, false); },
                       milliseconds(30000));
    for (const auto& r : rs) EXPECT_TRUE(r.ok()) << "nsocks " << nsocks << "\n" << Results(rs);
  }
}

// A peer that destroys its connection cleanly after its last message: the
// message is still delivered, then the error says the peer destroyed it.
TEST_F(TcpBackendTest, CleanDestroyIsDistinguishable) {
  auto rs = RunRanks(2, [&](int rank, Store& store) -> Status {
    BackendOptions opt = Options(rank, 2, 2, "bye-" + std::to_string(getppid()));
    CIUIC_ASSIGN_OR_RETURN(auto be, OpenBackend(BackendKind::kTcp, opt));
    CIUIC_ASSIGN_OR_RETURN(auto conn, ConnectThroughStore(*be, store, "y", rank, 1 - rank, 0, kTimeout));
    if (rank == 1) {
      for (uint32_t i = 0; i < 5; ++i) CIUIC_RETURN_IF_ERROR(conn->PostMessage(&i, 4));
      Completion buf[4];
      CIUIC_RETURN_IF_ERROR(conn->Progress(buf, 4).status());
      conn.reset();  // goodbye
      return store.Get("done", kTimeout).status();
    }
    std::vector<Completion> got;
    Status st;
    const auto deadline = Clock::now() + kTimeout;
    while (st.ok() && Clock::now() < deadline) {
      Completion buf[4];
      auto n = conn->Progress(buf, 4);
      if (!n.ok()) st = n.status();
      else got.insert(got.end(), buf, buf + *n);
      be->WaitForActivity(std::chrono::microseconds(500));
    }
    CIUIC_RETURN_IF_ERROR(store.Set("done", "1"));
    if (got.size() != 5) return InternalError(std::to_string(got.size()) + " messages before the close");
    if (st.code() != StatusCode::kUnavailable ||
        st.message().find("peer rank 1") == std::string::npos ||
        st.message().find("destroyed") == std::string::npos) {
      return InternalError("unexpected: " + st.ToString());
    }
    return Status::Ok();
  }, milliseconds(30000));
  for (const auto& r : rs) EXPECT_TRUE(r.ok()) << Results(rs);
}

// Closing connections whose peer takes nothing (a cut link, a stopped host:
// their bytes stay unsent) lingers once for all of them, not 2 s each. The
// peer here is a backend of this process that never progresses.
TEST_F(TcpBackendTest, ClosingManyConnectionsToAStuckPeerLingersOnce) {
  auto b0 = Open(Options(0, 2));
  auto b1 = Open(Options(1, 2));
  ASSERT_TRUE(b0 && b1);
  constexpr size_t kBytes = 64u << 20;  // more than the sockets' buffers hold
  auto src = b0->Allocate(kBytes);
  auto dst = b1->Allocate(kBytes);
  ASSERT_TRUE(src.ok() && dst.ok());
  std::vector<std::unique_ptr<Connection>> mine, theirs;
  for (uint32_t tag = 0; tag < 3; ++tag) {
    auto e0 = b0->CreateEndpoint(1, tag);
    auto e1 = b1->CreateEndpoint(0, tag);
    ASSERT_TRUE(e0.ok() && e1.ok());
    const auto deadline = Clock::now() + kTimeout;
    auto c0 = (*e0)->Connect((*e1)->Describe(), deadline);
    auto c1 = (*e1)->Connect((*e0)->Describe(), deadline);
    ASSERT_TRUE(c0.ok() && c1.ok()) << c0.status().ToString() << " " << c1.status().ToString();
    auto rr = (*c0)->ImportRegion((*dst)->Describe());
    ASSERT_TRUE(rr.ok()) << rr.status().ToString();
    ASSERT_TRUE((*c0)->PostWrite(**src, 0, *rr, 0, kBytes, tag, tag).ok());
    mine.push_back(std::move(*c0));
    theirs.push_back(std::move(*c1));
  }
  // Push until the sockets are full: rank 1 never reads.
  const auto push_until = Clock::now() + milliseconds(300);
  while (Clock::now() < push_until) {
    for (auto& c : mine) {
      Completion buf[16];
      ASSERT_TRUE(c->Progress(buf, 16).ok());
    }
  }
  const auto t0 = Clock::now();
  mine.clear();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(took, 1.5) << "the first close lingers (2 s) for its unsent bytes";
  EXPECT_LT(took, 3.5) << "the other two do not linger again (before: 2 s each)";
}

TEST_F(TcpBackendTest, WaitForActivityWakesOnData) {
  Pair p = MakePair(1, 1);
  ASSERT_TRUE(p.c0 && p.c1);
  // Idle: sleeps about the time asked.
  auto t0 = Clock::now();
  p.b1->WaitForActivity(std::chrono::microseconds(30000));
  EXPECT_GE(Clock::now() - t0, milliseconds(25));
  // A message from another thread wakes it early.
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(20));
    ASSERT_TRUE(p.c0->PostMessage("w", 1).ok());
    Completion buf[1];
    ASSERT_TRUE(p.c0->Progress(buf, 1).ok());
  });
  t0 = Clock::now();
  p.b1->WaitForActivity(std::chrono::microseconds(5000000));
  const auto took = Clock::now() - t0;
  t.join();
  EXPECT_LT(took, milliseconds(2000));
  Completion buf[1];
  auto n = p.c1->Progress(buf, 1);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 1u);
}

// Small frames are read ahead in batches: here one readv takes all 150
// frames, the completion ring holds 64, and the rest wait in the read-ahead
// buffer with nothing left on the socket. Progress must keep delivering
// them (once each, in order) without new data arriving, so a waiter never
// sleeps on frames it already has (WaitFor sleeps only after a Progress
// that returned nothing).
TEST_F(TcpBackendTest, ReadAheadFramesAreDeliveredWithoutNewData) {
  Pair p = MakePair(1, 1);
  ASSERT_TRUE(p.c0 && p.c1);
  constexpr uint32_t kFrames = 150;  // > the 64 completions buffered per socket
  for (uint32_t i = 0; i < kFrames; ++i) {
    Status st = p.c0->PostMessage(&i, sizeof(i));
    while (st.code() == StatusCode::kResourceExhausted) {
      Completion buf[8];
      ASSERT_TRUE(p.c0->Progress(buf, 8).ok());
      st = p.c0->PostMessage(&i, sizeof(i));
    }
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  Completion scratch[8];
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(p.c0->Progress(scratch, 8).ok());  // all on the wire
  std::this_thread::sleep_for(milliseconds(50));
  uint32_t next = 0;
  int slept = 0;
  for (int round = 0; round < 4000 && next < kFrames; ++round) {
    Completion buf[1];  // one at a time: the ring fills and frames stay read ahead
    auto n = p.c1->Progress(buf, 1);
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    if (*n == 1) {
      uint32_t v = 0;
      ASSERT_EQ(buf[0].kind, Completion::Kind::kMessage);
      std::memcpy(&v, buf[0].data, sizeof(v));
      ASSERT_EQ(v, next) << "frames out of order or lost";
      ++next;
      continue;
    }
    ++slept;
    p.b1->WaitForActivity(std::chrono::microseconds(200000));
  }
  EXPECT_EQ(next, kFrames);
  EXPECT_EQ(slept, 0) << "Progress returned nothing while frames were already read";
}

// The connecting side over IPv6: rank 0 connects to a "rank 1" that is a
// raw listener on [::1], which checks the hello and answers with a frame.
TEST_F(TcpBackendTest, ConnectsOverIpv6) {
  const int listener = socket(AF_INET6, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(listener);
    GTEST_SKIP() << "no IPv6 loopback here: " << std::strerror(errno);
  }
  ASSERT_EQ(listen(listener, 4), 0);
  socklen_t alen = sizeof(a);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&a), &alen), 0);
  auto b0 = Open(Options(0, 2));
  ASSERT_TRUE(b0);
  auto e0 = b0->CreateEndpoint(1, 2);
  ASSERT_TRUE(e0.ok());
  tcp::EndpointInfo fake;
  fake.rank = 1;
  fake.peer = 0;
  fake.tag = 2;
  fake.nsocks = 1;
  fake.instance = 5;
  fake.nonce.fill(0x33);
  fake.family = 6;
  std::memcpy(fake.address.data(), &in6addr_loopback, 16);
  fake.port = ntohs(a.sin6_port);
  fake.job_id = JobId();
  auto c0 = (*e0)->Connect(tcp::EncodeEndpoint(fake), Clock::now() + kTimeout);
  ASSERT_TRUE(c0.ok()) << c0.status().ToString();
  const int raw = accept(listener, nullptr, nullptr);
  ASSERT_GE(raw, 0);
  std::string hello(tcp::kHelloFixedBytes + JobId().size() + tcp::kMacBytes, '\0');
  ASSERT_EQ(recv(raw, hello.data(), hello.size(), MSG_WAITALL), static_cast<ssize_t>(hello.size()));
  tcp::Hello h;
  size_t job_len = 0;
  ASSERT_TRUE(tcp::DecodeHelloFixed(reinterpret_cast<const uint8_t*>(hello.data()), &h, &job_len).ok());
  EXPECT_EQ(h.rank, 0);
  EXPECT_EQ(h.tag, 2u);
  EXPECT_EQ(h.acceptor_nonce, fake.nonce);
  EXPECT_EQ(job_len, JobId().size());
  EXPECT_TRUE(tcp::HelloMacMatches(Key(), reinterpret_cast<const uint8_t*>(hello.data()),
                                   hello.size() - tcp::kMacBytes));
  const std::string proof = tcp::EncodeAcceptProof(h, Key());
  ASSERT_EQ(send(raw, proof.data(), proof.size(), MSG_NOSIGNAL), static_cast<ssize_t>(proof.size()));
  tcp::FrameHeader m;
  m.type = tcp::kFrameMessage;
  m.flags = tcp::kFlagLast;
  m.length = 2;
  uint8_t bytes[tcp::kFrameHeaderBytes + 2];
  tcp::EncodeFrameHeader(m, bytes);
  bytes[tcp::kFrameHeaderBytes] = 'o';
  bytes[tcp::kFrameHeaderBytes + 1] = 'k';
  ASSERT_EQ(send(raw, bytes, sizeof(bytes), MSG_NOSIGNAL), static_cast<ssize_t>(sizeof(bytes)));
  std::vector<std::vector<Completion>> got(1);
  ASSERT_TRUE(Pump(*b0, {c0->get()}, &got, [&] { return got[0].size() == 1; }).ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(got[0][0].data), 2), "ok");
  // Errors name the peer by its IPv6 address.
  close(raw);
  Completion buf[1];
  Status st;
  const auto deadline = Clock::now() + milliseconds(5000);
  while (st.ok() && Clock::now() < deadline) st = (*c0)->Progress(buf, 1).status();
  EXPECT_NE(st.message().find("peer rank 1 ([::1]:" + std::to_string(fake.port) + ")"), std::string::npos)
      << st.ToString();
  close(listener);
}

// Rank 0 connecting to a "rank 1" that is a raw listening socket of the
// test, which then answers with `proof` and a message frame.
struct FakeAcceptor {
  std::unique_ptr<Backend> b0;
  std::unique_ptr<Connection> c0;
  int raw = -1;
  tcp::Hello hello;
  ~FakeAcceptor() {
    if (raw >= 0) close(raw);
  }
};

std::unique_ptr<FakeAcceptor> ConnectToFakeAcceptor() {
  auto f = std::make_unique<FakeAcceptor>();
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(listen(listener, 4), 0);
  socklen_t alen = sizeof(a);
  EXPECT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&a), &alen), 0);
  f->b0 = Open(Options(0, 2));
  if (!f->b0) return nullptr;
  auto e0 = f->b0->CreateEndpoint(1, 2);
  EXPECT_TRUE(e0.ok());
  tcp::EndpointInfo fake;
  fake.rank = 1;
  fake.peer = 0;
  fake.tag = 2;
  fake.instance = 5;
  fake.nonce.fill(0x5a);
  fake.address = {127, 0, 0, 1};
  fake.port = ntohs(a.sin_port);
  fake.job_id = JobId();
  auto c0 = (*e0)->Connect(tcp::EncodeEndpoint(fake), Clock::now() + kTimeout);
  EXPECT_TRUE(c0.ok()) << c0.status().ToString();
  if (!c0.ok()) return nullptr;
  f->c0 = std::move(*c0);
  f->raw = accept(listener, nullptr, nullptr);
  close(listener);
  std::string bytes(tcp::kHelloFixedBytes + JobId().size() + tcp::kMacBytes, '\0');
  EXPECT_EQ(recv(f->raw, bytes.data(), bytes.size(), MSG_WAITALL), static_cast<ssize_t>(bytes.size()));
  size_t job_len = 0;
  EXPECT_TRUE(tcp::DecodeHelloFixed(reinterpret_cast<const uint8_t*>(bytes.data()), &f->hello, &job_len).ok());
  return f;
}

void SendMessageFrame(int fd, const std::string& text) {
  tcp::FrameHeader m;
  m.type = tcp::kFrameMessage;
  m.flags = tcp::kFlagLast;
  m.length = static_cast<uint32_t>(text.size());
  std::string bytes(tcp::kFrameHeaderBytes, '\0');
  tcp::EncodeFrameHeader(m, reinterpret_cast<uint8_t*>(bytes.data()));
  bytes += text;
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
}

// The connecting side reads nothing from an acceptor that cannot prove the
// secret: not the frame that follows a wrong proof, nor one sent instead
// of a proof.
TEST_F(TcpBackendTest, AcceptorWithoutTheSecretIsRefusedBeforeAnyFrame) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    auto f = ConnectToFakeAcceptor();
    ASSERT_TRUE(f);
    std::string proof = tcp::EncodeAcceptProof(f->hello, Key());
    if (variant == 0) proof = tcp::EncodeAcceptProof(f->hello, tcp::DataKey("a guess", JobId()));
    if (variant == 1) proof[tcp::kAcceptProofBytes - 1] ^= 1;
    if (variant == 2) proof.clear();  // straight to a frame
    if (!proof.empty()) {
      ASSERT_EQ(send(f->raw, proof.data(), proof.size(), MSG_NOSIGNAL), static_cast<ssize_t>(proof.size()));
    }
    SendMessageFrame(f->raw, "a forged message of 36+ bytes, padded out to the length");
    Status st;
    size_t delivered = 0;
    const auto deadline = Clock::now() + milliseconds(5000);
    while (st.ok() && Clock::now() < deadline) {
      Completion buf[4];
      auto n = f->c0->Progress(buf, 4);
      if (n.ok()) delivered += *n;
      st = n.status();
    }
    EXPECT_EQ(delivered, 0u);
    ASSERT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
    EXPECT_NE(st.message().find("peer rank 1 (127.0.0.1:"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("proof of the job secret"), std::string::npos) << st.message();
  }
  // The control: the right proof, then the same frame, is delivered.
  auto f = ConnectToFakeAcceptor();
  ASSERT_TRUE(f);
  const std::string proof = tcp::EncodeAcceptProof(f->hello, Key());
  ASSERT_EQ(send(f->raw, proof.data(), proof.size(), MSG_NOSIGNAL), static_cast<ssize_t>(proof.size()));
  SendMessageFrame(f->raw, "ok");
  std::vector<std::vector<Completion>> got(1);
  ASSERT_TRUE(Pump(*f->b0, {f->c0.get()}, &got, [&] { return got[0].size() == 1; }).ok());
  EXPECT_EQ(std::string(reinterpret_cast<char*>(got[0][0].data), got[0][0].len), "ok");
}

// Two real ranks with different secrets: the acceptor rejects the hello
// (and times out naming the rank it waited for), the connector's
// connection fails on its first read naming the acceptor.
TEST_F(TcpBackendTest, RanksWithDifferentSecretsNeverConnect) {
  BackendOptions o0 = Options(0, 2);
  o0.secret = "not the job's secret";
  auto b0 = Open(o0);
  auto b1 = Open(Options(1, 2));
  ASSERT_TRUE(b0 && b1);
  auto e0 = b0->CreateEndpoint(1, 0);
  auto e1 = b1->CreateEndpoint(0, 0);
  ASSERT_TRUE(e0.ok() && e1.ok());
  auto c0 = (*e0)->Connect((*e1)->Describe(), Clock::now() + kTimeout);
  ASSERT_TRUE(c0.ok()) << c0.status().ToString();  // the connector does not wait
  // Data already in flight when the acceptor closes makes its kernel reset
  // the connection instead of closing it: the same error either way.
  const uint32_t v = 1;
  ASSERT_TRUE((*c0)->PostMessage(&v, 4).ok());
  Completion none[1];
  ASSERT_TRUE((*c0)->Progress(none, 1).ok());
  auto c1 = (*e1)->Connect((*e0)->Describe(), Clock::now() + milliseconds(1000));
  ASSERT_EQ(c1.status().code(), StatusCode::kDeadlineExceeded) << c1.status().ToString();
  EXPECT_NE(c1.status().message().find("rank 0"), std::string::npos) << c1.status().message();
  Status st;
  const auto deadline = Clock::now() + milliseconds(5000);
  while (st.ok() && Clock::now() < deadline) {
    Completion buf[1];
    st = (*c0)->Progress(buf, 1).status();
    b0->WaitForActivity(std::chrono::microseconds(1000));
  }
  ASSERT_EQ(st.code(), StatusCode::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("peer rank 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("before sending its accept proof"), std::string::npos) << st.message();
}

// Sockets that never send a hello take at most kMaxPendingSockets slots:
// past the grace the oldest make room, and the real peer still connects.
TEST_F(TcpBackendTest, SilentSocketsCannotCrowdOutThePeer) {
  auto b0 = Open(Options(0, 2));
  auto b1 = Open(Options(1, 2));
  ASSERT_TRUE(b0 && b1);
  auto e0 = b0->CreateEndpoint(1, 0);
  auto e1 = b1->CreateEndpoint(0, 0);
  ASSERT_TRUE(e0.ok() && e1.ok());
  auto info1 = tcp::DecodeEndpoint((*e1)->Describe());
  ASSERT_TRUE(info1.ok());
  std::vector<int> silent;
  for (size_t i = 0; i < tcp::kMaxPendingSockets + 16; ++i) {
    const int fd = ConnectLoopback(info1->port);
    ASSERT_GE(fd, 0);
    silent.push_back(fd);
  }
  b1->WaitForActivity(std::chrono::microseconds(1000));  // takes the first kMaxPendingSockets
  const auto t0 = Clock::now();
  auto c0 = (*e0)->Connect((*e1)->Describe(), Clock::now() + kTimeout);
  ASSERT_TRUE(c0.ok()) << c0.status().ToString();
  auto c1 = (*e1)->Connect((*e0)->Describe(), Clock::now() + kTimeout);
  ASSERT_TRUE(c1.ok()) << c1.status().ToString();
  EXPECT_LT(Clock::now() - t0, tcp::kHelloGrace + std::chrono::seconds(5));
  // The first silent sockets were closed to make room.
  pollfd pfd{silent[0], POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 5000), 1);
  char c;
  EXPECT_LE(recv(silent[0], &c, 1, 0), 0);
  for (int fd : silent) close(fd);
  const uint32_t v = 9;
  ASSERT_TRUE((*c0)->PostMessage(&v, 4).ok());
  std::vector<std::vector<Completion>> got(2);
  ASSERT_TRUE(Pump(*b1, {c0->get(), c1->get()}, &got, [&] { return got[1].size() == 1; }).ok());
}

// A valid hello sent again and again (replayed) is kept only up to
// kMaxSockets times per endpoint: the rest are closed at once instead of
// holding descriptors until the endpoint goes.
TEST_F(TcpBackendTest, ReplayedHellosAreBounded) {
  auto b0 = Open(Options(0, 2));
  auto b1 = Open(Options(1, 2));
  ASSERT_TRUE(b0 && b1);
  auto e0 = b0->CreateEndpoint(1, 0);
  auto e1 = b1->CreateEndpoint(0, 0);
  ASSERT_TRUE(e0.ok() && e1.ok());
  auto info1 = tcp::DecodeEndpoint((*e1)->Describe());
  auto info0 = tcp::DecodeEndpoint((*e0)->Describe());
  ASSERT_TRUE(info1.ok() && info0.ok());
  tcp::Hello good;
  good.rank = 0;
  good.nsocks = 1;
  good.acceptor_nonce = info1->nonce;
  good.connector_nonce = info0->nonce;
  good.job_id = JobId();
  const std::string hello = tcp::EncodeHello(good, Key());
  constexpr int kExtra = 5;
  std::vector<int> fds;
  for (int i = 0; i < tcp::kMaxSockets + kExtra; ++i) {
    const int fd = ConnectLoopback(info1->port);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, hello.data(), hello.size(), MSG_NOSIGNAL), static_cast<ssize_t>(hello.size()));
    fds.push_back(fd);
  }
  auto closed = [&] {
    int n = 0;
    for (int fd : fds) {
      pollfd pfd{fd, POLLIN, 0};
      char c;
      if (poll(&pfd, 1, 0) == 1 && recv(fd, &c, 1, MSG_DONTWAIT) <= 0) ++n;
    }
    return n;
  };
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (closed() < kExtra && Clock::now() < deadline) b1->WaitForActivity(std::chrono::microseconds(10000));
  EXPECT_EQ(closed(), kExtra);
  for (int fd : fds) close(fd);
}

// Connections from strangers are taken off the listening socket by
// WaitForActivity itself, so they cannot turn later waits into busy loops.
TEST_F(TcpBackendTest, WaitForActivityIsNotBusyWithStrangers) {
  auto b = Open(Options(1, 2));
  ASSERT_TRUE(b);
  auto e = b->CreateEndpoint(0, 0);
  ASSERT_TRUE(e.ok());
  auto info = tcp::DecodeEndpoint((*e)->Describe());
  ASSERT_TRUE(info.ok());
  std::vector<int> fds;
  for (const std::string& bytes : {std::string(200, 'x'), std::string()}) {
    const int fd = ConnectLoopback(info->port);
    ASSERT_GE(fd, 0);
    if (!bytes.empty()) {
      ASSERT_EQ(send(fd, bytes.data(), bytes.size(), 0), 200);
    }
    fds.push_back(fd);
  }
  b->WaitForActivity(std::chrono::microseconds(50000));  // may return early: it accepts
  const auto t0 = Clock::now();
  b->WaitForActivity(std::chrono::microseconds(50000));
  b->WaitForActivity(std::chrono::microseconds(50000));
  EXPECT_GE(Clock::now() - t0, milliseconds(90));
  // The garbage sender was rejected; the silent one still waits for its hello.
  pollfd p{fds[0], POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 1000), 1);
  p = pollfd{fds[1], POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0);
  for (int fd : fds) close(fd);
}

}  // namespace
}  // namespace ciuic::transport
