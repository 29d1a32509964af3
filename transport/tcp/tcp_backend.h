// Private: the tcp backend's shared state — listening socket and acceptor
// (hellos matched to endpoints), region table, and the sockets that
// WaitForActivity watches. Endpoints, regions and connections (see
// tcp_connection.h) all point back to their TcpBackend.
//
// Thread contract: as for every Backend (transport/backend.h), one
// thread at a time per object; but the objects made from one backend may be
// used from different threads at once (a progress thread running
// Connection::Progress while the caller registers memory), so the state
// shared through the backend (regions, endpoints, acceptor, watched
// sockets) is guarded by mutexes here. The backend outlives everything made
// from it.
#ifndef CIUIC_TRANSPORT_TCP_TCP_BACKEND_H_
#define CIUIC_TRANSPORT_TCP_TCP_BACKEND_H_

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "transport/tcp/tcp_iface.h"
#include "transport/tcp/tcp_wire.h"

namespace ciuic::transport::tcp {

using Clock = std::chrono::steady_clock;

// Socket buffer size every data socket must be able to reach: left to the
// kernel's autotuning where that goes this far (it costs less CPU than a
// fixed size, see BufferSize in tcp_backend.cc), else set explicitly.
inline constexpr int kSocketBufferBytes = 4 << 20;
// A socket accepted without a complete hello is dropped after this long.
inline constexpr std::chrono::seconds kHelloTimeout{30};
inline constexpr std::chrono::milliseconds kPumpPeriod{50};
// At most this many accepted sockets wait for their hello at once; beyond
// it, one that has waited kHelloGrace makes room.
inline constexpr size_t kMaxPendingSockets = 64;
inline constexpr std::chrono::seconds kHelloGrace{2};

// One connection socket as WaitForActivity sees it. Owned by the
// connection; the flags are written by its (single) progressing thread and
// read by WaitForActivity on any thread.
struct SocketWatch {
  int rx_fd = -1;
  int tx_fd = -1;
  std::atomic<bool> want_out{false};  // frames wait for send buffer space
  std::atomic<bool> rx_buffered{false};  // frames read ahead, not yet parsed
  std::atomic<bool> active{true};     // false once the connection failed
};

// A socket whose hello arrived and passed the backend-level checks; waits
// here until the endpoint named by its acceptor nonce connects.
struct AcceptedSocket {
  int fd = -1;
  std::string from;  // remote ip:port, for logs
  Hello hello;
};

class TcpBackend final : public Backend {
 public:
  // Picks the interface, listens on it (port 0). Errors: kInvalidArgument
  // (bad knob or job id: the variable is named), kUnavailable (no interface
  // matches CIUIC_SOCKET_IFNAME, socket/bind/listen failed).
  static StatusOr<std::unique_ptr<TcpBackend>> Open(const BackendOptions& options);
  ~TcpBackend() override;
  TcpBackend(const TcpBackend&) = delete;
  TcpBackend& operator=(const TcpBackend&) = delete;

  BackendKind kind() const override { return BackendKind::kTcp; }
  std::string Describe() const override;
  StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(int peer, uint32_t tag) override;
  StatusOr<std::unique_ptr<MemoryRegion>> Allocate(size_t bytes) override;
  StatusOr<std::unique_ptr<MemoryRegion>> Register(void* addr, size_t bytes) override;
  void WaitForActivity(std::chrono::microseconds max) override;

  // ---- for the tcp objects (any thread) ----
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  int nsocks() const { return nsocks_; }
  uint64_t instance() const { return instance_; }
  const std::string& job_id() const { return job_id_; }
  // The key of the hello and accept-proof MACs (tcp_wire.h).
  const Digest& data_key() const { return data_key_; }
  const Interface& interface() const { return iface_; }
  uint16_t port() const { return port_; }

  // The address of byte `offset` of registered region `id` if `key`
  // matches and [offset, offset+len) lies inside it; nullptr with `*why`
  // set otherwise.
  uint8_t* ResolveRegion(uint32_t id, uint32_t key, uint64_t offset, uint64_t len,
                         std::string* why);
  // Adds [base, base+size) to the region table; returns its id and key.
  void AddRegion(uint8_t* base, uint64_t size, uint32_t* id, uint32_t* key);
  void RemoveRegion(uint32_t id);

  // Endpoints waiting for accepted sockets, by their nonce.
  void AddEndpoint(const Nonce& nonce, int peer, uint32_t tag);
  // Forgets the endpoint and closes the sockets stashed for it.
  void RemoveEndpoint(const Nonce& nonce);
  // Waits until the connector `peer` (its description) has opened every
  // socket of the endpoint `nonce`; fills rx_fds[0..nsocks). Sockets whose
  // hello does not match `peer` are rejected (logged, closed); each one kept
  // is sent its accept proof unless `self` (a connection to oneself).
  // Errors: kDeadlineExceeded naming the peer rank.
  Status AwaitSockets(const Nonce& nonce, const EndpointInfo& peer, int nsocks, bool self,
                      Clock::time_point deadline, std::vector<int>* rx_fds);

  // A new data socket towards `peer` with the backend's options (non-
  // blocking, TCP_NODELAY, buffer sizes), connected before `deadline`.
  // Errors: kUnavailable (refused: the peer's backend is gone),
  // kDeadlineExceeded, both naming the peer rank.
  StatusOr<int> ConnectTo(const EndpointInfo& peer, Clock::time_point deadline);
  // Applies the data-socket options to `fd`.
  void ConfigureSocket(int fd) const;

  // Takes new sockets and hellos off the listener at most every
  // kPumpPeriod, without blocking (another thread pumping is enough): calls
  // that spin instead of waiting in WaitForActivity still turn strangers
  // away, with their warning, while the job runs.
  void MaybePump();

  void Watch(SocketWatch* w);
  void Unwatch(SocketWatch* w);

  uint32_t RandomKey();

  // A closing connection's linger (TcpConnection::LingerBeforeClose) that
  // ran out says so here; connections closed within the next `window` then
  // do not wait again. Closing many connections to unreachable peers (a cut
  // link) so costs one linger, not one per connection.
  void LingerRanOut(std::chrono::steady_clock::time_point at);
  bool LingerRanOutWithin(std::chrono::steady_clock::duration window) const;

 private:
  TcpBackend() = default;
  // Accepts pending connections and reads their hellos without blocking;
  // complete hellos go to stash_ or are rejected. Needs acceptor_mu_.
  void PumpLocked();
  void Reject(int fd, const std::string& from, const std::string& why);
  // Sends `a` its accept proof; false (errno set) when it could not.
  bool SendAcceptProof(const AcceptedSocket& a) const;

  int rank_ = 0;
  int world_size_ = 1;
  int nsocks_ = 1;
  std::string job_id_;
  Digest data_key_{};
  Interface iface_;
  Config config_;       // CIUIC_NUMA_POLICY for Allocate
  int numa_node_ = -1;  // OS NUMA node of iface_ (-1: none/unknown)
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  uint64_t instance_ = 0;
  int sndbuf_ = 0;  // 0 = leave to the kernel
  int rcvbuf_ = 0;

  std::mutex rng_mu_;
  std::mt19937_64 rng_;
  std::atomic<int64_t> linger_ran_out_ns_{0};  // steady_clock; 0: never

  struct RegionEntry {
    uint8_t* base = nullptr;
    uint64_t size = 0;
    uint32_t key = 0;  // 0 = free slot
  };
  std::mutex regions_mu_;
  std::vector<RegionEntry> regions_;  // index = id; id 0 is never used
  std::vector<uint32_t> free_ids_;

  struct Pending {
    int fd = -1;
    std::string from;
    Clock::time_point since;
    std::vector<uint8_t> buf;  // hello bytes so far
    size_t got = 0;
    size_t need = kHelloFixedBytes;
    Hello hello;
  };
  struct EndpointEntry {
    int peer = 0;
    uint32_t tag = 0;
  };
  std::mutex acceptor_mu_;
  std::atomic<int64_t> next_pump_ns_{0};  // MaybePump's next turn (steady clock)
  std::vector<Pending> pending_;
  // When accept() last warned: out of descriptors, the listener stays
  // readable and every pump would warn again.
  Clock::time_point accept_warned_{};
  std::map<Nonce, EndpointEntry> endpoints_;
  std::map<Nonce, std::vector<AcceptedSocket>> stash_;

  std::mutex watch_mu_;
  std::vector<SocketWatch*> watched_;
};

}  // namespace ciuic::transport::tcp

#endif  // CIUIC_TRANSPORT_TCP_TCP_BACKEND_H_
