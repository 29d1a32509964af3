// TcpStoreServer / TcpStoreClient on 127.0.0.1 with ephemeral ports.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"
#include "transport/net.h"
#include "transport/crypto.h"
#include "transport/store_wire.h"

namespace ciuic::transport {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr char kSecret[] = "test-secret-1234";
constexpr char kHost[] = "127.0.0.1";

std::unique_ptr<TcpStoreServer> StartServer(const std::string& secret = kSecret, uint16_t port = 0) {
  auto s = TcpStoreServer::Start(kHost, port, secret);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

std::unique_ptr<TcpStoreClient> Connect(uint16_t port, const std::string& secret = kSecret,
                                        milliseconds timeout = milliseconds(5000)) {
  auto c = TcpStoreClient::Connect(kHost, port, secret, timeout);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return c.ok() ? std::move(*c) : nullptr;
}

TEST(TcpStoreTest, SetGetWaitAddAcrossThreads) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  EXPECT_NE(server->port(), 0);
  constexpr int kThreads = 4;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto c = Connect(server->port());
      if (!c) {
        ++failures;
        return;
      }
      const std::string value = "value-" + std::to_string(t) + std::string("\0\x01\xff", 3);
      if (!c->Set("addr/" + std::to_string(t), value).ok()) ++failures;
      for (int i = 0; i < 10; ++i) {
        if (!c->Add("counter", 1).ok()) ++failures;
      }
      std::vector<std::string> keys;
      for (int r = 0; r < kThreads; ++r) keys.push_back("addr/" + std::to_string(r));
      if (!c->Wait(keys, milliseconds(5000)).ok()) ++failures;
      for (int r = 0; r < kThreads; ++r) {
        auto v = c->Get("addr/" + std::to_string(r), milliseconds(1000));
        if (!v.ok() || *v != "value-" + std::to_string(r) + std::string("\0\x01\xff", 3)) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto c = Connect(server->port());
  ASSERT_TRUE(c);
  EXPECT_EQ(*c->Add("counter", 0), kThreads * 10);
  EXPECT_EQ(*c->Add("counter", -5), kThreads * 10 - 5);
  EXPECT_EQ(*c->Get("counter", milliseconds(10)), std::to_string(kThreads * 10 - 5));
  EXPECT_EQ(c->Add("addr/0", 1).status().code(), StatusCode::kFailedPrecondition);
  // A large value and the client-side bounds.
  const std::string big(3 << 20, 'z');
  ASSERT_TRUE(c->Set("big", big).ok());
  EXPECT_EQ(*c->Get("big", milliseconds(1000)), big);
  EXPECT_EQ(c->Set("", "x").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Set(std::string(kMaxKeyBytes + 1, 'k'), "x").code(), StatusCode::kInvalidArgument);
}

// A server waits for other processes' connections only: its own process's
// clients do not count (a rank 0 about to exit would otherwise wait for
// itself); another process's connection counts until that process closes it.
TEST(TcpStoreTest, WaitForOtherProcessesCountsOnlyOtherProcesses) {
  // The child is forked before the server's thread exists: a fork beside a
  // thread inside malloc can hang the child under gcc 12's sanitizers.
  int port_pipe[2], connected[2], go[2];
  ASSERT_EQ(pipe(port_pipe), 0);
  ASSERT_EQ(pipe(connected), 0);
  ASSERT_EQ(pipe(go), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    uint16_t port = 0;
    if (read(port_pipe[0], &port, sizeof(port)) != static_cast<ssize_t>(sizeof(port))) _exit(2);
    auto c = TcpStoreClient::Connect(kHost, port, kSecret, milliseconds(5000));
    const char ok = c.ok() && (*c)->Set("child", "here").ok() ? 1 : 0;
    if (write(connected[1], &ok, 1) != 1) _exit(3);
    char b;
    if (read(go[0], &b, 1) != 1) _exit(4);
    c = StatusOr<std::unique_ptr<TcpStoreClient>>(UnavailableError("closed"));  // closes the connection
    _exit(ok ? 0 : 1);
  }
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  auto own = Connect(server->port());
  ASSERT_NE(own, nullptr);
  ASSERT_TRUE(own->Set("k", "v").ok());
  EXPECT_EQ(server->WaitForOtherProcesses(milliseconds(0)), 0u);
  const uint16_t port = server->port();
  ASSERT_EQ(write(port_pipe[1], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  char ok = 0;
  ASSERT_EQ(read(connected[0], &ok, 1), 1);
  ASSERT_EQ(ok, 1);
  // The child's connection holds the wait until its timeout.
  EXPECT_EQ(server->WaitForOtherProcesses(milliseconds(50)), 1u);
  auto own2 = Connect(server->port());  // another of this process: still not counted
  ASSERT_NE(own2, nullptr);
  EXPECT_EQ(server->WaitForOtherProcesses(milliseconds(0)), 1u);
  ASSERT_EQ(write(go[1], "g", 1), 1);
  // The child closes: the wait ends well before its 30 s timeout with none left.
  const auto t0 = Clock::now();
  EXPECT_EQ(server->WaitForOtherProcesses(milliseconds(30000)), 0u);
  EXPECT_LT(Clock::now() - t0, milliseconds(20000));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  for (int fd : {port_pipe[0], port_pipe[1], connected[0], connected[1], go[0], go[1]}) close(fd);
}

TEST(TcpStoreTest, GetTimeoutNamesKey) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto c = Connect(server->port());
  ASSERT_TRUE(c);
  const auto t0 = Clock::now();
  auto v = c->Get("nobody/sets/this", milliseconds(100));
  const auto took = Clock::now() - t0;
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(v.status().message().find("nobody/sets/this"), std::string::npos) << v.status().message();
  EXPECT_GE(took, milliseconds(100));
  EXPECT_LT(took, milliseconds(2000));
  Status w = c->Wait({"nobody/either"}, milliseconds(50));
  EXPECT_EQ(w.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(w.message().find("nobody/either"), std::string::npos);
  // The connection is still usable after a Get timeout.
  EXPECT_TRUE(c->Set("k", "v").ok());
}

TEST(TcpStoreTest, WrongSecretRejectedRightAccepted) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto bad = TcpStoreClient::Connect(kHost, server->port(), "not-the-secret", milliseconds(2000));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(bad.status().message().find("secret"), std::string::npos) << bad.status().message();
  auto none = TcpStoreClient::Connect(kHost, server->port(), "", milliseconds(2000));
  EXPECT_FALSE(none.ok());
  auto good = Connect(server->port());
  ASSERT_TRUE(good);
  EXPECT_TRUE(good->Set("a", "b").ok());
}

TEST(TcpStoreTest, NoSecretAcceptsLoopback) {
  auto server = StartServer("");
  ASSERT_TRUE(server);
  auto c = Connect(server->port(), "");
  ASSERT_TRUE(c);
  EXPECT_TRUE(c->Set("a", "b").ok());
  // A client with a secret does not authenticate a secret-less server.
  EXPECT_FALSE(TcpStoreClient::Connect(kHost, server->port(), kSecret, milliseconds(1000)).ok());
}

TEST(TcpStoreTest, ClientBeforeServer) {
  uint16_t port;
  {
    auto probe = StartServer();
    ASSERT_TRUE(probe);
    port = probe->port();
  }
  StatusOr<std::unique_ptr<TcpStoreClient>> client = UnavailableError("not yet");
  std::thread t([&] { client = TcpStoreClient::Connect(kHost, port, kSecret, milliseconds(5000)); });
  std::this_thread::sleep_for(milliseconds(200));
  auto server = StartServer(kSecret, port);
  t.join();
  ASSERT_TRUE(server);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Set("late", "ok").ok());
}

TEST(TcpStoreTest, ConnectTimesOutWithoutServer) {
  uint16_t port;
  {
    auto probe = StartServer();
    ASSERT_TRUE(probe);
    port = probe->port();
  }
  const auto t0 = Clock::now();
  auto c = TcpStoreClient::Connect(kHost, port, kSecret, milliseconds(200));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_LT(Clock::now() - t0, milliseconds(2000));
}

TEST(TcpStoreTest, ServerKilledGivesErrorWithinTimeout) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(pipefd[0]);
    auto s = TcpStoreServer::Start(kHost, 0, kSecret);
    if (!s.ok()) _exit(1);
    const uint16_t port = (*s)->port();
    if (write(pipefd[1], &port, sizeof(port)) != sizeof(port)) _exit(1);
    pause();
    _exit(0);
  }
  close(pipefd[1]);
  uint16_t port = 0;
  ASSERT_EQ(read(pipefd[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  close(pipefd[0]);
  auto c = Connect(port);
  ASSERT_TRUE(c);
  ASSERT_TRUE(c->Set("x", "1").ok());
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  const auto t0 = Clock::now();
  auto v = c->Get("never", milliseconds(3000));
  EXPECT_LT(Clock::now() - t0, milliseconds(3000));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kUnavailable) << v.status().ToString();
  // The first error sticks.
  EXPECT_EQ(c->Set("y", "2").code(), StatusCode::kUnavailable);
}

// Forked ranks meet through the store: a barrier from Add + Wait.
TEST(TcpStoreTest, ForkedRanksBarrier) {
  constexpr int kRanks = 4;
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < kRanks; ++r) {
    int p[2];
    ASSERT_EQ(pipe(p), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(p[1]);
      uint16_t port = 0;
      if (read(p[0], &port, sizeof(port)) != sizeof(port)) _exit(10);
      auto c = TcpStoreClient::Connect(kHost, port, kSecret, milliseconds(5000));
      if (!c.ok()) _exit(11);
      if (!(*c)->Set("addr/" + std::to_string(r), "rank" + std::to_string(r)).ok()) _exit(12);
      for (int round = 0; round < 3; ++round) {
        const std::string b = "barrier/" + std::to_string(round);
        auto n = (*c)->Add(b, 1);
        if (!n.ok()) _exit(13);
        if (*n == kRanks && !(*c)->Set(b + "/done", "").ok()) _exit(14);
        if (!(*c)->Wait({b + "/done"}, milliseconds(5000)).ok()) _exit(15);
      }
      for (int o = 0; o < kRanks; ++o) {
        auto v = (*c)->Get("addr/" + std::to_string(o), milliseconds(100));
        if (!v.ok() || *v != "rank" + std::to_string(o)) _exit(16);
      }
      _exit(0);
    }
    close(p[0]);
    pids.push_back(pid);
    pipes.push_back(p[1]);
  }
  auto server = StartServer();
  ASSERT_TRUE(server);
  const uint16_t port = server->port();
  for (int fd : pipes) {
    EXPECT_EQ(write(fd, &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
    close(fd);
  }
  for (pid_t pid : pids) {
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "rank exit status " << st;
  }
  auto c = Connect(port);
  ASSERT_TRUE(c);
  EXPECT_EQ(*c->Add("barrier/2", 0), kRanks);
}

// A raw socket that authenticates like a client (or not).
int RawConnect(uint16_t port, bool authenticate, const std::string& secret = kSecret) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return -1;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char greeting[40];
  if (recv(fd, greeting, 40, MSG_WAITALL) != 40) return -1;
  if (!authenticate) return fd;
  const std::string sn(greeting + 8, 32);
  const std::string cn(32, 'c');
  const Digest mac = HmacSha256(secret, sn + cn);
  std::string proof = cn + std::string(reinterpret_cast<const char*>(mac.data()), 32);
  send(fd, proof.data(), proof.size(), 0);
  char verdict[33];
  if (recv(fd, verdict, 33, MSG_WAITALL) != 33 || verdict[0] != 0) return -1;
  return fd;
}

// True when the server closes `fd` within 5 s (recv returns 0 or reset).
bool ClosedByServer(int fd) {
  char buf[256];
  for (;;) {
    const ssize_t r = recv(fd, buf, sizeof(buf), 0);
    if (r == 0 || (r < 0 && errno == ECONNRESET)) return true;
    if (r < 0) return false;  // timeout
  }
}

TEST(TcpStoreTest, MalformedFramesCloseOnlyThatConnection) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto good = Connect(server->port());
  ASSERT_TRUE(good);
  ASSERT_TRUE(good->Set("k", "v").ok());

  std::vector<std::string> frames;
  {
    std::string f;  // a key longer than the limit
    f.push_back(1);
    net::PutU32(&f, kMaxKeyBytes + 1);
    net::PutU32(&f, 0);
    frames.push_back(f);
  }
  {
    std::string f;  // a value longer than the limit (only the header is sent)
    f.push_back(1);
    net::PutU32(&f, 1);
    net::PutU32(&f, 0xffffffffu);
    frames.push_back(f);
  }
  {
    std::string f;  // an unknown op
    f.push_back(99);
    net::PutU32(&f, 1);
    net::PutU32(&f, 0);
    f += "k";
    frames.push_back(f);
  }
  {
    std::string f;  // ADD with a 3-byte delta
    f.push_back(3);
    net::PutU32(&f, 1);
    net::PutU32(&f, 3);
    f += "kabc";
    frames.push_back(f);
  }
  for (const std::string& f : frames) {
    const int fd = RawConnect(server->port(), true);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(send(fd, f.data(), f.size(), MSG_NOSIGNAL), static_cast<ssize_t>(f.size()));
    EXPECT_TRUE(ClosedByServer(fd));
    close(fd);
  }
  // Garbage instead of the proof: rejected and closed.
  {
    const int fd = RawConnect(server->port(), false);
    ASSERT_GE(fd, 0);
    const std::string junk(64, 'j');
    send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    char verdict[33];
    ASSERT_EQ(recv(fd, verdict, 33, MSG_WAITALL), 33);
    EXPECT_EQ(verdict[0], 1);
    EXPECT_TRUE(ClosedByServer(fd));
    close(fd);
  }
  // A peer that connects and leaves mid-handshake.
  {
    const int fd = RawConnect(server->port(), false);
    ASSERT_GE(fd, 0);
    send(fd, "abc", 3, MSG_NOSIGNAL);
    close(fd);
  }
  // The server still serves the others, old and new.
  EXPECT_EQ(*good->Get("k", milliseconds(1000)), "v");
  auto again = Connect(server->port());
  ASSERT_TRUE(again);
  EXPECT_EQ(*again->Get("k", milliseconds(1000)), "v");
}

// The server's protocol without sockets: a client's bytes split anyhow give
// the same replies and the same table; every reply decodes.
TEST(StoreWire, SessionAnswersTheSameWhateverTheSplit) {
  using namespace store_wire;  // NOLINT(google-build-using-namespace)
  const std::string sn(kNonce, 's'), cn(kNonce, 'c');
  std::string in = EncodeProof(kSecret, sn, cn);
  in += EncodeRequest(kOpSet, "a", "1");
  in += EncodeRequest(kOpAdd, "a", std::string("\0\0\0\0\0\0\0\x29", 8));
  in += EncodeRequest(kOpGet, "a", "");
  in += EncodeRequest(kOpCheck, "b", "");
  in += EncodeRequest(kOpSet, "b", "x");
  in += EncodeRequest(kOpAdd, "b", std::string(8, '\0'));
  std::string expected_out;
  std::map<std::string, std::string> expected;
  for (size_t step : {in.size(), size_t{1}, size_t{3}, size_t{64}}) {
    std::map<std::string, std::string> data;
    ServerSession s(kSecret, sn, &data);
    for (size_t pos = 0; pos < in.size(); pos += step) s.Feed(in.data() + pos, std::min(step, in.size() - pos));
    EXPECT_EQ(s.state(), ServerSession::State::kOpen);
    if (step == in.size()) {
      expected_out = s.out();
      expected = data;
    }
    EXPECT_EQ(s.out(), expected_out) << "split " << step;
    EXPECT_EQ(data, expected) << "split " << step;
  }
  EXPECT_EQ(expected.at("a"), "42");
  EXPECT_EQ(expected.at("b"), "x");
  // The client's view: greeting, an accepting verdict, then six replies.
  const std::string& out = expected_out;
  ASSERT_TRUE(DecodeGreeting(out.data()).ok());
  ASSERT_TRUE(CheckVerdict(reinterpret_cast<const uint8_t*>(out.data()) + kGreeting, kSecret, sn, cn).ok());
  std::vector<uint8_t> statuses;
  for (size_t pos = kGreeting + kVerdict; pos < out.size();) {
    auto h = DecodeReplyHeader(out.data() + pos);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    statuses.push_back(h->status);
    pos += kReplyHeader + h->len;
  }
  EXPECT_EQ(statuses, (std::vector<uint8_t>{kReplyOk, kReplyOk, kReplyOk, kReplyNotFound, kReplyOk, kReplyError}));
  // A wrong proof is rejected with a zero MAC, a bad frame dropped with why.
  std::map<std::string, std::string> data;
  ServerSession wrong(kSecret, sn, &data);
  const std::string bad = EncodeProof("another secret", sn, cn);
  EXPECT_EQ(wrong.Feed(bad.data(), bad.size()), ServerSession::State::kRejected);
  EXPECT_FALSE(CheckVerdict(reinterpret_cast<const uint8_t*>(wrong.out().data()) + kGreeting, kSecret, sn, cn).ok());
  ServerSession dropped(kSecret, sn, &data);
  const std::string frame = EncodeProof(kSecret, sn, cn) + EncodeRequest(kOpGet, "k", "v");
  EXPECT_EQ(dropped.Feed(frame.data(), frame.size()), ServerSession::State::kDropped);
  EXPECT_NE(dropped.why().find("op 2 with a value of 1 bytes"), std::string::npos) << dropped.why();
  EXPECT_FALSE(DecodeReplyHeader("\x03\0\0\0\0").ok());
  EXPECT_FALSE(DecodeGreeting("CIUS\0\0\0\x02" "0123456789abcdef0123456789abcdef").ok());
}

// Both stores take the same texts as counters (the file store used to take
// " 5" and "+5", the tcp store not).
TEST(StoreWire, CounterTextsAreTheSameForBothStores) {
  for (const char* text : {"+5", " 5", "5 ", "", "-", "0x10", "99999999999999999999", "1e3"}) {
    int64_t v = 0;
    EXPECT_FALSE(store_wire::ParseCounter(text, &v)) << "'" << text << "'";
  }
  for (const char* text : {"0", "-1", "007", "9223372036854775807", "-9223372036854775808"}) {
    int64_t v = 0;
    EXPECT_TRUE(store_wire::ParseCounter(text, &v)) << text;
    EXPECT_EQ(v, std::strtoll(text, nullptr, 10));
  }
  char tmpl[] = "/tmp/ciuic-counter-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  auto fs = FileStore::Open(std::string(tmpl) + "/store");
  ASSERT_TRUE(fs.ok()) << fs.status().ToString();
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto tcp = Connect(server->port());
  ASSERT_TRUE(tcp);
  for (const char* text : {"+5", " 5", "12"}) {
    ASSERT_TRUE((*fs)->Set("c", text).ok());
    ASSERT_TRUE(tcp->Set("c", text).ok());
    auto a = (*fs)->Add("c", 1);
    auto b = tcp->Add("c", 1);
    EXPECT_EQ(a.ok(), b.ok()) << "'" << text << "': " << a.status().ToString() << " / " << b.status().ToString();
    if (a.ok() && b.ok()) {
      EXPECT_EQ(*a, *b);
    }
  }
  std::filesystem::remove_all(tmpl);
}

TEST(StoreWire, UniqueIdsRoundTripAndRefuseWhatIsNotOne) {
  using store_wire::kIdBytes;
  char id[kIdBytes];
  const std::string secret(64, 'f');
  for (const std::string host : {"10.0.0.1", "node-17.cluster.example", "fe80::1%eth0"}) {
    ASSERT_TRUE(store_wire::EncodeStoreId({host, 29500, secret}, id).ok()) << host;
    auto back = store_wire::DecodeStoreId(id);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->host, host);
    EXPECT_EQ(back->port, 29500);
    EXPECT_EQ(back->secret, secret);
  }
  // What cannot be an id is refused when made, naming what is wrong.
  auto refused = [&](const store_wire::StoreId& sid, const char* needle) {
    Status s = store_wire::EncodeStoreId(sid, id);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find(needle), std::string::npos) << s.ToString();
  };
  refused({"", 1, "s"}, "host");
  refused({"a b", 1, "s"}, "host");
  refused({"h", 0, "s"}, "port 0");
  refused({"h", 1, std::string(store_wire::kIdRoom, 's')}, "CIUIC_SECRET");
  ASSERT_TRUE(store_wire::EncodeStoreId({"h", 1, std::string(store_wire::kIdRoom - 1, 's')}, id).ok());
  EXPECT_TRUE(store_wire::DecodeStoreId(id).ok());

  // Damage anywhere is kDataLoss: magic, version, kind, a length past the
  // end, a bad host byte, port 0, bytes after the end.
  ASSERT_TRUE(store_wire::EncodeStoreId({"host", 7, "key"}, id).ok());
  const size_t host_at = 10, port_at = 14, secret_len_at = 16, end = 20;
  auto damaged = [&](size_t at, char value, const char* needle) {
    char copy[kIdBytes];
    std::memcpy(copy, id, kIdBytes);
    copy[at] = value;
    auto got = store_wire::DecodeStoreId(copy);
    EXPECT_EQ(got.status().code(), StatusCode::kDataLoss) << "byte " << at;
    EXPECT_NE(got.status().message().find(needle), std::string::npos) << got.status().ToString();
  };
  damaged(0, 'X', "not a ciuic unique id");
  damaged(7, 2, "version 2");
  damaged(8, 'Q', "unknown kind");
  damaged(9, static_cast<char>(250), "host");
  damaged(host_at, ' ', "host");
  damaged(port_at + 1, 0, "port 0");
  damaged(secret_len_at, static_cast<char>(255), "secret");
  damaged(end, 'x', "after its end");
  damaged(kIdBytes - 1, 1, "after its end");

  // An error id carries its text, quoted printable, as kUnavailable.
  store_wire::EncodeStoreIdError("no interface\n\x1b[2J" + std::string(400, 'z'), id);
  auto err = store_wire::DecodeStoreId(id);
  EXPECT_EQ(err.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(err.status().message().find("no interface"), std::string::npos) << err.status().ToString();
  EXPECT_EQ(err.status().message().find('\n'), std::string::npos);
  EXPECT_EQ(err.status().message().find('\x1b'), std::string::npos);
}

}  // namespace
}  // namespace ciuic::transport
