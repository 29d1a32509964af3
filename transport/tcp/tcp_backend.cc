// The tcp backend (placeholder until it lands).
#include "transport/backends.h"

namespace ciuic::transport {

StatusOr<std::unique_ptr<Backend>> OpenTcpBackend(const BackendOptions& options) {
  (void)options;
  return UnimplementedError("the tcp transport is not built yet");
}

}  // namespace ciuic::transport
