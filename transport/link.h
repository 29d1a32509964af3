// Private: Link (the credit-based ring every collective runs on) and
// WaitFor (spin, yield, sleep).
#ifndef CIUIC_TRANSPORT_LINK_H_
#define CIUIC_TRANSPORT_LINK_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/status.h"
#include "ciuic/store.h"
#include "transport/backend.h"
#include "transport/pool.h"

namespace ciuic::transport {

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
    std::string peer_endpoint_;  // its description, once in the store
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
  bool writes_into_peer_memory() const { return in_peer_memory_; }

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

  // Zero-copy sending (links that do not write into peer memory): whether the peer has a
  // free slot, and a send of `len` bytes (<= slot_size()) straight from
  // `src` at `offset`, with no staging copy. The source must stay unchanged
  // until the chunk's write completes: chunk number sends_committed() (read
  // before the call) is complete once sends_done() exceeds it.
  // Errors: kFailedPrecondition (no free slot, or a link into peer memory: fill the
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
  BufferPool::Lease send_staging_;  // unused when in_peer_memory_
  RemoteRegion remote_ring_;
  size_t remote_ring_offset_ = 0;
  bool in_peer_memory_ = false;  // the peer's ring is mapped here (shm)
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
// yields, then sleeps in `backend.WaitForActivity` (one backend, or Transports), until `deadline`. Pass
// spin 0 when ranks outnumber the CPUs they share: a spinner holds the core
// the awaited rank needs.
// Errors: the first error of `progress`, kDeadlineExceeded with `what`.
inline constexpr std::chrono::microseconds kDefaultSpin{20};
Status WaitFor(ActivityWaiter& backend, const std::function<StatusOr<bool>()>& progress,
               const std::function<bool()>& ready, std::chrono::steady_clock::time_point deadline,
               const std::string& what, std::chrono::microseconds spin = kDefaultSpin);

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_LINK_H_
