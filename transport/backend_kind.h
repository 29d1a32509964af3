// Private: the kinds of data transport and their names (header-only, so the
// schedule layer can name transports without linking them).
#ifndef CIUIC_TRANSPORT_BACKEND_KIND_H_
#define CIUIC_TRANSPORT_BACKEND_KIND_H_

#include <cstdint>
#include <string>

#include "ciuic/status.h"
#include "common/log.h"

namespace ciuic::transport {

enum class BackendKind : uint8_t { kShm = 1, kTcp = 2, kVerbs = 3 };

// "shm", "tcp", "verbs".
inline const char* BackendName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kShm: return "shm";
    case BackendKind::kTcp: return "tcp";
    case BackendKind::kVerbs: return "verbs";
  }
  return "?";
}

// Parses "shm", "tcp" or "verbs". Errors: kInvalidArgument.
inline StatusOr<BackendKind> ParseBackendKind(const std::string& name) {
  if (name == "shm") return BackendKind::kShm;
  if (name == "tcp") return BackendKind::kTcp;
  if (name == "verbs") return BackendKind::kVerbs;
  return InvalidArgumentError("unknown transport '" + LogSafe(name) + "' (expected shm, tcp or verbs)");
}

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_BACKEND_KIND_H_
