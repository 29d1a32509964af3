// SHA-256 and HMAC-SHA256 from OpenSSL's libcrypto, for the store and the
// data-connection handshakes and the file store's key names.
// Thread contract: pure functions.
#ifndef CIUIC_TRANSPORT_CRYPTO_H_
#define CIUIC_TRANSPORT_CRYPTO_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ciuic::transport {

using Digest = std::array<uint8_t, 32>;

Digest Sha256Of(const std::string& data);
Digest HmacSha256(const std::string& key, const std::string& data);
// The key a data-plane handshake is MACed with: HMAC(secret, label job_id),
// one per transport (`label`) and job.
Digest DataPlaneKey(const std::string& secret, const std::string& label, const std::string& job_id);
// HMAC-SHA256 keyed by a Digest.
Digest HmacSha256(const Digest& key, const std::string& data);
// Lower-case hex of `d`.
std::string ToHex(const Digest& d);
// Compares without an early exit (no timing hint about the first mismatch).
bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n);

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_CRYPTO_H_
