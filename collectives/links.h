// Private: one rank's links to its peers, made on first use, and what it
// knows of its peers' processes (to name one that died before it connected).
//
// A collective asks for its links in ascending peer order before its
// schedule starts and waits for each (every rank does the same, so the
// waits cannot deadlock); send/recv make theirs without waiting on the peer
// (Link::Builder), because a rank whose first operation is a send to its
// neighbour must not wait for that neighbour to ask for the link.
//
// Thread contract: one thread at a time (the communicator's exec lock).
#ifndef CIUIC_COLLECTIVES_LINKS_H_
#define CIUIC_COLLECTIVES_LINKS_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ciuic/status.h"
#include "transport/transport.h"
#include "transport/transports.h"

namespace ciuic::collectives {

class LinkTable {
 public:
  // Links to each peer through its backend in `transports`, rings from
  // that backend's pool, set up through `store` under `prefix`; `timeout`
  // bounds every wait for a peer.
  LinkTable(transport::Transports& transports, transport::Store& store, std::string prefix, int rank, int size,
            const transport::LinkOptions& options, std::chrono::milliseconds timeout);
  ~LinkTable();
  LinkTable(const LinkTable&) = delete;
  LinkTable& operator=(const LinkTable&) = delete;

  // The link to `peer` on `channel`. `wait` (collectives): set it up now,
  // waiting for the peer. Otherwise (send/recv) null while it is being set
  // up without waiting (call again: see Executor's LinkSource). Errors:
  // kDeadlineExceeded / kUnavailable naming the peer, the link's.
  StatusOr<transport::Link*> Get(int peer, int channel, bool wait);

  // An error naming `peer` when it ran on this host and has exited; run
  // while waiting for its store keys (links, the direct region), so a rank
  // that died before it connected is named within kPeerCheckEvery, not at
  // the timeout. At most one look per kPeerCheckEvery and peer.
  Status CheckPeer(int peer);
  // CheckPeer as the callback waits take (valid while this table lives).
  const transport::PeerCheck& peer_check() const { return peer_check_; }

 private:
  // At most one look at the store per kPoll and link being built (a tcp
  // store answers each over the network).
  static constexpr std::chrono::microseconds kPoll{200};
  struct Building {
    std::unique_ptr<transport::Link::Builder> builder;
    std::chrono::steady_clock::time_point next_poll;
  };
  struct PeerProcess {
    std::string identity;       // its ProcessIdentity (empty: it has none)
    bool read = false;          // identity read from the store (published at init)
    std::chrono::steady_clock::time_point checked;  // of the last look
  };

  transport::Transports& transports_;
  transport::Store& store_;
  const std::string prefix_;
  const int rank_, size_;
  const transport::LinkOptions options_;
  const std::chrono::milliseconds timeout_;
  std::map<std::pair<int, int>, std::unique_ptr<transport::Link>> links_;
  std::map<std::pair<int, int>, Building> building_;
  std::vector<PeerProcess> peers_;
  transport::PeerCheck peer_check_;
};

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_LINKS_H_
