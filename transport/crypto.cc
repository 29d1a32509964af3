// Thin wrappers over libcrypto's one-shot SHA256 and HMAC: a vetted
// implementation instead of a hand-written one (issue #21).
#include "transport/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <pthread.h>

#include <cstdlib>
#include <mutex>

namespace ciuic::transport {
namespace {

// libcrypto takes locks of its own (algorithm fetches, one-time inits) and
// has no fork handlers: a fork while another of our threads was inside it
// left the child a lock held forever (a rank forked beside a store server
// hung in its first HMAC). Our calls hold this mutex, and fork waits for it.
std::mutex& CryptoMutex() {
  static std::mutex* mu = new std::mutex;  // never destroyed: usable during exit
  return *mu;
}

// Registered when the library loads, not on first use: a std::call_once
// that another thread is inside at a fork stays "running" in the child, whose
// first crypto call would then wait on it forever.
const int kForkHandlers = pthread_atfork([] { CryptoMutex().lock(); }, [] { CryptoMutex().unlock(); },
                                         [] { CryptoMutex().unlock(); });

// libcrypto's per-thread state is freed at thread exit by a key destructor
// that takes its global thread-list lock outside our mutex: a fork then
// left the child that lock held (its first HMAC hung in ERR_set_mark's
// CRYPTO_THREAD_write_lock, 1 round in ~6000 of the fork test). A
// thread_local's destructor runs before key destructors: it stops libcrypto's
// thread state under our mutex, and the key destructor finds nothing left.
struct ThreadStop {
  ~ThreadStop() {
    const std::lock_guard<std::mutex> lock(CryptoMutex());
    OPENSSL_thread_stop();
  }
};

class CryptoLock {
 public:
  CryptoLock() {
    (void)kForkHandlers;
    static thread_local ThreadStop stop;
    (void)stop;
    CryptoMutex().lock();
  }
  ~CryptoLock() { CryptoMutex().unlock(); }
  CryptoLock(const CryptoLock&) = delete;
  CryptoLock& operator=(const CryptoLock&) = delete;
};

}  // namespace

Digest Sha256Of(const std::string& data) {
  Digest d{};
  const CryptoLock lock;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), d.data());
  return d;
}

Digest HmacSha256(const std::string& key, const std::string& data) {
  Digest d{};
  unsigned int len = 0;
  const CryptoLock lock;
  // HMAC() fails only when the digest is unavailable (a broken libcrypto):
  // continuing would compare against a zero MAC, so stop instead.
  const unsigned char* r = HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                                reinterpret_cast<const unsigned char*>(data.data()), data.size(),
                                d.data(), &len);
  if (r == nullptr || len != d.size()) std::abort();
  return d;
}

Digest DataPlaneKey(const std::string& secret, const std::string& label, const std::string& job_id) {
  return HmacSha256(secret, label + '\0' + job_id);
}

Digest HmacSha256(const Digest& key, const std::string& data) {
  return HmacSha256(std::string(reinterpret_cast<const char*>(key.data()), key.size()), data);
}

std::string ToHex(const Digest& d) {
  static const char kHex[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * d.size());
  for (uint8_t b : d) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

bool ConstantTimeEqual(const uint8_t* a, const uint8_t* b, size_t n) {
  return CRYPTO_memcmp(a, b, n) == 0;
}

}  // namespace ciuic::transport
