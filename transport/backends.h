// Private: the constructors of the backends, one per subfolder. Each folder
// holds the same files: <kind>_backend.cc (Backend, Endpoint, MemoryRegion,
// Connection) and whatever private helpers it needs.
#ifndef CIUIC_TRANSPORT_BACKENDS_H_
#define CIUIC_TRANSPORT_BACKENDS_H_

#include <memory>
#include <string>

#include "transport/transport.h"

namespace ciuic::transport {

StatusOr<std::unique_ptr<Backend>> OpenShmBackend(const BackendOptions& options);
StatusOr<std::unique_ptr<Backend>> OpenTcpBackend(const BackendOptions& options);
StatusOr<std::unique_ptr<Backend>> OpenVerbsBackend(const BackendOptions& options);

// Whether a verbs device is usable here (false with the reason when the
// library was built without verbs or no device/port is active).
bool VerbsUsable(const BackendOptions& options, std::string* why);

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_BACKENDS_H_
