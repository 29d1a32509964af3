// Private: the bootstrap. The TCP and shared-filesystem implementations of
// the rendezvous Store (ciuic/store.h), and discovery of rank / world size
// from the launcher.
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
#ifndef CIUIC_TRANSPORT_BOOTSTRAP_H_
#define CIUIC_TRANSPORT_BOOTSTRAP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/status.h"
#include "ciuic/store.h"

namespace ciuic::transport {


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
  // Waits until no other process holds a connection to this server (this
  // process's own TcpStoreClients do not count) or `timeout` passes; returns
  // how many connections of other processes are left. For a process about
  // to exit whose store other ranks still use. Any thread.
  size_t WaitForOtherProcesses(std::chrono::milliseconds timeout);

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
  std::string local_key_;  // this end, as the server sees it (its own process's clients)
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

// kInvalidArgument unless `key` is a valid store key (not empty, at most
// kMaxKeyBytes): what every store checks first.
Status CheckStoreKey(const std::string& key);

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

// The job secret `config` names: CIUIC_SECRET itself, or the content of
// CIUIC_SECRET_FILE (trailing newlines dropped), or "" when neither is set.
// Errors: kInvalidArgument (both set, empty file), kNotFound (no such
// file), kFailedPrecondition (world-readable or -writable file).
StatusOr<std::string> ResolveSecret(const Config& config);

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

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_BOOTSTRAP_H_
