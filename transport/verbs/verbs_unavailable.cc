// Built instead of the verbs backend when libibverbs is not available
// (CIUIC_WITH_VERBS=OFF or libibverbs-dev missing).
#include "transport/backends.h"

namespace ciuic::transport {

StatusOr<std::unique_ptr<Backend>> OpenVerbsBackend(const BackendOptions& options) {
  (void)options;
  return UnimplementedError("ciuic was built without verbs (install libibverbs-dev, CIUIC_WITH_VERBS=ON)");
}

bool VerbsUsable(const BackendOptions& options, std::string* why) {
  (void)options;
  if (why != nullptr) *why = "ciuic was built without verbs (libibverbs-dev)";
  return false;
}

}  // namespace ciuic::transport
