// Socket helpers of the TCP store: address resolution, deadline-bounded I/O
// on non-blocking sockets, big-endian integers, random nonces.
// Thread contract: free functions; a socket is used by one thread at a time.
#ifndef CIUIC_TRANSPORT_NET_H_
#define CIUIC_TRANSPORT_NET_H_

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ciuic/status.h"
#include "common/log.h"

namespace ciuic::transport::net {

using Clock = std::chrono::steady_clock;

struct Address {
  sockaddr_storage addr{};
  socklen_t len = 0;
  int family = 0;
};

// Resolves host:port (host "" with `passive` = any address).
// Errors: kInvalidArgument naming the host.
StatusOr<Address> Resolve(const std::string& host, uint16_t port, bool passive);
// "1.2.3.4:5" / "[::1]:5".
std::string ToString(const sockaddr* sa);
bool IsLoopback(const sockaddr* sa);
using ciuic::LogSafe;  // common/log.h
Status SetNonBlocking(int fd);
void SetNoDelay(int fd);
// Fills `out` with `n` random bytes from the kernel. Errors: kInternal.
Status RandomBytes(void* out, size_t n);
// A kResourceExhausted for EMFILE / ENFILE from `what` (socket, accept,
// memfd_create...) naming the limit to raise, else a kUnavailable with
// strerror(err).
Status DescriptorError(const std::string& what, int err);

// Writes / reads exactly n bytes before `deadline`.
// Errors: kUnavailable (peer closed, I/O error), kDeadlineExceeded.
Status WriteAll(int fd, const void* data, size_t n, Clock::time_point deadline);
Status ReadExact(int fd, void* data, size_t n, Clock::time_point deadline);

inline void PutU32(std::string* s, uint32_t v) {
  for (int i = 3; i >= 0; --i) s->push_back(static_cast<char>(v >> (8 * i)));
}
inline void PutU64(std::string* s, uint64_t v) {
  for (int i = 7; i >= 0; --i) s->push_back(static_cast<char>(v >> (8 * i)));
}
inline uint32_t GetU32(const void* p) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}
inline uint64_t GetU64(const void* p) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  return (uint64_t{GetU32(b)} << 32) | GetU32(b + 4);
}
// Little-endian 64-bit values (the Link's ring descriptions and credits).
inline void PutLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t GetLe64(const void* p) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(b[i]) << (8 * i);
  return v;
}

}  // namespace ciuic::transport::net

#endif  // CIUIC_TRANSPORT_NET_H_
