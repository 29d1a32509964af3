// ciuic::transport bootstrap: the rendezvous Store every rank uses to find
// the others, its TCP and shared-filesystem implementations, and discovery of
// rank / world size from the launcher.
//
// TCP store wire format (all integers big-endian):
//
//   Handshake, before any request:
//     server -> client  "CIUS" u32 version(=1) u8[32] server_nonce      40 B
//     client -> server  u8[32] client_nonce
//                       u8[32] HMAC-SHA256(secret, server_nonce || client_nonce)
//     server -> client  u8 verdict (0 = accepted, 1 = rejected)
//                       u8[32] HMAC-SHA256(secret, client_nonce || server_nonce)
//                       (zeros when rejected; then the server closes)
//   The secret never crosses the wire; the client checks the server's proof,
//   so both sides are authenticated. Without a secret (empty key) the server
//   only accepts loopback peers.
//
//   Request:   u8 op  u32 key_len  u32 value_len  key  value
//              op: 1 SET, 2 GET, 3 ADD (value = int64 delta, 8 bytes),
//                  4 CHECK (does the key exist; value empty)
//   Response:  u8 status  u32 len  payload
//              status: 0 OK (GET: the value; ADD: the new int64, 8 bytes),
//                      1 NOT_FOUND, 2 ERROR (payload = message)
//   key_len <= kMaxKeyBytes, value_len <= kMaxValueBytes; a frame that breaks
//   a bound or names an unknown op closes that connection (the server logs a
//   warning naming the peer and keeps serving the others).
//
// Counters made by Add are stored as decimal text (Get returns e.g. "3").
#ifndef CIUIC_TRANSPORT_H_
#define CIUIC_TRANSPORT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/status.h"

namespace ciuic::transport {

inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = 64u << 20;

// A key/value store for rendezvous. Values are byte strings (std::string,
// binary-safe). Thread contract: implementations here are thread-safe.
class Store {
 public:
  virtual ~Store() = default;
  // Stores `value` under `key` (replacing any value).
  // Errors: kInvalidArgument (key empty or too long, value too long),
  // kUnavailable / kDeadlineExceeded (store unreachable).
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // The value of `key`, waiting until it exists or `timeout` expires.
  // Errors: kDeadlineExceeded naming the key, kInvalidArgument, kUnavailable.
  virtual StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Waits until every key exists. Errors: kDeadlineExceeded naming a missing
  // key, kInvalidArgument, kUnavailable.
  virtual Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the counter `key` (missing = 0) and returns
  // the new value. Errors: kFailedPrecondition (the key holds a non-counter
  // value), kInvalidArgument, kUnavailable.
  virtual StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
};

// The TCP store server: one thread with poll() over non-blocking sockets.
// Thread contract: port() may be called from any thread; the destructor
// stops the thread, closes every connection and must not race other calls.
class TcpStoreServer {
 public:
  // Listens on host:port (host "" = all interfaces; port 0 = ephemeral) and
  // starts serving. `secret` empty = loopback peers only (logged).
  // Errors: kInvalidArgument (bad host), kUnavailable (bind/listen failed).
  static StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, uint16_t port,
                                                           const std::string& secret);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  // The bound port (the real one when started with port 0).
  uint16_t port() const;

  class Impl;

 private:
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A client of TcpStoreServer. Thread contract: every method is thread-safe
// (calls are serialised on the one connection). After an I/O error or a
// timeout in the middle of a request the connection is closed and every
// later call returns that first error.
class TcpStoreClient : public Store {
 public:
  // Connects to host:port, retrying until `timeout` (the server may start
  // later), then authenticates with `secret`. `timeout` is also the limit of
  // Set and Add. Errors: kUnavailable (cannot connect within the timeout or
  // the connection was closed), kFailedPrecondition (wrong secret on either
  // side), kInvalidArgument (bad host).
  static StatusOr<std::unique_ptr<TcpStoreClient>> Connect(const std::string& host, uint16_t port,
                                                             const std::string& secret,
                                                             std::chrono::milliseconds timeout);
  ~TcpStoreClient() override;

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  TcpStoreClient(int fd, std::string peer, std::chrono::milliseconds timeout);
  struct Reply {
    uint8_t status;
    std::string payload;
  };
  StatusOr<Reply> Request(uint8_t op, const std::string& key, const std::string& value,
                          std::chrono::steady_clock::time_point deadline);
  std::chrono::steady_clock::time_point RoundTripDeadline(
      std::chrono::steady_clock::time_point deadline) const;

  std::mutex mu_;
  int fd_;
  std::string peer_;
  std::chrono::milliseconds timeout_;
  Status error_;  // first failure; sticky
};

// A store in a directory of a shared filesystem: one file per key written
// atomically (temporary file + rename); Get/Wait poll. Add serialises with
// an fcntl lock on a lock file in the directory.
// Thread contract: thread-safe; several processes may share the directory.
class FileStore : public Store {
 public:
  // Uses (and creates if needed) directory `dir`.
  // Errors: kInvalidArgument (empty), kUnavailable (cannot create/access).
  static StatusOr<std::unique_ptr<FileStore>> Open(const std::string& dir);

  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}
  std::string PathOf(const std::string& key) const;
  std::string dir_;
  std::mutex mu_;  // Add within this process (fcntl locks are per process)
};

// Who this process is in the job and where its store is.
struct JobInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;           // -1 = unknown
  std::string launcher;          // "ciuic", "openmpi", "slurm", "pmi"
  std::string store_host;        // empty = CIUIC_STORE_ADDR not set
  uint16_t store_port = 0;
  bool store_external = false;   // rank 0 does not serve the store
  std::string secret;            // empty = none (loopback only)
  std::chrono::milliseconds timeout{300000};
};

// Rank and size from CIUIC_RANK/CIUIC_WORLD_SIZE (in `config`), else Open
// MPI (OMPI_COMM_WORLD_*), else Slurm (SLURM_PROCID/NTASKS/LOCALID), else PMI
// (PMI_RANK/PMI_SIZE), else a single rank. Store address, secret
// (CIUIC_SECRET or CIUIC_SECRET_FILE) and timeout from `config`.
// Errors: kInvalidArgument naming the variable (not a number, rank >= size,
// only one of rank/size set, both secret knobs set), kNotFound /
// kFailedPrecondition naming the secret file (missing, world-readable).
// Thread contract: reads the environment; not concurrent with setenv.
StatusOr<JobInfo> DiscoverJob(const Config& config);
// The same with `lookup(name)` (nullptr = unset) instead of getenv for the
// launcher variables.
StatusOr<JobInfo> DiscoverJob(const Config& config,
                              const std::function<const char*(const char*)>& lookup);


// ---------------------------------------------------------------------------
// Data transports.
//
// A Backend (one per kind: shm, tcp, verbs) opens the local device, makes
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

enum class BackendKind : uint8_t { kShm = 1, kTcp = 2, kVerbs = 3 };
// "shm", "tcp", "verbs".
const char* BackendName(BackendKind kind);
// Parses "shm", "tcp" or "verbs". Errors: kInvalidArgument.
StatusOr<BackendKind> ParseBackendKind(const std::string& name);

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
  virtual void* DirectPointer(RemoteRegion dst, size_t offset) {
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
};

struct BackendOptions {
  int rank = 0;
  int world_size = 1;
  // Unique per job: names shared segments and tags handshakes so a stale
  // process of another job cannot connect by mistake.
  std::string job_id;
  Config config;
};

class Backend {
 public:
  virtual ~Backend() = default;
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
  virtual void WaitForActivity(std::chrono::microseconds max) = 0;
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
// PublishEndpoint creates this side's endpoint and publishes it.
// ConnectPublished reads the peer's endpoint, waiting at most `wait` for
// it: null when it is not published yet (call again later); otherwise it
// connects (by `deadline`; the peer does the same as soon as it reads this
// side's). Errors: those of Store::Set/Get and Endpoint::Connect.
StatusOr<std::unique_ptr<Endpoint>> PublishEndpoint(Backend& backend, Store& store, const std::string& prefix,
                                                    int rank, int peer, uint32_t tag);
StatusOr<std::unique_ptr<Connection>> ConnectPublished(Backend& backend, Store& store, Endpoint& endpoint,
                                                       const std::string& prefix, int rank, int peer,
                                                       uint32_t tag, std::chrono::milliseconds wait,
                                                       std::chrono::steady_clock::time_point deadline);

// ---------------------------------------------------------------------------
// Buffer pools and the registration cache.

// Pool memory handed out in pieces: a few large regions from
// Backend::Allocate (pinned, pre-faulted, NUMA-local, registered once) carved
// into page-aligned leases, so nothing is allocated or registered per
// operation. Thread contract: thread-safe.
class BufferPool {
 public:
  // `arena_bytes`: size of each region allocated from the backend (a lease
  // larger than that gets a region of its own).
  BufferPool(Backend& backend, size_t arena_bytes);
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  struct Lease {
    MemoryRegion* region = nullptr;  // owned by the pool
    size_t offset = 0;               // page-aligned
    size_t size = 0;
    void* data() const { return static_cast<char*>(region->data()) + offset; }
  };
  // A lease of `bytes` (rounded up to a page). Errors: kInvalidArgument (0),
  // those of Backend::Allocate.
  StatusOr<Lease> Acquire(size_t bytes);
  // Returns a lease; adjacent free space coalesces.
  void Release(const Lease& lease);
  // Bytes allocated from the backend so far.
  size_t allocated_bytes() const;

 private:
  struct Arena;
  Backend& backend_;
  size_t arena_bytes_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Arena>> arenas_;
};

// Registrations of caller memory, reused: sorted by address, reference
// counted, a request inside an existing registration is a hit (sub-range).
//
// A registration that pins pages (Backend::PinsRegisteredMemory: verbs) goes
// stale when the program gives its memory back to the kernel: free() of an
// mmapped chunk, a heap trim, munmap, mremap, madvise(DONTNEED). The cache
// watches every range it keeps through the process's MemoryMonitor
// (userfaultfd events, transport/mem_monitor.h) and drops the registrations
// over memory that went away before its next lookup, so a new buffer at the
// same address is registered afresh. free() of memory that stays mapped (a
// small chunk of the heap) keeps the same pages, so the registration stays
// valid and cached. Where the kernel cannot watch a range (no userfaultfd,
// file-backed memory), that registration is not kept after its last Unref
// (stats().uncached), so nothing stale is ever reused.
//
// Entries are also dropped when Invalidate() covers them and all at
// destruction; an entry dropped while in use stays alive until its last
// Unref. Thread contract: thread-safe.
class RegistrationCache {
 public:
  // kAuto watches when the backend pins registered memory; kAlways and
  // kNever are for tests and for callers that know better.
  enum class Watch { kAuto, kAlways, kNever };
  explicit RegistrationCache(Backend& backend, Watch watch = Watch::kAuto);
  ~RegistrationCache();
  RegistrationCache(const RegistrationCache&) = delete;
  RegistrationCache& operator=(const RegistrationCache&) = delete;

  struct Handle {
    MemoryRegion* region = nullptr;  // covers [addr, addr+bytes)
    size_t offset = 0;               // of addr inside region
    uint64_t id = 0;                 // pass to Unref
  };
  // A registration covering [addr, addr+bytes): an existing one when it
  // contains the range (hit), else a new one (miss) registered with the
  // backend, page-aligned outward. Errors: kInvalidArgument (null/0), those
  // of Backend::Register.
  StatusOr<Handle> Ref(const void* addr, size_t bytes);
  void Unref(const Handle& handle);
  // Forgets every registration overlapping [addr, addr+bytes).
  void Invalidate(const void* addr, size_t bytes);

  // Whether kept registrations are watched; `why` (optional) says why not
  // (kNever, a backend that does not pin, or no userfaultfd here).
  bool watching(std::string* why) const;

  struct Stats {
    uint64_t hits = 0, misses = 0;
    uint64_t invalidations = 0;  // entries dropped by Invalidate or by released memory
    uint64_t released = 0;       // of those: memory unmapped/moved/discarded under them
    uint64_t uncached = 0;       // registrations not kept: the range could not be watched
    size_t entries = 0;
  };
  // (Applies released memory first, like Ref.)
  Stats stats();

 private:
  struct Entry;
  using EntryPtr = std::shared_ptr<Entry>;
  // Applies the monitor's new events and a fork (under mu_).
  void ApplyReleasedLocked();
  // Removes entries_ matching `pred`, retiring those still referenced.
  template <typename Pred>
  void DropLocked(Pred pred, bool released);

  Backend& backend_;
  bool watch_ = false;
  std::string not_watching_;
  mutable std::mutex mu_;
  std::vector<EntryPtr> entries_;   // sorted by start address
  std::vector<EntryPtr> retired_;   // dropped or uncached, still referenced
  uint64_t cursor_ = 0;             // into the monitor's events
  uint64_t epoch_ = 0;              // the monitor's, when cursor_ was set
  uint64_t next_id_ = 1;
  Stats stats_;
};

// ---------------------------------------------------------------------------
// Link: both directions of a credit-based ring of fixed-size slots between
// this rank and one peer, over one Connection.
//
// Each side owns a receive ring of (nslots + 1) * slot_size - 1 bytes in
// its pool. The sender writes chunk i with immediate = its length at the
// ring's next free place: right after chunk i - 1, or at the ring's start
// when fewer than slot_size bytes are left before its end (a chunk's
// length is not known when its buffer is handed out). A chunk of up to
// 16 KiB takes its own bytes (rounded up to 64 B), a larger one a whole
// slot. The receiver derives the same places from the lengths, consumes
// chunks in order and returns them with a credit message (8 bytes: the
// total number of chunks released so far, little-endian); the sender
// knows where each of its chunks ended, so a fast sender cannot overrun a
// slow receiver. At most nslots slots' worth of bytes are under way (the
// extra slot, less a byte, absorbs the one skip at the ring's end, and
// full chunks on slot boundaries never touch it): any mix of chunks that
// fit the old one-slot-per-chunk ring still fits, with no more large data
// under way than before; small ones may number up to max(nslots, 256)
// unreleased (beyond max(nslots, 64) only while less than 1 MiB is under
// way), so small messages run far ahead without a large ring (a 4-rank tcp
// reduce of 8 B waited on credits with 8 slots, and with 64 chunks its
// senders kept too close to the root for tcp to carry several messages
// per segment).
// Credits go out once 32 chunks (half of max_chunks when that is fewer) or
// half the nslots slots' bytes are released and unannounced, not per
// chunk: one message instead of several, and the sender still always has
// at least half the ring, so any schedule that runs with a ring of that
// size cannot wait on a withheld credit. (On tcp a credit also carries the
// receiver's window: rarer ones let a sender of small chunks that filled
// the socket buffer wait for a delayed ACK.)
// Where messages ride with writes for free (Connection::
// MessagesRideWithWrites, tcp), credits owed also go out with every chunk
// sent, so a two-way exchange of small messages needs no credit message of
// its own (one segment per chunk instead of 1.25).
// Where the peer's ring is directly addressable (shm), AcquireSend hands
// out the peer's slot itself, so a kernel can reduce straight into it and
// the commit is only a notification; otherwise the chunk goes through a
// local staging slot and a one-sided write.
//
// Thread contract: one thread at a time (the caller or the progress thread).
struct LinkOptions {
  size_t slot_size = 512u << 10;
  size_t nslots = 8;
  // From CIUIC_CHUNK_SIZE / CIUIC_BUFFER_SIZE. Errors: kInvalidArgument
  // naming the variables when fewer than two slots fit.
  static StatusOr<LinkOptions> FromConfig(const Config& config);
};

class Link {
 public:
  // Connects to `peer` through `store` (keys under `prefix`, `tag`
  // distinguishes links between the same pair), leases the rings from
  // `pool` and exchanges their descriptions. Errors: those of
  // ConnectThroughStore, BufferPool::Acquire, Connection::ImportRegion.
  static StatusOr<std::unique_ptr<Link>> Create(Backend& backend, BufferPool& pool, Store& store,
                                                const std::string& prefix, int rank, int peer,
                                                uint32_t tag, const LinkOptions& options,
                                                std::chrono::milliseconds timeout,
                                                const PeerCheck& check = {});
  // The same without waiting on the peer: Start publishes this side's
  // endpoint; each Poll moves on as far as the peer allows (connect once
  // its endpoint is published, then publish this side's ring, then finish
  // once its ring is) and returns the link when done, null before. The
  // peer's steps are the same, so two ranks that both poll finish; one
  // that waits on a link the peer never asks for names it at its deadline
  // instead of holding every other link of a ring back.
  class Builder {
   public:
    static StatusOr<std::unique_ptr<Builder>> Start(Backend& backend, BufferPool& pool, Store& store,
                                                    const std::string& prefix, int rank, int peer,
                                                    uint32_t tag, const LinkOptions& options,
                                                    std::chrono::milliseconds timeout);
    StatusOr<std::unique_ptr<Link>> Poll();
    int peer() const { return peer_; }

   private:
    Builder(Backend& backend, BufferPool& pool, Store& store, std::string prefix, int rank, int peer,
            uint32_t tag, const LinkOptions& options, std::chrono::milliseconds timeout);
    Backend& backend_;
    BufferPool& pool_;
    Store& store_;
    std::string prefix_;
    int rank_, peer_;
    uint32_t tag_;
    LinkOptions options_;
    std::chrono::steady_clock::time_point deadline_;
    std::unique_ptr<Endpoint> endpoint_;
    std::unique_ptr<Link> link_;  // connected, ring published, waiting for the peer's ring
  };
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  int peer() const { return conn_->peer(); }
  size_t slot_size() const { return options_.slot_size; }
  size_t nslots() const { return options_.nslots; }
  // The most chunks unreleased by the peer: max(nslots, 256) (beyond
  // max(nslots, 64) only while less than 1 MiB is under way).
  size_t max_chunks() const { return max_chunks_; }
  // True when AcquireSend returns the peer's slot (no staging copy).
  bool direct() const { return direct_; }

  // Sending. The buffer (slot_size() bytes) to fill with the next chunk, or
  // nullptr while the peer has no free slot (Progress and retry). The same
  // buffer is returned until CommitSend.
  void* AcquireSend();
  // Sends the chunk written into the AcquireSend buffer (len <= slot_size()).
  // Errors: kFailedPrecondition (no AcquireSend), kInvalidArgument (len), the
  // sticky error.
  Status CommitSend(size_t len);
  // Chunks committed whose write has not completed locally yet.
  size_t sends_in_flight() const;
  // Whether Progress has work on this side's sends: chunks or credits not
  // yet handed over or not yet completed (see Connection::HasQueuedSends).
  // False lets a caller that expects nothing from the peer and has a free
  // slot (or nothing to send) skip Progress, and true lets it call
  // Progress(false): a broadcast's root then reads no socket between its
  // sends.
  bool SendsPending() const {
    return posted_ != committed_ || write_done_ != posted_ || conn_->HasQueuedSends();
  }

  // Zero-copy sending (links that are not direct): whether the peer has a
  // free slot, and a send of `len` bytes (<= slot_size()) straight from
  // `src` at `offset`, with no staging copy. The source must stay unchanged
  // until the chunk's write completes: chunk number sends_committed() (read
  // before the call) is complete once sends_done() exceeds it.
  // Errors: kFailedPrecondition (no free slot, or a direct link: fill the
  // AcquireSend buffer instead), kInvalidArgument (len or range), the sticky
  // error.
  bool CanSend() const;
  Status CommitSendFrom(const MemoryRegion& src, size_t offset, size_t len);
  uint64_t sends_committed() const { return committed_; }
  uint64_t sends_done() const { return write_done_; }

  // Makes `why` the link's sticky error (no-op when it has one): nothing
  // more is posted or progressed. For callers that abandon zero-copy sends
  // whose source memory they are about to give back.
  void Fail(const Status& why) {
    if (error_.ok()) error_ = why;
  }

  // Receiving. The next chunk in order (valid until ReleaseRecv), or nullptr
  // when none has arrived; `*len` gets its length.
  const void* PeekRecv(size_t* len) const;
  // Gives the slot of the chunk from PeekRecv back to the sender. On a
  // failed link it still succeeds: chunks that arrived before the failure
  // (a peer that sent its last chunk and left) are delivered; only their
  // credit cannot go back. Errors: kFailedPrecondition (nothing received).
  Status ReleaseRecv();

  // Advances the connection; never blocks. Returns true when anything
  // happened (a completion, a retried post). Errors: the connection's (sticky).
  // receive = false: the sending side only (Connection::ProgressSends), for
  // a caller that expects no chunk and needs no credit now.
  StatusOr<bool> Progress(bool receive = true);

  // Credit messages sent so far: all of them, and those that went out with
  // no chunk of ours beside them (a message of their own on the wire).
  uint64_t credit_messages() const { return credit_messages_; }
  uint64_t credit_messages_alone() const { return credit_messages_alone_; }

 private:
  Link(std::unique_ptr<Connection> conn, BufferPool& pool, const LinkOptions& options);
  // Set-up after connecting: lease the receive ring and publish it; adopt
  // the peer's ring description (Create and Builder share these).
  Status PublishRing(Backend& backend, Store& store, const std::string& prefix, int rank, uint32_t tag);
  Status AdoptPeerRing(const std::string& theirs);
  static std::string RingKey(Backend& backend, const std::string& prefix, uint32_t tag, int from, int to);
  Status Post();  // posts commits and credits that were refused before
  // Ring places (bytes since the link started; the ring offset is that
  // modulo ring_bytes_): where a chunk handed out at `at` goes (a skip to
  // the ring's start when fewer than slot_size bytes are left), the bytes a
  // chunk of `len` takes, whether a chunk at `at` may be handed out now.
  uint64_t Place(uint64_t at) const;
  uint64_t Footprint(size_t len) const;
  bool Fits(uint64_t at) const;
  Status Commit(size_t len, const MemoryRegion* src, size_t offset);

  std::unique_ptr<Connection> conn_;
  BufferPool& pool_;
  LinkOptions options_;
  BufferPool::Lease recv_ring_;
  BufferPool::Lease send_staging_;  // unused when direct_
  RemoteRegion remote_ring_;
  size_t remote_ring_offset_ = 0;
  bool direct_ = false;
  size_t ring_bytes_;   // (nslots + 1) * slot_size - 1, each side's and the staging ring
  size_t max_chunks_;   // max(nslots, 256)
  // Sender state (chunk sequence numbers; ring places in bytes).
  uint64_t committed_ = 0;     // chunks committed
  uint64_t posted_ = 0;        // chunks whose write is posted
  uint64_t write_done_ = 0;    // chunks whose write completed locally
  uint64_t credited_ = 0;      // chunks the peer has released
  uint64_t send_at_ = 0;           // where the next chunk goes (Place of the last one's end)
  uint64_t credited_bytes_ = 0;    // ... the last released by the peer
  uint64_t inflight_bytes_ = 0;    // ring bytes of the chunks not released yet (skips not counted)
  uint64_t write_done_bytes_ = 0;  // ... the last whose write completed (staging)
  struct SendChunk {
    uint64_t at = 0, end = 0;              // its place
    uint32_t len = 0;
    const MemoryRegion* src = nullptr;     // null: the staging ring
    size_t offset = 0;                     // in src
  };
  std::vector<SendChunk> send_;  // the last max_chunks_ committed, by chunk number
  // Receiver state.
  uint64_t arrived_ = 0;
  uint64_t released_ = 0;
  uint64_t recv_head_ = 0;          // where the last arrived chunk ended
  uint64_t released_bytes_ = 0;     // ... the last released one
  uint64_t credit_sent_ = 0;        // released count last sent to the peer
  uint64_t credit_sent_bytes_ = 0;  // released_bytes_ then
  uint64_t credit_messages_ = 0;
  uint64_t credit_messages_alone_ = 0;
  struct RecvChunk {
    uint64_t at = 0;
    uint32_t len = 0;
  };
  std::vector<RecvChunk> recv_;  // arrived, unreleased, by chunk number
  Status error_;
};

// Waits for `ready()` while calling `progress()`: spins for `spin`, then
// yields, then sleeps in `backend.WaitForActivity`, until `deadline`. Pass
// spin 0 when ranks outnumber the CPUs they share: a spinner holds the core
// the awaited rank needs.
// Errors: the first error of `progress`, kDeadlineExceeded with `what`.
inline constexpr std::chrono::microseconds kDefaultSpin{20};
Status WaitFor(Backend& backend, const std::function<StatusOr<bool>()>& progress,
               const std::function<bool()>& ready, std::chrono::steady_clock::time_point deadline,
               const std::string& what, std::chrono::microseconds spin = kDefaultSpin);

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_H_
