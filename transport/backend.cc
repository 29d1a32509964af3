// Backend registry and the store-based connection handshake.
#include <algorithm>
#include <string>

#include "transport/transport.h"
#include "transport/backends.h"

namespace ciuic::transport {

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

std::string EndpointKey(const Backend& backend, const std::string& prefix, uint32_t tag, int from, int to) {
  return prefix + "/ep/" + BackendName(backend.kind()) + "/" + std::to_string(tag) + "/" + std::to_string(from) +
         "-" + std::to_string(to);
}

StatusOr<std::unique_ptr<Endpoint>> PublishEndpoint(Backend& backend, Store& store, const std::string& prefix,
                                                    int rank, int peer, uint32_t tag) {
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> ep, backend.CreateEndpoint(peer, tag));
  CIUIC_RETURN_IF_ERROR(store.Set(EndpointKey(backend, prefix, tag, rank, peer), ep->Describe()));
  return ep;
}

StatusOr<std::unique_ptr<Connection>> ConnectPublished(Backend& backend, Store& store, Endpoint& endpoint,
                                                       const std::string& prefix, int rank, int peer,
                                                       uint32_t tag, std::chrono::milliseconds wait,
                                                       std::chrono::steady_clock::time_point deadline) {
  StatusOr<std::string> theirs = store.Get(EndpointKey(backend, prefix, tag, peer, rank), wait);
  if (!theirs.ok()) {
    if (theirs.status().code() == StatusCode::kDeadlineExceeded) return std::unique_ptr<Connection>();
    return Status(theirs.status().code(),
                  "connecting to rank " + std::to_string(peer) + ": " + theirs.status().message());
  }
  return endpoint.Connect(*theirs, deadline);
}

StatusOr<std::string> GetWhilePeerLives(Store& store, const std::string& key, std::chrono::milliseconds timeout,
                                        int peer, const PeerCheck& check) {
  if (!check) return store.Get(key, timeout);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    StatusOr<std::string> v = store.Get(key, std::max(std::chrono::milliseconds(0), std::min(left, kPeerCheckEvery)));
    if (v.ok() || v.status().code() != StatusCode::kDeadlineExceeded) return v;
    CIUIC_RETURN_IF_ERROR(check(peer));
    if (left <= kPeerCheckEvery) {
      return DeadlineExceededError("store key '" + key + "' was not set within " + std::to_string(timeout.count()) +
                                   " ms");
    }
  }
}

StatusOr<std::unique_ptr<Connection>> ConnectThroughStore(Backend& backend, Store& store,
                                                          const std::string& prefix, int rank,
                                                          int peer, uint32_t tag,
                                                          std::chrono::milliseconds timeout,
                                                          const PeerCheck& check) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> ep, PublishEndpoint(backend, store, prefix, rank, peer, tag));
  std::unique_ptr<Connection> conn;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    const auto slice = check ? std::min(left, kPeerCheckEvery) : left;
    CIUIC_ASSIGN_OR_RETURN(conn, ConnectPublished(backend, store, *ep, prefix, rank, peer, tag,
                                                  std::max(std::chrono::milliseconds(0), slice), deadline));
    if (conn != nullptr || !check || left <= kPeerCheckEvery) break;
    CIUIC_RETURN_IF_ERROR(check(peer));
  }
  if (conn == nullptr) {
    return DeadlineExceededError("connecting to rank " + std::to_string(peer) + ": store key '" +
                                 EndpointKey(backend, prefix, tag, peer, rank) + "' was not set within " +
                                 std::to_string(timeout.count()) + " ms (rank " + std::to_string(peer) +
                                 " has not connected to this rank)");
  }
  return conn;
}

}  // namespace ciuic::transport
