// The shm backend (placeholder until it lands).
#include "transport/backends.h"

namespace ciuic::transport {

StatusOr<std::unique_ptr<Backend>> OpenShmBackend(const BackendOptions& options) {
  (void)options;
  return UnimplementedError("the shm transport is not built yet");
}

}  // namespace ciuic::transport
