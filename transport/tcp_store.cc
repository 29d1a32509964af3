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
#include <map>
#include <thread>

#include "transport/backoff.h"
#include "transport/transport.h"
#include "common/log.h"
#include "transport/net.h"
#include "transport/crypto.h"

namespace ciuic::transport {
namespace {

using net::Clock;

constexpr char kMagic[4] = {'C', 'I', 'U', 'S'};
constexpr uint32_t kVersion = 1;
constexpr size_t kNonce = 32;
constexpr size_t kGreeting = 4 + 4 + kNonce;
constexpr size_t kProof = 2 * kNonce;     // client nonce + MAC
constexpr size_t kVerdict = 1 + 32;       // verdict + server MAC
constexpr size_t kRequestHeader = 1 + 4 + 4;
constexpr size_t kReplyHeader = 1 + 4;

enum Op : uint8_t { kOpSet = 1, kOpGet = 2, kOpAdd = 3, kOpCheck = 4 };
enum ReplyStatus : uint8_t { kReplyOk = 0, kReplyNotFound = 1, kReplyError = 2 };

std::string Bytes(const uint8_t* p, size_t n) { return std::string(reinterpret_cast<const char*>(p), n); }

// Client proof: HMAC(secret, server_nonce || client_nonce); server proof:
// the nonces in the other order, so neither can be replayed as the other.
Digest ClientProof(const std::string& secret, const std::string& sn, const std::string& cn) {
  return HmacSha256(secret, sn + cn);
}
Digest ServerProof(const std::string& secret, const std::string& sn, const std::string& cn) {
  return HmacSha256(secret, cn + sn);
}

// Parses a counter stored as decimal text.
bool ParseCounter(const std::string& text, int64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  size_t i = text[0] == '-' ? 1 : 0;
  if (i == text.size()) return false;
  for (size_t j = i; j < text.size(); ++j) {
    if (text[j] < '0' || text[j] > '9') return false;
  }
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (errno != 0) return false;
  *out = v;
  return true;
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

 private:
  struct Conn {
    int fd;
    std::string peer;
    bool authenticated = false;
    bool close_after_write = false;
    bool dead = false;
    std::string server_nonce;
    std::string in;
    std::string out;
    size_t out_pos = 0;
  };

  void Loop() {
    std::vector<pollfd> fds;
    for (;;) {
      fds.clear();
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (const Conn& c : conns_) {
        short ev = c.close_after_write ? 0 : POLLIN;
        if (c.out_pos < c.out.size()) ev |= POLLOUT;
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
      for (Conn& c : conns_) {
        if (c.dead) close(c.fd);
      }
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
      Conn c;
      c.fd = fd;
      c.peer = net::ToString(sa);
      if (secret_.empty() && !net::IsLoopback(sa)) {
        CIUIC_LOG(kWarn,
                  "store server: refused %s: no job secret configured (CIUIC_SECRET), only loopback "
                  "peers are accepted",
                  c.peer.c_str());
        close(fd);
        continue;
      }
      net::SetNoDelay(fd);
      uint8_t nonce[kNonce];
      if (!net::RandomBytes(nonce, kNonce).ok()) {
        close(fd);
        continue;
      }
      c.server_nonce = Bytes(nonce, kNonce);
      c.out.append(kMagic, 4);
      net::PutU32(&c.out, kVersion);
      c.out += c.server_nonce;
      conns_.push_back(std::move(c));
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
        if (c->close_after_write) continue;  // discard after a rejection
        c->in.append(buf, static_cast<size_t>(r));
        if (!Process(c)) return;
        continue;
      }
      if (r == 0) {
        // An orderly close; not worth a warning once authenticated.
        if (!c->authenticated && !c->close_after_write) {
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
    while (c->out_pos < c->out.size()) {
      const ssize_t w = send(c->fd, c->out.data() + c->out_pos, c->out.size() - c->out_pos, MSG_NOSIGNAL);
      if (w > 0) {
        c->out_pos += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      c->dead = true;
      return;
    }
    c->out.clear();
    c->out_pos = 0;
    if (c->close_after_write) c->dead = true;
  }

  // Consumes complete frames from c->in. False when the connection is dropped.
  bool Process(Conn* c) {
    if (!c->authenticated) {
      if (c->in.size() < kProof) return true;
      const std::string cn = c->in.substr(0, kNonce);
      const Digest want = ClientProof(secret_, c->server_nonce, cn);
      if (!ConstantTimeEqual(want.data(), reinterpret_cast<const uint8_t*>(c->in.data()) + kNonce, 32)) {
        CIUIC_LOG(kWarn, "store server: rejected %s: it does not know the job secret (CIUIC_SECRET)",
                  c->peer.c_str());
        c->out.push_back(1);
        c->out.append(32, '\0');
        c->close_after_write = true;
        c->in.clear();
        return false;
      }
      const Digest proof = ServerProof(secret_, c->server_nonce, cn);
      c->out.push_back(0);
      c->out.append(reinterpret_cast<const char*>(proof.data()), proof.size());
      c->authenticated = true;
      c->in.erase(0, kProof);
    }
    size_t pos = 0;
    while (c->in.size() - pos >= kRequestHeader) {
      const uint8_t op = static_cast<uint8_t>(c->in[pos]);
      const uint32_t klen = net::GetU32(c->in.data() + pos + 1);
      const uint32_t vlen = net::GetU32(c->in.data() + pos + 5);
      if (op < kOpSet || op > kOpCheck) {
        Drop(c, "malformed frame (unknown op " + std::to_string(op) + ")");
        return false;
      }
      if (klen == 0 || klen > kMaxKeyBytes || vlen > kMaxValueBytes) {
        Drop(c, "malformed frame (key " + std::to_string(klen) + " bytes, value " +
                    std::to_string(vlen) + " bytes; limits 1.." + std::to_string(kMaxKeyBytes) + " and " +
                    std::to_string(kMaxValueBytes) + ")");
        return false;
      }
      if ((op == kOpAdd && vlen != 8) || ((op == kOpGet || op == kOpCheck) && vlen != 0)) {
        Drop(c, "malformed frame (op " + std::to_string(op) + " with a value of " + std::to_string(vlen) +
                    " bytes)");
        return false;
      }
      const size_t total = kRequestHeader + klen + vlen;
      if (c->in.size() - pos < total) break;
      std::string key = c->in.substr(pos + kRequestHeader, klen);
      const char* value = c->in.data() + pos + kRequestHeader + klen;
      Handle(c, op, key, value, vlen);
      pos += total;
    }
    c->in.erase(0, pos);
    return true;
  }

  void Reply(Conn* c, uint8_t status, const std::string& payload) {
    c->out.push_back(static_cast<char>(status));
    net::PutU32(&c->out, static_cast<uint32_t>(payload.size()));
    c->out += payload;
  }

  void Handle(Conn* c, uint8_t op, const std::string& key, const char* value, uint32_t vlen) {
    switch (op) {
      case kOpSet:
        data_[key].assign(value, vlen);
        Reply(c, kReplyOk, "");
        return;
      case kOpGet: {
        auto it = data_.find(key);
        if (it == data_.end()) Reply(c, kReplyNotFound, "");
        else Reply(c, kReplyOk, it->second);
        return;
      }
      case kOpCheck:
        Reply(c, data_.count(key) ? kReplyOk : kReplyNotFound, "");
        return;
      case kOpAdd: {
        const int64_t delta = static_cast<int64_t>(net::GetU64(value));
        int64_t cur = 0;
        auto it = data_.find(key);
        if (it != data_.end() && !ParseCounter(it->second, &cur)) {
          Reply(c, kReplyError, "key '" + key + "' holds a value that is not a counter");
          return;
        }
        const int64_t next = static_cast<int64_t>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(delta));
        data_[key] = std::to_string(next);
        std::string p;
        net::PutU64(&p, static_cast<uint64_t>(next));
        Reply(c, kReplyOk, p);
        return;
      }
    }
  }

  std::string secret_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  uint16_t port_ = 0;
  std::thread thread_;
  std::vector<Conn> conns_;                   // server thread only
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
  if (std::memcmp(greeting, kMagic, 4) != 0 || net::GetU32(greeting + 4) != kVersion) {
    close(fd);
    return FailedPreconditionError("store at " + where +
                                   " is not a ciuic store of protocol version 1 (bad greeting)");
  }
  const std::string sn(greeting + 8, kNonce);
  uint8_t cnb[kNonce];
  CIUIC_RETURN_IF_ERROR(net::RandomBytes(cnb, kNonce));
  const std::string cn = Bytes(cnb, kNonce);
  const Digest mac = ClientProof(secret, sn, cn);
  const std::string proof = cn + Bytes(mac.data(), mac.size());
  s = net::WriteAll(fd, proof.data(), proof.size(), deadline);
  if (!s.ok()) return fail(s, "authentication");
  uint8_t verdict[kVerdict];
  s = net::ReadExact(fd, verdict, kVerdict, deadline);
  if (!s.ok()) return fail(s, "authentication (reading the verdict)");
  if (verdict[0] != 0) {
    close(fd);
    return FailedPreconditionError("store at " + where +
                                   " rejected this client: the job secret (CIUIC_SECRET / "
                                   "CIUIC_SECRET_FILE) differs from the server's");
  }
  const Digest want = ServerProof(secret, sn, cn);
  if (!ConstantTimeEqual(want.data(), verdict + 1, 32)) {
    close(fd);
    return FailedPreconditionError("store at " + where +
                                   " could not prove it knows the job secret; refusing to use it");
  }
  return std::unique_ptr<TcpStoreClient>(new TcpStoreClient(fd, where, timeout));
}

TcpStoreClient::TcpStoreClient(int fd, std::string peer, std::chrono::milliseconds timeout)
    : fd_(fd), peer_(std::move(peer)), timeout_(timeout) {}

TcpStoreClient::~TcpStoreClient() {
  if (fd_ >= 0) close(fd_);
}

StatusOr<TcpStoreClient::Reply> TcpStoreClient::Request(uint8_t op, const std::string& key,
                                                        const std::string& value,
                                                        Clock::time_point deadline) {
  // Caller holds mu_.
  if (!error_.ok()) return error_;
  std::string frame;
  frame.reserve(kRequestHeader + key.size() + value.size());
  frame.push_back(static_cast<char>(op));
  net::PutU32(&frame, static_cast<uint32_t>(key.size()));
  net::PutU32(&frame, static_cast<uint32_t>(value.size()));
  frame += key;
  frame += value;
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
  Reply r;
  r.status = static_cast<uint8_t>(header[0]);
  const uint32_t len = net::GetU32(header + 1);
  if (len > kMaxValueBytes || r.status > kReplyError) {
    return broken(DataLossError("malformed reply"));
  }
  r.payload.resize(len);
  s = net::ReadExact(fd_, r.payload.data(), len, deadline);
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
