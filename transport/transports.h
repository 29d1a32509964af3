// Private: one rank's backends when its peers are reached through several
// kinds (shm inside its host, tcp or verbs between hosts), one BufferPool
// per kind, and the kind of each pair. A Link takes its backend and pool
// from here, so every region it describes or writes is native to its kind.
//
// Thread contract: the route and children are fixed at Open; the pools are
// thread-safe; WaitForActivity from one thread at a time (the
// communicator's exec lock), like a Backend's.
#ifndef CIUIC_TRANSPORT_TRANSPORTS_H_
#define CIUIC_TRANSPORT_TRANSPORTS_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ciuic/status.h"
#include "transport/backend.h"
#include "transport/pool.h"

namespace ciuic::transport {

class Transports final : public ActivityWaiter {
 public:
  // `route[p]`: the kind of the pair (rank, p), for every p (route[rank]
  // is not used). Opens each kind the route names once, with
  // `options[kind]`, and a BufferPool of `arena_bytes` arenas for each.
  // Errors: kInvalidArgument (an empty route, a kind without options),
  // the backends' own, prefixed with the kind.
  static StatusOr<std::unique_ptr<Transports>> Open(int rank, const std::vector<BackendKind>& route,
                                                    const std::map<BackendKind, BackendOptions>& options,
                                                    size_t arena_bytes);
  ~Transports() override;
  Transports(const Transports&) = delete;
  Transports& operator=(const Transports&) = delete;

  BackendKind KindOf(int peer) const;
  Backend& For(int peer);
  BufferPool& PoolFor(int peer);
  // The backend / pool of `kind`; null when no peer uses it.
  Backend* Find(BackendKind kind);
  BufferPool* FindPool(BackendKind kind);
  // One kind for every peer of this rank (then WaitForActivity is that
  // backend's own, bit for bit).
  bool uniform() const { return children_.size() == 1; }
  // The kinds in use, "shm+tcp" (one kind: its name).
  std::string Name() const;
  // Each backend's Describe(), joined by " + ".
  std::string Describe() const;

  // One backend: its own sleep. Several: shm's ring check (no sleep; a
  // post already there returns at once), then the network backend's sleep
  // for at most kSlice; WaitFor calls again, so an shm hand-off is noticed
  // at most kSlice late while this rank sleeps.
  static constexpr std::chrono::microseconds kSlice{200};
  void WaitForActivity(std::chrono::microseconds max) override;
  // Any child's.
  bool AnyActivity() override;

 private:
  struct Child {
    BackendKind kind;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<BufferPool> pool;
  };
  Transports() = default;
  const Child& ChildOf(int peer) const;

  int rank_ = 0;
  std::vector<Child> children_;  // shm first, then the network kinds
  std::vector<int> route_;       // index into children_ per peer
};

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_TRANSPORTS_H_
