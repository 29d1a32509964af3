// Link: the credit-based slot ring over one Connection (see transport.h for
// the protocol), and the spin-yield-sleep wait used above it.
#include <sched.h>

#include <algorithm>
#include <cstring>

#include "transport/link_wire.h"
#include "transport/net.h"
#include "transport/transport.h"
#include "common/cpu_relax.h"

namespace ciuic::transport {

namespace {

constexpr size_t kCreditBytes = 8;
// Chunks start at multiples of this (a cache line) in the rings.
constexpr size_t kChunkAlign = 64;
// Chunks up to this size take only their own bytes of the ring (rounded up
// to kChunkAlign); larger ones take a whole slot: letting mid-size chunks
// fill the ring by their bytes would put twice the data under way, a
// working set that no longer fits the caches.
constexpr size_t kSmallChunkMax = 16u << 10;
// How many chunks a sender may have unreleased (more when nslots is
// larger): small chunks take only their own bytes of the ring, so up to
// kMaxChunks can be under way whatever the slot count, but beyond
// kBaseChunks only while less than kRunAheadBytes are under way. Senders
// of a stream of small rooted calls (reduce, broadcast) then run far
// enough ahead of the root that tcp carries several messages per segment;
// the byte bound keeps mid-size chunks from putting megabytes under way.
constexpr size_t kBaseChunks = 64;
constexpr size_t kMaxChunks = 256;
constexpr uint64_t kRunAheadBytes = 1u << 20;
// Credits go out at least every this many chunks released (fewer when
// max_chunks is small: half of it). On tcp a credit also carries the
// receiver's window: rarer ones let a sender of small chunks that filled
// the receiver's socket buffer wait for a delayed ACK (200 ms).
constexpr uint64_t kCreditBatchMax = 32;


}  // namespace

StatusOr<LinkOptions> LinkOptions::FromConfig(const Config& config) {
  LinkOptions o;
  o.slot_size = config.chunk_size;
  o.nslots = config.buffer_size / config.chunk_size;
  if (o.nslots < 2) {
    return InvalidArgumentError("CIUIC_BUFFER_SIZE (" + std::to_string(config.buffer_size) +
                                ") must hold at least two CIUIC_CHUNK_SIZE (" +
                                std::to_string(config.chunk_size) + ") slots");
  }
  return o;
}

Link::Link(std::unique_ptr<Connection> conn, BufferPool& pool, const LinkOptions& options)
    : conn_(std::move(conn)),
      pool_(pool),
      options_(options),
      // One slot of slack, less a byte: a chunk can go anywhere a skip
      // left it and still fit (nslots - 1 slots' worth under way, a skip of
      // under a slot, the chunk's slot), but full chunks on slot boundaries
      // skip at nslots slots and so keep to the first nslots: the slack is
      // only touched after small chunks moved the places off the boundaries.
      ring_bytes_(RingBytes(options.slot_size, options.nslots)),
      max_chunks_(std::max(options.nslots, kMaxChunks)),
      send_(max_chunks_),
      recv_(max_chunks_) {}

uint64_t Link::Place(uint64_t at) const {
  const uint64_t off = at % ring_bytes_;
  return off + options_.slot_size > ring_bytes_ ? at + (ring_bytes_ - off) : at;
}

uint64_t Link::Footprint(size_t len) const {
  if (len > kSmallChunkMax) return options_.slot_size;
  const uint64_t aligned = (std::max<uint64_t>(len, 1) + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
  return std::min<uint64_t>(aligned, options_.slot_size);
}

bool Link::Fits(uint64_t at) const {
  const uint64_t unreleased = committed_ - credited_;
  if (!error_.ok() || unreleased >= max_chunks_) return false;
  if (unreleased >= std::max(options_.nslots, kBaseChunks) && inflight_bytes_ >= kRunAheadBytes) return false;
  // At most nslots slots' worth under way (the extra slot is for the skip
  // at the ring's end, not for more data), and room in the peer's ring.
  if (inflight_bytes_ + options_.slot_size > options_.slot_size * options_.nslots) return false;
  if (at + options_.slot_size - credited_bytes_ > ring_bytes_) return false;
  if (in_peer_memory_) return true;
  // The staging ring (the same places) is free once the writes completed.
  return committed_ - write_done_ < max_chunks_ && at + options_.slot_size - write_done_bytes_ <= ring_bytes_;
}

Link::~Link() {
  // The connection goes first: no write can land in the rings after this.
  conn_.reset();
  pool_.Release(recv_ring_);
  pool_.Release(send_staging_);
}

std::string Link::RingKey(Backend& backend, const std::string& prefix, uint32_t tag, int from, int to) {
  return prefix + "/ring/" + BackendName(backend.kind()) + "/" + std::to_string(tag) + "/" + std::to_string(from) +
         "-" + std::to_string(to);
}

Status Link::PublishRing(Backend& backend, Store& store, const std::string& prefix, int rank, uint32_t tag) {
  CIUIC_ASSIGN_OR_RETURN(recv_ring_, pool_.Acquire(ring_bytes_));
  RingDesc d;
  d.slot_size = options_.slot_size;
  d.nslots = options_.nslots;
  d.offset = recv_ring_.offset;
  d.region = recv_ring_.region->Describe();
  return store.Set(RingKey(backend, prefix, tag, rank, peer()), EncodeRing(d));
}

Status Link::AdoptPeerRing(const std::string& theirs) {
  const int peer_rank = peer();
  CIUIC_ASSIGN_OR_RETURN(RingDesc d, DecodeRing(theirs, peer_rank, options_.slot_size, options_.nslots));
  CIUIC_ASSIGN_OR_RETURN(remote_ring_, conn_->ImportRegion(d.region));
  CIUIC_RETURN_IF_ERROR(CheckRingInRegion(d, remote_ring_.size, peer_rank));
  remote_ring_offset_ = d.offset;
  in_peer_memory_ = conn_->PeerMemoryPointer(remote_ring_, remote_ring_offset_) != nullptr;
  if (!in_peer_memory_) {
    CIUIC_ASSIGN_OR_RETURN(send_staging_, pool_.Acquire(ring_bytes_));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<Link>> Link::Create(Backend& backend, BufferPool& pool, Store& store,
                                             const std::string& prefix, int rank, int peer,
                                             uint32_t tag, const LinkOptions& options,
                                             std::chrono::milliseconds timeout, const PeerCheck& check) {
  if (!RingShapeOk(options.slot_size, options.nslots)) {
    return InvalidArgumentError("Link: need 2 to 2^20 slots of 1 B to 1 GiB");
  }
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn,
                         ConnectThroughStore(backend, store, prefix, rank, peer, tag, timeout, check));
  std::unique_ptr<Link> link(new Link(std::move(conn), pool, options));
  CIUIC_RETURN_IF_ERROR(link->PublishRing(backend, store, prefix, rank, tag));
  StatusOr<std::string> theirs = GetWhilePeerLives(store, RingKey(backend, prefix, tag, peer, rank), timeout, peer, check);
  if (!theirs.ok()) {
    return Status(theirs.status().code(), "link to rank " + std::to_string(peer) + ": " +
                                              theirs.status().message());
  }
  CIUIC_RETURN_IF_ERROR(link->AdoptPeerRing(*theirs));
  return link;
}

Link::Builder::Builder(Backend& backend, BufferPool& pool, Store& store, std::string prefix, int rank, int peer,
                       uint32_t tag, const LinkOptions& options, std::chrono::milliseconds timeout)
    : backend_(backend),
      pool_(pool),
      store_(store),
      prefix_(std::move(prefix)),
      rank_(rank),
      peer_(peer),
      tag_(tag),
      options_(options),
      deadline_(std::chrono::steady_clock::now() + timeout) {}

StatusOr<std::unique_ptr<Link::Builder>> Link::Builder::Start(Backend& backend, BufferPool& pool, Store& store,
                                                              const std::string& prefix, int rank, int peer,
                                                              uint32_t tag, const LinkOptions& options,
                                                              std::chrono::milliseconds timeout) {
  if (!RingShapeOk(options.slot_size, options.nslots)) {
    return InvalidArgumentError("Link: need 2 to 2^20 slots of 1 B to 1 GiB");
  }
  std::unique_ptr<Builder> b(new Builder(backend, pool, store, prefix, rank, peer, tag, options, timeout));
  CIUIC_ASSIGN_OR_RETURN(b->endpoint_, PublishEndpoint(backend, store, prefix, rank, peer, tag));
  return b;
}

StatusOr<std::unique_ptr<Link>> Link::Builder::Poll() {
  constexpr std::chrono::milliseconds kNoWait(0);
  if (link_ == nullptr) {
    if (peer_endpoint_.empty()) {
      StatusOr<std::string> ep = store_.Get(EndpointKey(backend_, prefix_, tag_, peer_, rank_), kNoWait);
      if (!ep.ok()) {
        if (ep.status().code() != StatusCode::kDeadlineExceeded) {
          return Status(ep.status().code(), "connecting to rank " + std::to_string(peer_) + ": " + ep.status().message());
        }
        if (std::chrono::steady_clock::now() >= deadline_) {
          return DeadlineExceededError("connecting to rank " + std::to_string(peer_) + ": store key '" +
                                       EndpointKey(backend_, prefix_, tag_, peer_, rank_) +
                                       "' was not set before the deadline (rank " + std::to_string(peer_) +
                                       " has not connected to this rank)");
        }
        return std::unique_ptr<Link>();
      }
      peer_endpoint_ = std::move(*ep);
    }
    CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, endpoint_->PollConnect(peer_endpoint_, deadline_));
    if (conn == nullptr) return std::unique_ptr<Link>();
    endpoint_.reset();
    link_.reset(new Link(std::move(conn), pool_, options_));
    CIUIC_RETURN_IF_ERROR(link_->PublishRing(backend_, store_, prefix_, rank_, tag_));
  }
  StatusOr<std::string> theirs = store_.Get(RingKey(backend_, prefix_, tag_, peer_, rank_), kNoWait);
  if (!theirs.ok()) {
    if (theirs.status().code() == StatusCode::kDeadlineExceeded) return std::unique_ptr<Link>();
    return Status(theirs.status().code(), "link to rank " + std::to_string(peer_) + ": " + theirs.status().message());
  }
  CIUIC_RETURN_IF_ERROR(link_->AdoptPeerRing(*theirs));
  return std::move(link_);
}

void* Link::AcquireSend() {
  const uint64_t at = send_at_;
  if (!Fits(at)) return nullptr;
  if (in_peer_memory_) return conn_->PeerMemoryPointer(remote_ring_, remote_ring_offset_ + at % ring_bytes_);
  return static_cast<char*>(send_staging_.data()) + at % ring_bytes_;
}

Status Link::Commit(size_t len, const MemoryRegion* src, size_t offset) {
  const uint64_t at = send_at_;
  SendChunk& c = send_[committed_ % max_chunks_];
  c.at = at;
  c.end = at + Footprint(len);
  c.len = static_cast<uint32_t>(len);
  c.src = src;
  c.offset = offset;
  send_at_ = Place(c.end);
  inflight_bytes_ += c.end - c.at;
  ++committed_;
  return Post();
}

Status Link::CommitSend(size_t len) {
  if (!error_.ok()) return error_;
  if (len > options_.slot_size) {
    return InvalidArgumentError("Link::CommitSend: " + std::to_string(len) + " bytes > slot size " +
                                std::to_string(options_.slot_size));
  }
  if (!Fits(send_at_)) return FailedPreconditionError("Link::CommitSend without a slot from AcquireSend");
  return Commit(len, nullptr, 0);
}

bool Link::CanSend() const { return Fits(send_at_); }

Status Link::CommitSendFrom(const MemoryRegion& src, size_t offset, size_t len) {
  if (!error_.ok()) return error_;
  if (in_peer_memory_) return FailedPreconditionError("Link::CommitSendFrom on a link into peer memory (use AcquireSend)");
  if (len > options_.slot_size || offset > src.size() || len > src.size() - offset) {
    return InvalidArgumentError("Link::CommitSendFrom: " + std::to_string(len) + " bytes at offset " +
                                std::to_string(offset) + " of a " + std::to_string(src.size()) +
                                " B region (slot size " + std::to_string(options_.slot_size) + ")");
  }
  if (!Fits(send_at_)) return FailedPreconditionError("Link::CommitSendFrom without a free slot (CanSend)");
  return Commit(len, &src, offset);
}

size_t Link::sends_in_flight() const { return static_cast<size_t>(committed_ - write_done_); }

const void* Link::PeekRecv(size_t* len) const {
  if (arrived_ == released_) return nullptr;
  const RecvChunk& c = recv_[released_ % max_chunks_];
  *len = c.len;
  return static_cast<const char*>(recv_ring_.data()) + c.at % ring_bytes_;
}

Status Link::ReleaseRecv() {
  if (arrived_ == released_) return FailedPreconditionError("Link::ReleaseRecv: nothing received");
  const RecvChunk& c = recv_[released_ % max_chunks_];
  released_bytes_ = c.at + Footprint(c.len);
  ++released_;
  // On a failed link, chunks that arrived before the failure are still
  // delivered; only the credit for them cannot go back.
  if (!error_.ok()) return Status::Ok();
  return Post();
}

Status Link::Post() {
  const uint64_t posted_before = posted_;
  while (posted_ < committed_) {
    const SendChunk& c = send_[posted_ % max_chunks_];
    const size_t off = c.at % ring_bytes_;
    const size_t remote_off = remote_ring_offset_ + off;
    // Direct: the bytes are already in the peer's ring; a zero-length write
    // only notifies. Its source is any local region (nothing is read).
    Status s = in_peer_memory_ ? conn_->PostWrite(*recv_ring_.region, recv_ring_.offset, remote_ring_, remote_off, 0, c.len,
                                          posted_)
               : c.src != nullptr
                   ? conn_->PostWrite(*c.src, c.offset, remote_ring_, remote_off, c.len, c.len, posted_)
                   : conn_->PostWrite(*send_staging_.region, send_staging_.offset + off, remote_ring_, remote_off,
                                      c.len, c.len, posted_);
    if (s.code() == StatusCode::kResourceExhausted) break;
    if (!s.ok()) return error_ = s;
    ++posted_;
  }
  // Credits in batches: 32 chunks (half of max_chunks, when fewer) or half
  // the ring's bytes (see transport.h).
  const uint64_t owed = released_ - credit_sent_;
  const bool half = owed >= std::max<uint64_t>(1, std::min<uint64_t>(max_chunks_ / 2, kCreditBatchMax)) ||
                    (owed > 0 && released_bytes_ - credit_sent_bytes_ >= options_.slot_size * options_.nslots / 2);
  const bool rides = posted_ != posted_before && conn_->MessagesRideWithWrites();
  if (half || (owed > 0 && rides)) {
    uint8_t msg[kCreditBytes];
    net::PutLe64(msg, released_);
    Status s = conn_->PostMessage(msg, sizeof(msg));
    if (s.ok()) {
      credit_sent_ = released_;
      credit_sent_bytes_ = released_bytes_;
      ++credit_messages_;
      if (!rides) ++credit_messages_alone_;
    } else if (s.code() != StatusCode::kResourceExhausted) {
      return error_ = s;
    }
  }
  return Status::Ok();
}

StatusOr<bool> Link::Progress(bool receive) {
  if (!error_.ok()) return error_;
  const uint64_t before_posted = posted_, before_credit = credit_sent_;
  // Per thread, not per call: a Completion array is ~1.4 KiB of
  // default-initialised bytes, and Progress runs in tight polling loops.
  static thread_local Completion done[16];
  StatusOr<size_t> n = receive ? conn_->Progress(done, 16) : conn_->ProgressSends(done, 16);
  if (!n.ok()) return error_ = n.status();
  auto who = [this] { return "link to rank " + std::to_string(conn_->peer()); };
  for (size_t i = 0; i < *n; ++i) {
    const Completion& c = done[i];
    switch (c.kind) {
      case Completion::Kind::kWriteDone:
        if (c.wr_id != write_done_ || write_done_ >= posted_) {
          return error_ = InternalError(who() + ": write completion out of order");
        }
        if (!in_peer_memory_) write_done_bytes_ = send_[write_done_ % max_chunks_].end;
        ++write_done_;
        break;
      case Completion::Kind::kWriteReceived: {
        // The chunk's place follows from the lengths before it, as on the
        // sender's side.
        const uint64_t at = Place(recv_head_);
        if (arrived_ - released_ >= max_chunks_ || c.imm > options_.slot_size ||
            at + options_.slot_size - released_bytes_ > ring_bytes_) {
          return error_ = DataLossError(who() + ": peer overran the ring or sent a bad length");
        }
        RecvChunk& r = recv_[arrived_ % max_chunks_];
        r.at = at;
        r.len = c.imm;
        recv_head_ = at + Footprint(c.imm);
        ++arrived_;
        break;
      }
      case Completion::Kind::kMessage: {
        if (c.len != kCreditBytes) return error_ = DataLossError(who() + ": unexpected message");
        const uint64_t v = net::GetLe64(c.data);
        if (v < credited_ || v > posted_) {
          return error_ = DataLossError(who() + ": credit " + std::to_string(v) + " out of range");
        }
        // Chunk v - 1 is among the last max_chunks_ committed (at most that
        // many are unreleased), so its record is still there.
        if (v > credited_) credited_bytes_ = send_[(v - 1) % max_chunks_].end;
        for (; credited_ < v; ++credited_) {
          const SendChunk& done_chunk = send_[credited_ % max_chunks_];
          inflight_bytes_ -= done_chunk.end - done_chunk.at;
        }
        break;
      }
    }
  }
  CIUIC_RETURN_IF_ERROR(Post());
  return *n > 0 || posted_ != before_posted || credit_sent_ != before_credit;
}

Status WaitFor(ActivityWaiter& backend, const std::function<StatusOr<bool>()>& progress,
               const std::function<bool()>& ready, std::chrono::steady_clock::time_point deadline,
               const std::string& what, std::chrono::microseconds spin) {
  using Clock = std::chrono::steady_clock;
  // Spin ~20 us (a handoff between running cores costs ~0.1 us), then yield
  // up to ~1 ms (lets an oversubscribed peer run), then sleep until the
  // backend sees activity, at most 10 ms at a time so a lost wake-up costs
  // little.
  constexpr auto kYield = std::chrono::microseconds(1000);
  constexpr auto kMaxSleep = std::chrono::microseconds(10000);
  auto last = Clock::now();
  for (;;) {
    CIUIC_ASSIGN_OR_RETURN(bool any, progress());
    if (ready()) return Status::Ok();
    const auto now = Clock::now();
    if (any) {
      last = now;
      continue;
    }
    if (now >= deadline) return DeadlineExceededError("timed out waiting for " + what);
    const auto idle = now - last;
    if (idle < spin) {
      for (int i = 0; i < 32; ++i) CpuRelax();
    } else if (idle < kYield) {
      sched_yield();
    } else {
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
      backend.WaitForActivity(left < kMaxSleep ? left : kMaxSleep);
    }
  }
}

}  // namespace ciuic::transport
