// TcpStoreServer / TcpStoreClient; the wire format is documented in
// transport/bootstrap.h.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "transport/backoff.h"
#include "transport/transport.h"
#include "common/log.h"
#include "transport/net.h"
#include "transport/crypto.h"
#include "transport/store_wire.h"

namespace ciuic::transport {
namespace {

using net::Clock;
using namespace store_wire;  // NOLINT(google-build-using-namespace): the protocol's own names

std::string Bytes(const uint8_t* p, size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

// One end of a TCP connection as both sides name it: the address bytes
// (IPv4, also when a dual-stack server sees it v4-mapped) and the port.
std::string EndpointKey(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return Bytes(reinterpret_cast<const uint8_t*>(&in->sin_addr), 4) + Bytes(reinterpret_cast<const uint8_t*>(&in->sin_port), 2);
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    const uint8_t* a = in6->sin6_addr.s6_addr;
    const std::string port = Bytes(reinterpret_cast<const uint8_t*>(&in6->sin6_port), 2);
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) ? Bytes(a + 12, 4) + port : Bytes(a, 16) + port;
  }
  return "";
}

// The local ends of this process's live store clients, so a server here can
// tell its own process's connections from other processes'. Leaked: read
// from an exit handler, after static destructors may have run.
struct OwnClients {
  std::mutex mu;
  std::multiset<std::string> keys;
};
OwnClients& GetOwnClients() {
  static auto* own = new OwnClients();
  return *own;
}

}  // namespace

Status CheckStoreKey(const std::string& key) {
  if (key.empty()) return InvalidArgumentError("store key is empty");
  if (key.size() > kMaxKeyBytes) {
    return InvalidArgumentError("store key of " + std::to_string(key.size()) + " bytes exceeds " +
                                std::to_string(kMaxKeyBytes));
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- server

class TcpStoreServer::Impl {
 public:
  ~Impl() {
    if (thread_.joinable()) {
      const char b = 1;
      while (write(wake_[1], &b, 1) < 0 && errno == EINTR) {
      }
      thread_.join();
    }
    for (Conn& c : conns_) close(c.fd);
    if (listen_fd_ >= 0) close(listen_fd_);
    if (wake_[0] >= 0) close(wake_[0]);
    if (wake_[1] >= 0) close(wake_[1]);
  }

  Status Init(const std::string& host, uint16_t port, const std::string& secret) {
    secret_ = secret;
    CIUIC_ASSIGN_OR_RETURN(net::Address a, net::Resolve(host, port, /*passive=*/true));
    listen_fd_ = socket(a.family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listen_fd_ < 0) return UnavailableError(std::string("socket: ") + std::strerror(errno));
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    const std::string where = host + ":" + std::to_string(port);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a.addr), a.len) < 0) {
      return UnavailableError("store server cannot bind " + where + ": " + std::strerror(errno));
    }
    if (listen(listen_fd_, 512) < 0) {
      return UnavailableError("store server cannot listen on " + where + ": " + std::strerror(errno));
    }
    CIUIC_RETURN_IF_ERROR(net::SetNonBlocking(listen_fd_));
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) < 0) {
      return InternalError(std::string("pipe2: ") + std::strerror(errno));
    }
    if (secret_.empty()) {
      CIUIC_LOG(kWarn,
                "store server on port %u has no job secret (CIUIC_SECRET): accepting loopback "
                "peers only",
                static_cast<unsigned>(port_));
    }
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  uint16_t port() const { return port_; }

  size_t WaitForOtherProcesses(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    std::unique_lock<std::mutex> lock(peers_mu_);
    for (;;) {
      size_t others = 0;
      {
        OwnClients& own = GetOwnClients();
        std::lock_guard<std::mutex> own_lock(own.mu);
        for (const std::string& k : peers_) others += own.keys.count(k) == 0 ? 1 : 0;
      }
      if (others == 0 || Clock::now() >= deadline) return others;
      // Woken when a connection closes; the bound re-reads this process's
      // own clients, which may close without the server noticing at once.
      peers_cv_.wait_until(lock, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
    }
  }

 private:
  struct Conn {
    int fd;
    std::string peer;
    std::string key;  // EndpointKey of the peer
    ServerSession session;
    bool dead = false;
    size_t out_pos = 0;
    bool closing() const { return session.state() != ServerSession::State::kOpen; }
  };

  void Loop() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (Conn& c : conns_) {
        short ev = c.closing() ? 0 : POLLIN;
        if (c.out_pos < c.session.out().size()) ev |= POLLOUT;
        fds.push_back({c.fd, ev, 0});
      }
      const int rc = poll(fds.data(), fds.size(), -1);
      if (rc < 0) {
        if (errno == EINTR) continue;
        CIUIC_LOG(kWarn, "store server: poll failed: %s", std::strerror(errno));
        return;
      }
      if (fds[0].revents != 0) return;  // shutdown
      for (size_t i = 0; i < conns_.size(); ++i) {
        Conn& c = conns_[i];
        const short re = fds[i + 2].revents;
        if (re & (POLLIN | POLLHUP | POLLERR)) ReadFrom(&c);
        if (!c.dead) Flush(&c);
      }
      if (fds[1].revents & POLLIN) Accept();
      bool closed = false;
      for (Conn& c : conns_) {
        if (!c.dead) continue;
        close(c.fd);
        std::lock_guard<std::mutex> lock(peers_mu_);
        peers_.erase(peers_.find(c.key));
        closed = true;
      }
      if (closed) peers_cv_.notify_all();
      conns_.erase(std::remove_if(conns_.begin(), conns_.end(), [](const Conn& c) { return c.dead; }),
                   conns_.end());
    }
  }

  void Accept() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          CIUIC_LOG(kWarn, "store server: accept failed: %s", std::strerror(errno));
        }
        return;
      }
      const sockaddr* sa = reinterpret_cast<const sockaddr*>(&ss);
      const std::string peer = net::ToString(sa);
      if (secret_.empty() && !net::IsLoopback(sa)) {
        CIUIC_LOG(kWarn,
                  "store server: refused %s: no job secret configured (CIUIC_SECRET), only loopback "
                  "peers are accepted",
                  peer.c_str());
        close(fd);
        continue;
      }
      net::SetNoDelay(fd);
      uint8_t nonce[kNonce];
      if (!net::RandomBytes(nonce, kNonce).ok()) {
        close(fd);
        continue;
      }
      const std::string key = EndpointKey(sa);
      {
        std::lock_guard<std::mutex> lock(peers_mu_);
        peers_.insert(key);
      }
      conns_.push_back(Conn{fd, peer, key, ServerSession(secret_, Bytes(nonce, kNonce), &data_)});
      Flush(&conns_.back());
    }
  }

  void Drop(Conn* c, const std::string& why) {
    CIUIC_LOG(kWarn, "store server: closing connection from %s: %s", c->peer.c_str(), why.c_str());
    c->dead = true;
  }

  void ReadFrom(Conn* c) {
    char buf[65536];
    for (;;) {
      const ssize_t r = recv(c->fd, buf, sizeof(buf), 0);
      if (r > 0) {
        if (c->closing()) continue;  // discard after a rejection
        switch (c->session.Feed(buf, static_cast<size_t>(r))) {
          case ServerSession::State::kOpen:
            continue;
          case ServerSession::State::kRejected:
            CIUIC_LOG(kWarn, "store server: rejected %s: %s", c->peer.c_str(), c->session.why().c_str());
            return;
          case ServerSession::State::kDropped:
            Drop(c, c->session.why());
            return;
        }
      }
      if (r == 0) {
        // An orderly close; not worth a warning once authenticated.
        if (!c->session.authenticated() && !c->closing()) {
          CIUIC_LOG(kInfo, "store server: %s closed before authenticating", c->peer.c_str());
        }
        c->dead = true;
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      c->dead = true;
      return;
    }
  }

  void Flush(Conn* c) {
    std::string& out = c->session.out();
    while (c->out_pos < out.size()) {
      const ssize_t w = send(c->fd, out.data() + c->out_pos, out.size() - c->out_pos, MSG_NOSIGNAL);
      if (w > 0) {
        c->out_pos += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c->dead = true;
      return;
    }
    out.clear();
    c->out_pos = 0;
    if (c->session.state() == ServerSession::State::kRejected) c->dead = true;
  }

  std::string secret_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::thread thread_;
  std::vector<Conn> conns_;                   // server thread only
  std::mutex peers_mu_;
  std::condition_variable peers_cv_;          // a connection closed
  std::multiset<std::string> peers_;          // EndpointKey of each of conns_ (peers_mu_)
  std::map<std::string, std::string> data_;  // server thread only
};

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, uint16_t port,
                                                                 const std::string& secret) {
  auto impl = std::make_unique<Impl>();
  CIUIC_RETURN_IF_ERROR(impl->Init(host, port, secret));
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl)));
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStoreServer::~TcpStoreServer() = default;
uint16_t TcpStoreServer::port() const { return impl_->port(); }
size_t TcpStoreServer::WaitForOtherProcesses(std::chrono::milliseconds timeout) {
  return impl_->WaitForOtherProcesses(timeout);
}

// ---------------------------------------------------------------- client

namespace {

// One non-blocking connect attempt bounded by `deadline`; returns the fd.
StatusOr<int> ConnectOnce(const net::Address& a, Clock::time_point deadline) {
  const int fd = socket(a.family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return net::DescriptorError("socket", errno);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a.addr), a.len) == 0) return fd;
  if (errno != EINPROGRESS) {
    const int e = errno;
    close(fd);
    return UnavailableError(std::strerror(e));
  }
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      close(fd);
      return DeadlineExceededError("connect timed out");
    }
    pollfd p{fd, POLLOUT, 0};
    const int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) continue;
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (rc < 0 || err != 0) {
      close(fd);
      return UnavailableError(std::strerror(rc < 0 ? errno : err));
    }
    return fd;
  }
}

}  // namespace

// A poll round trip may outlive the caller's deadline a little (at most
// min(timeout_, 1 s)): breaking the connection because a poll started just
// before the deadline would turn a timeout into a lost store.
Clock::time_point TcpStoreClient::RoundTripDeadline(Clock::time_point deadline) const {
  const auto grace = Clock::now() + std::min(timeout_, std::chrono::milliseconds(1000));
  return std::max(deadline, grace);
}

StatusOr<std::unique_ptr<TcpStoreClient>> TcpStoreClient::Connect(const std::string& host, uint16_t port,
                                                                  const std::string& secret,
                                                                  std::chrono::milliseconds timeout) {
  const std::string where = host + ":" + std::to_string(port);
  CIUIC_ASSIGN_OR_RETURN(net::Address a, net::Resolve(host, port, /*passive=*/false));
  const auto deadline = Clock::now() + timeout;
  std::chrono::milliseconds step(5);
  int fd = -1;
  std::string last = "no attempt";
  for (;;) {
    StatusOr<int> r = ConnectOnce(a, deadline);
    if (r.ok()) {
      fd = *r;
      break;
    }
    last = r.status().message();
    // Out of descriptors: waiting will not help.
    if (r.status().code() == StatusCode::kResourceExhausted) {
      return Status(r.status().code(), "cannot connect to the store at " + where + ": " + last);
    }
    if (!Backoff(&step, deadline, std::chrono::milliseconds(100))) {
      return UnavailableError("cannot connect to the store at " + where + " within " +
                              std::to_string(timeout.count()) + " ms: " + last);
    }
  }
  net::SetNoDelay(fd);
  auto fail = [&](const Status& s, const std::string& what) -> Status {
    close(fd);
    if (s.code() == StatusCode::kDeadlineExceeded) {
      return DeadlineExceededError("store at " + where + ": " + what + " timed out after " +
                                   std::to_string(timeout.count()) + " ms");
    }
    return UnavailableError("store at " + where + ": " + what + " failed: " + s.message());
  };
  char greeting[kGreeting];
  Status s = net::ReadExact(fd, greeting, kGreeting, deadline);
  if (!s.ok()) return fail(s, "authentication (reading the server greeting)");
  StatusOr<std::string> sn = DecodeGreeting(greeting);
  if (!sn.ok()) {
    close(fd);
    return Status(sn.status().code(), "store at " + where + " is " + sn.status().message());
  }
  uint8_t cnb[kNonce];
  s = net::RandomBytes(cnb, kNonce);
  if (!s.ok()) {
    close(fd);
    return s;
  }
  const std::string cn = Bytes(cnb, kNonce);
  const std::string proof = EncodeProof(secret, *sn, cn);
  s = net::WriteAll(fd, proof.data(), proof.size(), deadline);
  if (!s.ok()) return fail(s, "authentication");
  uint8_t verdict[kVerdict];
  s = net::ReadExact(fd, verdict, kVerdict, deadline);
  if (!s.ok()) return fail(s, "authentication (reading the verdict)");
  s = CheckVerdict(verdict, secret, *sn, cn);
  if (!s.ok()) {
    close(fd);
    return Status(s.code(), "store at " + where + " " + s.message());
  }
  return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(fd, where, timeout));
}

TcpStoreClient::TcpStoreClient(int fd, std::string peer, std::chrono::milliseconds timeout)
    : fd_(fd), peer_(std::move(peer)), timeout_(timeout) {
  sockaddr_storage local{};
  socklen_t len = sizeof(local);
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
    local_key_ = EndpointKey(reinterpret_cast<const sockaddr*>(&local));
    OwnClients& own = GetOwnClients();
    std::lock_guard<std::mutex> lock(own.mu);
    own.keys.insert(local_key_);
  }
}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) close(fd_);
  if (!local_key_.empty()) {
    OwnClients& own = GetOwnClients();
    std::lock_guard<std::mutex> lock(own.mu);
    own.keys.erase(own.keys.find(local_key_));
  }
}

StatusOr<TcpStoreClient::Reply> TcpStoreClient::Request(uint8_t op, const std::string& key,
                                                        const std::string& value,
                                                        Clock::time_point deadline) {
  // Caller holds mu_.
  if (!error_.ok()) return error_;
  const std::string frame = EncodeRequest(op, key, value);
  auto broken = [&](const Status& s) -> Status {
    // The stream may be mid-frame: the connection cannot be used again.
    close(fd_);
    fd_ = -1;
    if (s.code() == StatusCode::kDeadlineExceeded) {
      error_ = DeadlineExceededError("store at " + peer_ + " did not answer a request for key '" + key +
                                     "' in time; connection closed");
    } else {
      error_ = UnavailableError("store at " + peer_ + ": " + s.message());
    }
    return error_;
  };
  Status s = net::WriteAll(fd_, frame.data(), frame.size(), deadline);
  if (!s.ok()) return broken(s);
  char header[kReplyHeader];
  s = net::ReadExact(fd_, header, kReplyHeader, deadline);
  if (!s.ok()) return broken(s);
  StatusOr<ReplyHeader> h = DecodeReplyHeader(header);
  if (!h.ok()) return broken(h.status());
  Reply r;
  r.status = h->status;
  r.payload.resize(h->len);
  s = net::ReadExact(fd_, r.payload.data(), h->len, deadline);
  if (!s.ok()) return broken(s);
  return r;
}

Status TcpStoreClient::Set(const std::string& key, const std::string& value) {
  CIUIC_RETURN_IF_ERROR(CheckStoreKey(key));
  if (value.size() > kMaxValueBytes) {
    return InvalidArgumentError("value of " + std::to_string(value.size()) + " bytes for key '" + key +
                                "' exceeds " + std::to_string(kMaxValueBytes));
  }
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_ASSIGN_OR_RETURN(Reply r, Request(kOpSet, key, value, Clock::now() + timeout_));
  if (r.status != kReplyOk) return InternalError("store set of '" + key + "' failed: " + r.payload);
  return Status::Ok();
}

StatusOr<std::string> TcpStoreClient::Get(const std::string& key, std::chrono::milliseconds timeout) {
  CIUIC_RETURN_IF_ERROR(CheckStoreKey(key));
  const auto deadline = Clock::now() + timeout;
  std::chrono::milliseconds step(1);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      CIUIC_ASSIGN_OR_RETURN(Reply r, Request(kOpGet, key, "", RoundTripDeadline(deadline)));
      if (r.status == kReplyOk) return std::move(r.payload);
      if (r.status == kReplyError) return FailedPreconditionError(r.payload);
    }
    if (!Backoff(&step, deadline, std::chrono::milliseconds(100))) {
      return DeadlineExceededError("store key '" + key + "' was not set within " +
                                   std::to_string(timeout.count()) + " ms");
    }
  }
}

Status TcpStoreClient::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  for (const std::string& k : keys) CIUIC_RETURN_IF_ERROR(CheckStoreKey(k));
  const auto deadline = Clock::now() + timeout;
  std::chrono::milliseconds step(1);
  for (const std::string& key : keys) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        CIUIC_ASSIGN_OR_RETURN(Reply r, Request(kOpCheck, key, "", RoundTripDeadline(deadline)));
        if (r.status == kReplyOk) break;
        if (r.status == kReplyError) return FailedPreconditionError(r.payload);
      }
      if (!Backoff(&step, deadline, std::chrono::milliseconds(100))) {
        return DeadlineExceededError("store key '" + key + "' was not set within " +
                                     std::to_string(timeout.count()) + " ms");
      }
    }
  }
  return Status::Ok();
}

StatusOr<int64_t> TcpStoreClient::Add(const std::string& key, int64_t delta) {
  CIUIC_RETURN_IF_ERROR(CheckStoreKey(key));
  std::string v;
  net::PutU64(&v, static_cast<uint64_t>(delta));
  std::lock_guard<std::mutex> lock(mu_);
  CIUIC_ASSIGN_OR_RETURN(Reply r, Request(kOpAdd, key, v, Clock::now() + timeout_));
  if (r.status != kReplyOk) return FailedPreconditionError(r.payload);
  if (r.payload.size() != 8) return DataLossError("store add of '" + key + "': malformed reply");
  return static_cast<int64_t>(net::GetU64(r.payload.data()));
}

}  // namespace ciuic::transport
