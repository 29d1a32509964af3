// Transports: see transports.h.
#include "transport/transports.h"

#include <algorithm>

namespace ciuic::transport {

StatusOr<std::unique_ptr<Transports>> Transports::Open(int rank, const std::vector<BackendKind>& route,
                                                       const std::map<BackendKind, BackendOptions>& options,
                                                       size_t arena_bytes) {
  if (route.empty() || rank < 0 || rank >= static_cast<int>(route.size())) {
    return InvalidArgumentError("Transports: rank " + std::to_string(rank) + " outside a route of " +
                                std::to_string(route.size()) + " peers");
  }
  std::unique_ptr<Transports> t(new Transports());
  t->rank_ = rank;
  // The kinds in a fixed order (shm, tcp, verbs as BackendKind orders
  // them), so every rank lists and opens them alike.
  std::vector<BackendKind> kinds;
  for (size_t p = 0; p < route.size(); ++p) {
    if (static_cast<int>(p) != rank && std::find(kinds.begin(), kinds.end(), route[p]) == kinds.end()) {
      kinds.push_back(route[p]);
    }
  }
  if (kinds.empty()) kinds.push_back(route[static_cast<size_t>(rank)]);  // a single rank
  std::sort(kinds.begin(), kinds.end());
  for (BackendKind k : kinds) {
    auto o = options.find(k);
    if (o == options.end()) return InvalidArgumentError(std::string("Transports: no options for ") + BackendName(k));
    StatusOr<std::unique_ptr<Backend>> b = OpenBackend(k, o->second);
    if (!b.ok()) return Status(b.status().code(), std::string(BackendName(k)) + ": " + b.status().message());
    Child c{k, std::move(*b), nullptr};
    c.pool = std::make_unique<BufferPool>(*c.backend, arena_bytes);
    t->children_.push_back(std::move(c));
  }
  t->route_.resize(route.size(), 0);
  for (size_t p = 0; p < route.size(); ++p) {
    if (static_cast<int>(p) == rank) continue;
    t->route_[p] = static_cast<int>(std::find(kinds.begin(), kinds.end(), route[p]) - kinds.begin());
  }
  return t;
}

// Pools before their backends: a pool's regions belong to its backend.
Transports::~Transports() {
  for (Child& c : children_) c.pool.reset();
}

const Transports::Child& Transports::ChildOf(int peer) const {
  const size_t p = static_cast<size_t>(peer);
  return children_[p < route_.size() ? static_cast<size_t>(route_[p]) : 0];
}

BackendKind Transports::KindOf(int peer) const { return ChildOf(peer).kind; }
Backend& Transports::For(int peer) { return *ChildOf(peer).backend; }
BufferPool& Transports::PoolFor(int peer) { return *ChildOf(peer).pool; }

Backend* Transports::Find(BackendKind kind) {
  for (Child& c : children_) {
    if (c.kind == kind) return c.backend.get();
  }
  return nullptr;
}

BufferPool* Transports::FindPool(BackendKind kind) {
  for (Child& c : children_) {
    if (c.kind == kind) return c.pool.get();
  }
  return nullptr;
}

std::string Transports::Name() const {
  std::string out;
  for (const Child& c : children_) out += (out.empty() ? "" : "+") + std::string(BackendName(c.kind));
  return out;
}

std::string Transports::Describe() const {
  std::string out;
  for (const Child& c : children_) out += (out.empty() ? "" : " + ") + c.backend->Describe();
  return out;
}

void Transports::WaitForActivity(std::chrono::microseconds max) {
  if (children_.size() == 1) {
    children_[0].backend->WaitForActivity(max);
    return;
  }
  // shm's check costs a few loads; the network sleep wakes on its sockets
  // or completions. Spurious returns are allowed, so a slice is enough.
  const std::chrono::microseconds slice = std::min(max, kSlice);
  for (size_t i = 0; i + 1 < children_.size(); ++i) {
    Backend& b = *children_[i].backend;
    if (b.AnyActivity()) return;
    b.WaitForActivity(std::chrono::microseconds(0));  // a network kind's pumping, if any
  }
  children_.back().backend->WaitForActivity(slice);
}

bool Transports::AnyActivity() {
  for (Child& c : children_) {
    if (c.backend->AnyActivity()) return true;
  }
  return false;
}

}  // namespace ciuic::transport
