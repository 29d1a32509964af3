// Private: the data transports' SPI. A Backend (one per kind: shm, tcp,
// verbs) opens the local device, makes
// Endpoints (half-made connections whose description is exchanged through
// the Store) and registers memory. A Connection to one peer carries
// one-sided writes of a local registered range into a remote registered
// range, each with a 32-bit immediate the receiver sees as a completion, and
// small two-sided messages. Above Connection, Link (below) implements the
// credit-based ring of slots every collective uses.
//
// Thread contract for Backend, Endpoint, Connection and MemoryRegion: one
// thread at a time per object (the caller or the progress thread); a Backend
// outlives every Connection, Endpoint and MemoryRegion made from it.
// Progress() never blocks.
#ifndef CIUIC_TRANSPORT_BACKEND_H_
#define CIUIC_TRANSPORT_BACKEND_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ciuic/config.h"
#include "ciuic/status.h"
#include "ciuic/store.h"
#include "transport/backend_kind.h"

namespace ciuic::transport {

// The largest payload of a two-sided message.
inline constexpr size_t kMaxMessageBytes = 64;

// Local memory registered with a backend. Destroying it deregisters it; a
// write still in flight from or into it is the caller's bug.
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  void* data() const { return data_; }
  size_t size() const { return size_; }
  // What a peer passes to Connection::ImportRegion to write into this
  // region (verbs: address and rkeys; shm: the segment; tcp: an id). Opaque
  // bytes; valid while this region lives.
  virtual std::string Describe() const = 0;

 protected:
  MemoryRegion(void* data, size_t size) : data_(data), size_(size) {}

 private:
  void* data_;
  size_t size_;
};

// A peer's region imported into one Connection. Plain value.
struct RemoteRegion {
  uint32_t id = 0;    // index in the connection's import table
  uint64_t size = 0;  // bytes writable
};

struct Completion {
  enum class Kind : uint8_t {
    kWriteDone,      // local: write `wr_id` completed; its source may be reused
    kWriteReceived,  // remote: a peer's write landed; `imm` is its immediate
    kMessage,        // remote: a two-sided message; `data[0..len)`
  };
  Kind kind = Kind::kWriteDone;
  uint32_t imm = 0;
  uint32_t len = 0;
  uint64_t wr_id = 0;
  uint8_t data[kMaxMessageBytes] = {};
};

// A reliable, ordered connection to one peer.
class Connection {
 public:
  virtual ~Connection() = default;
  int peer() const { return peer_; }

  // Makes a peer's region description (MemoryRegion::Describe on the peer)
  // writable through this connection. Errors: kInvalidArgument (malformed or
  // foreign blob), kUnavailable (cannot map/attach it).
  virtual StatusOr<RemoteRegion> ImportRegion(const std::string& blob) = 0;

  // Queues a write of `len` bytes from `src` at `src_offset` into `dst` at
  // `dst_offset`. When every byte has landed the peer's Progress returns
  // {kWriteReceived, imm}; this side's Progress returns {kWriteDone, wr_id}
  // once `src` may be reused. Writes and messages are delivered to the peer
  // in the order they were posted. `len` may be 0 (a notification only).
  // Non-blocking. Errors: kInvalidArgument (a range outside its region),
  // kResourceExhausted (max_outstanding() writes not yet done: progress and
  // retry), or the connection's sticky error.
  virtual Status PostWrite(const MemoryRegion& src, size_t src_offset, RemoteRegion dst,
                           size_t dst_offset, size_t len, uint32_t imm, uint64_t wr_id) = 0;

  // Queues a message of up to kMaxMessageBytes; delivered in order with the
  // writes as {kMessage, data, len}. Non-blocking. Errors: kInvalidArgument
  // (too long), kResourceExhausted (too many queued: progress and retry), or
  // the sticky error.
  virtual Status PostMessage(const void* data, size_t len) = 0;

  // Advances the connection without blocking and appends up to `max`
  // completions to `out`. Returns how many. Errors (sticky, naming the
  // peer): kUnavailable (peer closed or died, link down), kDataLoss (a
  // malformed frame), kInternal (device error).
  virtual StatusOr<size_t> Progress(Completion* out, size_t max) = 0;

  // Progress of the sending side only (hands queued writes and messages
  // over, completes them), for a caller that expects nothing from the peer
  // now: no receive system call. The default progresses both sides.
  virtual StatusOr<size_t> ProgressSends(Completion* out, size_t max) { return Progress(out, max); }

  // How many writes may be outstanding (posted, no kWriteDone yet).
  virtual size_t max_outstanding() const = 0;

  // True when a message posted right after a write travels with it at no
  // extra cost (tcp: one sendmsg, one segment), so a Link may return its
  // credits with every chunk it sends instead of in separate messages.
  virtual bool MessagesRideWithWrites() const { return false; }

  // False only when nothing posted here waits for this side's Progress
  // (every write and message handed over and completed), so a caller that
  // expects nothing from the peer may skip Progress. The default (true)
  // asks to be progressed always.
  virtual bool HasQueuedSends() const { return true; }

  // If `dst` is directly addressable from this process (shm), a pointer to
  // its byte `offset`, so kernels can write the payload in place and a
  // zero-length PostWrite then only notifies. nullptr otherwise.
  virtual void* PeerMemoryPointer(RemoteRegion dst, size_t offset) {
    (void)dst;
    (void)offset;
    return nullptr;
  }

 protected:
  explicit Connection(int peer) : peer_(peer) {}

 private:
  int peer_;
};

// A connection being made: Describe() is published for the peer, whose own
// description is passed to Connect.
class Endpoint {
 public:
  virtual ~Endpoint() = default;
  virtual std::string Describe() const = 0;
  // Completes the connection with the peer's description, waiting for the
  // peer until `deadline`. Errors: kInvalidArgument (malformed blob),
  // kDeadlineExceeded / kUnavailable naming the peer.
  virtual StatusOr<std::unique_ptr<Connection>> Connect(
      const std::string& peer_blob, std::chrono::steady_clock::time_point deadline) = 0;
  // The same without waiting: starts or continues the handshake and returns
  // the connection once made, nullptr while the peer has not answered yet
  // (call again with the same blob). A caller that builds several links at
  // once needs it where a handshake waits for the peer's own Connect
  // (verbs): blocking ones would wait on each other in a cycle of ranks.
  // The default blocks (tcp and shm never wait on a peer's Connect in a
  // cycle: the lower rank connects, the kernel queues it).
  virtual StatusOr<std::unique_ptr<Connection>> PollConnect(const std::string& peer_blob,
                                                            std::chrono::steady_clock::time_point deadline) {
    return Connect(peer_blob, deadline);
  }
};

struct BackendOptions {
  int rank = 0;
  int world_size = 1;
  // Unique per job: names shared segments and tags handshakes so a stale
  // process of another job cannot connect by mistake.
  std::string job_id;
  // The job secret (CIUIC_SECRET / CIUIC_SECRET_FILE / the launcher's): the
  // data connections' handshakes prove it. Empty = nothing to prove.
  std::string secret;
  Config config;
  // The rank's topology plan (topology::RankPlan), empty = decide as
  // without one. verbs opens `device` first when CIUIC_IB_HCA allows it;
  // tcp uses `netdev` when CIUIC_SOCKET_IFNAME is empty and it is up with
  // an address; a backend that opened the plan's device puts its pools on
  // `pool_numa_node` (an OS index, -1 first touch).
  std::string device;
  std::string netdev;
  static constexpr int kPoolNodeOfDevice = -2;
  int pool_numa_node = kPoolNodeOfDevice;
};

// What a waiting rank sleeps on (transport::WaitFor): one backend, or a
// set of them (Transports) when its peers are reached through several.
class ActivityWaiter {
 public:
  virtual ~ActivityWaiter() = default;
  // Blocks until a peer may have posted something to this process, or
  // `max` elapses; spurious wake-ups are allowed. Never an error.
  virtual void WaitForActivity(std::chrono::microseconds max) = 0;
  // Whether a peer's post is known to wait here now, without blocking;
  // false also means "cannot tell cheaply" (the default).
  virtual bool AnyActivity() { return false; }
};

class Backend : public ActivityWaiter {
 public:
  ~Backend() override = default;
  virtual BackendKind kind() const = 0;
  // One line for logs and benchmark headers (device, port, GID, interface).
  virtual std::string Describe() const = 0;
  // A new endpoint towards `peer`; `tag` distinguishes several connections
  // to the same peer (channels). Errors: kInvalidArgument, kResourceExhausted.
  virtual StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(int peer, uint32_t tag) = 0;
  // Allocates `bytes` of pool memory suited to this backend (pinned,
  // pre-faulted, NUMA-local to the device; shm: in a shared segment) and
  // registers it. Errors: kResourceExhausted, kInvalidArgument (0 bytes).
  virtual StatusOr<std::unique_ptr<MemoryRegion>> Allocate(size_t bytes) = 0;
  // Registers caller memory [addr, addr+bytes). Errors: kInvalidArgument,
  // kResourceExhausted, kUnimplemented where the backend cannot expose
  // caller memory to peers.
  virtual StatusOr<std::unique_ptr<MemoryRegion>> Register(void* addr, size_t bytes) = 0;
  // Whether a registration pins the physical pages behind the range (verbs),
  // so it goes stale when the program unmaps or discards that memory and the
  // registration cache must watch it (shm and tcp address memory by virtual
  // address on every access: never stale).
  virtual bool PinsRegisteredMemory() const { return false; }
  // Blocks until a peer may have posted something to this process through
  // any connection of this backend, or `max` elapses; spurious wake-ups are
  // allowed. This is the "sleep" of spin-yield-sleep waiting (shm: a futex
  // doorbell; tcp: poll on the sockets; verbs: the completion channel), so
  // oversubscribed ranks do not burn their core. Never an error.
  void WaitForActivity(std::chrono::microseconds max) override = 0;
};

// Opens a backend of `kind`. Errors: kUnavailable with the reason (no RDMA
// device, no usable interface), kUnimplemented (not built in).
StatusOr<std::unique_ptr<Backend>> OpenBackend(BackendKind kind, const BackendOptions& options);

// Whether `kind` can be opened here; `why` (optional) says why not.
bool BackendAvailable(BackendKind kind, const BackendOptions& options, std::string* why);

// Liveness of peers on this host while waiting for their store keys: a
// peer that died before it connected publishes nothing more, and the wait
// would otherwise last the whole timeout. ProcessIdentity() describes this
// process ("<boot id> <pid namespace> <pid> <start time>", empty without
// /proc) for the peers; ProcessGone(identity) is true when that process
// ran on this host (same boot and pid namespace) and has exited, is a
// zombie or its pid now names another process; false while it lives or
// when it is elsewhere (nothing to tell from here).
std::string ProcessIdentity();
bool ProcessGone(const std::string& identity);
// Run while waiting on a peer's store keys, about every kPeerCheckEvery:
// an error (naming the peer) ends the wait. Empty: wait to the timeout.
using PeerCheck = std::function<Status(int peer)>;
inline constexpr std::chrono::milliseconds kPeerCheckEvery{100};
// store.Get(key) for up to `timeout`, running `check(peer)` between slices.
StatusOr<std::string> GetWhilePeerLives(Store& store, const std::string& key, std::chrono::milliseconds timeout,
                                        int peer, const PeerCheck& check);

// Makes the connection to `peer` through `store`: publishes this side's
// endpoint under a key derived from (prefix, rank, peer, tag), reads the
// peer's, and connects. Errors: those of Store::Get and Endpoint::Connect,
// and check's.
StatusOr<std::unique_ptr<Connection>> ConnectThroughStore(Backend& backend, Store& store,
                                                          const std::string& prefix, int rank,
                                                          int peer, uint32_t tag,
                                                          std::chrono::milliseconds timeout,
                                                          const PeerCheck& check = {});

// ConnectThroughStore in two halves, for callers that must not wait on a
// peer that has not asked for this connection yet (a ring of sends posted
// before their receives: every rank would wait on its neighbour).
// PublishEndpoint creates this side's endpoint and publishes it under
// EndpointKey(backend, prefix, tag, rank, peer).
// ConnectPublished reads the peer's endpoint, waiting at most `wait` for
// it: null when it is not published yet (call again later); otherwise it
// connects (by `deadline`, blocking). A caller that must not block at all
// reads the peer's key itself and calls Endpoint::PollConnect (Link::Builder).
// Errors: those of Store::Set/Get and Endpoint::Connect.
std::string EndpointKey(const Backend& backend, const std::string& prefix, uint32_t tag, int from, int to);
StatusOr<std::unique_ptr<Endpoint>> PublishEndpoint(Backend& backend, Store& store, const std::string& prefix,
                                                    int rank, int peer, uint32_t tag);
StatusOr<std::unique_ptr<Connection>> ConnectPublished(Backend& backend, Store& store, Endpoint& endpoint,
                                                       const std::string& prefix, int rank, int peer,
                                                       uint32_t tag, std::chrono::milliseconds wait,
                                                       std::chrono::steady_clock::time_point deadline);

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_BACKEND_H_
