// Backend registry and the store-based connection handshake.
#include <string>

#include "ciuic/transport.h"
#include "transport/backends.h"

namespace ciuic::transport {

const char* BackendName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kShm: return "shm";
    case BackendKind::kTcp: return "tcp";
    case BackendKind::kVerbs: return "verbs";
  }
  return "?";
}

StatusOr<BackendKind> ParseBackendKind(const std::string& name) {
  if (name == "shm") return BackendKind::kShm;
  if (name == "tcp") return BackendKind::kTcp;
  if (name == "verbs") return BackendKind::kVerbs;
  return InvalidArgumentError("unknown transport '" + name + "' (expected shm, tcp or verbs)");
}

StatusOr<std::unique_ptr<Backend>> OpenBackend(BackendKind kind, const BackendOptions& options) {
  if (options.rank < 0 || options.world_size < 1 || options.rank >= options.world_size) {
    return InvalidArgumentError("backend options: rank " + std::to_string(options.rank) +
                                " outside world size " + std::to_string(options.world_size));
  }
  switch (kind) {
    case BackendKind::kShm: return OpenShmBackend(options);
    case BackendKind::kTcp: return OpenTcpBackend(options);
    case BackendKind::kVerbs: return OpenVerbsBackend(options);
  }
  return InvalidArgumentError("unknown backend kind");
}

bool BackendAvailable(BackendKind kind, const BackendOptions& options, std::string* why) {
  if (kind == BackendKind::kVerbs) return VerbsUsable(options, why);
  return true;
}

StatusOr<std::unique_ptr<Connection>> ConnectThroughStore(Backend& backend, Store& store,
                                                          const std::string& prefix, int rank,
                                                          int peer, uint32_t tag,
                                                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> ep, backend.CreateEndpoint(peer, tag));
  auto key = [&](int from, int to) {
    return prefix + "/ep/" + BackendName(backend.kind()) + "/" + std::to_string(tag) + "/" +
           std::to_string(from) + "-" + std::to_string(to);
  };
  CIUIC_RETURN_IF_ERROR(store.Set(key(rank, peer), ep->Describe()));
  StatusOr<std::string> theirs = store.Get(key(peer, rank), timeout);
  if (!theirs.ok()) {
    return Status(theirs.status().code(),
                  "connecting to rank " + std::to_string(peer) + ": " + theirs.status().message());
  }
  return ep->Connect(*theirs, deadline);
}

}  // namespace ciuic::transport
