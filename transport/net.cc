#include "transport/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

namespace ciuic::transport::net {

StatusOr<Address> Resolve(const std::string& host, uint16_t port, bool passive) {
  std::string h = host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(h.empty() ? nullptr : h.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    return InvalidArgumentError("cannot resolve host '" + host + "': " + gai_strerror(rc));
  }
  // Prefer IPv4 when both exist (the common cluster setup).
  const addrinfo* pick = res;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      pick = a;
      break;
    }
  }
  Address out;
  std::memcpy(&out.addr, pick->ai_addr, pick->ai_addrlen);
  out.len = pick->ai_addrlen;
  out.family = pick->ai_family;
  freeaddrinfo(res);
  return out;
}

std::string ToString(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    return std::string(buf) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    return "[" + std::string(buf) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "?";
}

bool IsLoopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

Status SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    return InternalError(std::string("fcntl(O_NONBLOCK): ") + std::strerror(errno));
  }
  return Status::Ok();
}

void SetNoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Status DescriptorError(const std::string& what, int err) {
  if (err == EMFILE) {
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    const std::string raise = rl.rlim_cur < rl.rlim_max && rl.rlim_max != RLIM_INFINITY
                                  ? "raise it, e.g. ulimit -n " + std::to_string(rl.rlim_max)
                                  : "raise the hard limit (ulimit -Hn, limits.conf) or use fewer connections";
    return ResourceExhaustedError(what + ": " + std::strerror(err) + " (this process's file descriptor limit, " +
                                  "RLIMIT_NOFILE=" + std::to_string(rl.rlim_cur) + ", is reached: " + raise + ")");
  }
  if (err == ENFILE) {
    return ResourceExhaustedError(what + ": " + std::strerror(err) +
                                  " (the system's open-file table is full: fs.file-max)");
  }
  return UnavailableError(what + ": " + std::strerror(err));
}

Status RandomBytes(void* out, size_t n) {
  uint8_t* p = static_cast<uint8_t*>(out);
  while (n > 0) {
    const ssize_t r = getrandom(p, n, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return InternalError(std::string("getrandom: ") + std::strerror(errno));
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

namespace {

// Waits for `events` on fd until the deadline. Returns ok when ready.
Status WaitFd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return DeadlineExceededError("timed out");
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return UnavailableError(std::string("poll: ") + std::strerror(errno));
    if (rc > 0) return Status::Ok();
  }
}

}  // namespace

Status WriteAll(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      CIUIC_RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline));
      continue;
    }
    return UnavailableError(std::string("send failed: ") + std::strerror(errno));
  }
  return Status::Ok();
}

Status ReadExact(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
      continue;
    }
    if (r == 0) return UnavailableError("connection closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      CIUIC_RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline));
      continue;
    }
    return UnavailableError(std::string("recv failed: ") + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace ciuic::transport::net
