// SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104) for the store handshake.
// Thread contract: pure functions; Sha256 objects are not shared.
#ifndef CIUIC_TRANSPORT_SHA256_H_
#define CIUIC_TRANSPORT_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ciuic::transport {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  void Update(const void* data, size_t size);
  void Update(const std::string& s) { Update(s.data(), s.size()); }
  Digest Finish();

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
};

Digest Sha256Of(const std::string& data);
Digest HmacSha256(const std::string& key, const std::string& data);
// Lower-case hex of `d`.
std::string ToHex(const Digest& d);
// Compares without an early exit (no timing hint about the first mismatch).
bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_SHA256_H_
