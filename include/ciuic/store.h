// ciuic::transport::Store: the key/value store ranks rendezvous through.
// Implement it to bring your own rendezvous (a framework's store) to
// Communicator::CreateWithStore; the library's own TCP and file stores
// are internal.
#ifndef CIUIC_STORE_H_
#define CIUIC_STORE_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ciuic/status.h"

namespace ciuic::transport {

inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = 64u << 20;

// A key/value store for rendezvous. Values are byte strings (std::string,
// binary-safe). Keys are at most kMaxKeyBytes, values kMaxValueBytes.
// Thread contract: implementations must be thread-safe (the library calls
// a store from the caller's thread and its progress thread).
class Store {
 public:
  virtual ~Store() = default;
  // Stores `value` under `key` (replacing any value).
  // Errors: kInvalidArgument (key empty or too long, value too long),
  // kUnavailable / kDeadlineExceeded (store unreachable).
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting until it exists or `timeout` expires.
  // Errors: kDeadlineExceeded naming the key, kInvalidArgument, kUnavailable.
  virtual StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Waits until every key exists. Errors: kDeadlineExceeded naming a missing
  // key, kInvalidArgument, kUnavailable.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the counter `key` (missing = 0) and returns
  // the new value. Errors: kFailedPrecondition (the key holds a non-counter
  // value), kInvalidArgument, kUnavailable.
  virtual StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
};

}  // namespace ciuic::transport

#endif  // CIUIC_STORE_H_
