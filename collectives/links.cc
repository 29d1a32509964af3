// LinkTable: see links.h.
#include "collectives/links.h"

#include <thread>

#include "collectives/bootstrap.h"

namespace ciuic::collectives {

using Clock = std::chrono::steady_clock;

LinkTable::LinkTable(transport::Transports& transports, transport::Store& store, std::string prefix, int rank,
                     int size, const transport::LinkOptions& options, std::chrono::milliseconds timeout)
    : transports_(transports),
      store_(store),
      prefix_(std::move(prefix)),
      rank_(rank),
      size_(size),
      options_(options),
      timeout_(timeout),
      peers_(static_cast<size_t>(size)),
      peer_check_([this](int peer) { return CheckPeer(peer); }) {}

// Builders before links: a builder may hold a link it is finishing.
LinkTable::~LinkTable() {
  building_.clear();
  links_.clear();
}

Status LinkTable::CheckPeer(int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) return Status::Ok();
  PeerProcess& pp = peers_[peer];
  const Clock::time_point now = Clock::now();
  if (now - pp.checked < transport::kPeerCheckEvery) return Status::Ok();
  pp.checked = now;
  StatusOr<std::string> failed = store_.Get(InitFailedKey(prefix_, peer), std::chrono::milliseconds(0));
  if (failed.ok()) {
    return UnavailableError("rank " + std::to_string(peer) + " failed to initialise and will never connect: " +
                            *failed);
  }
  if (!pp.read) {
    StatusOr<std::string> v = store_.Get(prefix_ + "/process/" + std::to_string(peer), std::chrono::milliseconds(0));
    if (!v.ok()) return Status::Ok();  // not there (yet): nothing to tell
    pp.identity = *v;
    pp.read = true;
  }
  if (pp.identity.empty() || !transport::ProcessGone(pp.identity)) return Status::Ok();
  const std::string& id = pp.identity;
  const size_t pid_at = id.find(' ', id.find(' ') + 1) + 1;
  return UnavailableError("rank " + std::to_string(peer) + " (pid " + id.substr(pid_at, id.find(' ', pid_at) - pid_at) +
                          " on this host) has exited; it will never connect");
}

StatusOr<transport::Link*> LinkTable::Get(int peer, int channel, bool wait) {
  const auto key = std::make_pair(peer, channel);
  auto it = links_.find(key);
  if (it != links_.end()) return it->second.get();
  auto keep = [&](std::unique_ptr<transport::Link> l) { return links_.emplace(key, std::move(l)).first->second.get(); };
  auto b = building_.find(key);
  if (wait && b == building_.end()) {
    CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<transport::Link> l,
                           transport::Link::Create(transports_.For(peer), transports_.PoolFor(peer), store_, prefix_, rank_, peer,
                                                   static_cast<uint32_t>(channel), options_, timeout_, peer_check_));
    return keep(std::move(l));
  }
  // Built without waiting on the peer; a collective that finds a link a
  // send/recv began waits for it here.
  const auto until = Clock::now() + timeout_;
  for (;;) {
    const auto now = Clock::now();
    if (b == building_.end()) {
      CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<transport::Link::Builder> builder,
                             transport::Link::Builder::Start(transports_.For(peer), transports_.PoolFor(peer), store_, prefix_, rank_, peer,
                                                             static_cast<uint32_t>(channel), options_, timeout_));
      b = building_.emplace(key, Building{std::move(builder), now}).first;
    }
    if (now >= b->second.next_poll) {
      b->second.next_poll = now + kPoll;
      CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<transport::Link> l, b->second.builder->Poll());
      if (l != nullptr) {
        building_.erase(b);
        return keep(std::move(l));
      }
      if (wait) CIUIC_RETURN_IF_ERROR(CheckPeer(peer));
    }
    if (!wait) return nullptr;
    if (now >= until) {
      return DeadlineExceededError("connecting to rank " + std::to_string(peer) + ": no answer within " +
                                   std::to_string(timeout_.count()) + " ms");
    }
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace ciuic::collectives
