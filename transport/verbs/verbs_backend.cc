// The verbs backend (placeholder until it lands).
#include "transport/backends.h"

namespace ciuic::transport {

StatusOr<std::unique_ptr<Backend>> OpenVerbsBackend(const BackendOptions& options) {
  (void)options;
  return UnimplementedError("the verbs transport is not built yet");
}

bool VerbsUsable(const BackendOptions& options, std::string* why) {
  (void)options;
  if (why != nullptr) *why = "the verbs transport is not built yet";
  return false;
}

}  // namespace ciuic::transport
