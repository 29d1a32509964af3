// Private to the shm backend: the layout of its shared segments (notification
// ring, doorbell) and the lock-free single-producer / single-consumer ring
// operations. Header-only so the white-box test can drive a ring directly.
//
// Shared layout (native byte order: both sides run on the same host; every
// atomic here is lock-free and therefore address-free, so two processes that
// map the same pages at different addresses may use it):
//
//   RingShared (one per connection and direction, in the RECEIVER's memfd):
//     line 0  header            written once by the receiver before its
//                               endpoint blob is published
//     line 1  producer flags    written once each by the sender: attached
//                               (it mapped the ring), closed (clean close)
//     line 2  consumer_closed   written once by the receiver (clean close)
//     line 3  producer_waiting  set by a sender that found the ring full;
//                               the receiver clears it and rings the
//                               sender's doorbell once it frees entries
//     line 4  consumer_head     entries consumed so far, published by the
//                               receiver at the end of each Progress
//     then    entries[kRingEntries] of kEntryBytes each
//
//   Entry i (index mod kRingEntries) is valid when its `seq` equals
//   (i + 1) mod 2^32. The sender fills kind/imm/len/data, then stores seq
//   with release; the receiver loads seq with acquire, so it also sees the
//   entry and every payload byte the sender copied into the receiver's
//   memory before publishing. The sender keeps its tail privately and
//   re-reads consumer_head (acquire) only when its cached copy says the ring
//   is full; the receiver never reads a line the sender writes except the
//   entries themselves, so a notification costs one cache-line transfer.
//
//   DoorbellShared (one per backend, i.e. per process):
//     line 0  header
//     line 1  word (futex) and sleepers (how many threads of the owner are
//             about to sleep or sleeping on `word`)
//   A sender, after publishing an entry, issues a seq_cst fence and reads
//   `sleepers`; only when it is non-zero does it bump `word` and FUTEX_WAKE.
//   The receiver increments `sleepers` (seq_cst), re-checks its rings, then
//   FUTEX_WAITs on the value of `word` read before: one of the two always
//   sees the other's store (Dekker), so no wake-up is lost and the fast path
//   makes no system call.
#ifndef CIUIC_TRANSPORT_SHM_SHM_RING_H_
#define CIUIC_TRANSPORT_SHM_SHM_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "transport/transport.h"

namespace ciuic::transport::shm {

// Lines written by different processes are kept 128 B apart: adjacent-line
// prefetchers move 64 B lines in pairs.
inline constexpr size_t kLineBytes = 128;
inline constexpr uint32_t kRingMagic = 0x47524943;      // "CIRG"
inline constexpr uint32_t kDoorbellMagic = 0x4c424943;  // "CIBL"
inline constexpr uint32_t kLayoutVersion = 1;
// Entries per ring: max_outstanding() of a connection. A power of two.
inline constexpr uint32_t kRingEntries = 256;
inline constexpr uint32_t kRingMask = kRingEntries - 1;
inline constexpr size_t kEntryBytes = 128;

static_assert((kRingEntries & kRingMask) == 0, "ring size must be a power of two");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");

enum class EntryKind : uint8_t { kWrite = 1, kMessage = 2 };

// One notification: a landed write (imm, len) or a message (len, data).
// The 16-byte head and up to 48 bytes of message share the first 64 B line.
struct RingEntry {
  std::atomic<uint32_t> seq;  // (index + 1) mod 2^32 once published
  uint8_t kind;               // EntryKind
  uint8_t reserved[3];
  uint32_t imm;
  uint32_t len;  // write: bytes written (clamped to 2^32-1); message: bytes of data
  uint8_t data[kMaxMessageBytes];
  uint8_t pad[kEntryBytes - 16 - kMaxMessageBytes];
};
static_assert(sizeof(RingEntry) == kEntryBytes, "entry must be two cache lines");

struct RingShared {
  struct alignas(kLineBytes) Header {
    uint32_t magic;
    uint32_t version;
    uint32_t capacity;     // kRingEntries
    uint32_t entry_bytes;  // kEntryBytes
    uint64_t seg_id;       // the segment's random id (also in its memfd name)
    int32_t owner_rank;    // the receiver
    int32_t producer_rank; // the sender
    uint32_t tag;
    uint32_t owner_pid;
  } header;
  struct alignas(kLineBytes) Flag {
    std::atomic<uint32_t> value;
  };
  // Written once each by the sender: it has mapped the ring / closed.
  struct alignas(kLineBytes) ProducerFlags {
    std::atomic<uint32_t> attached;
    std::atomic<uint32_t> closed;
  } producer;
  Flag consumer_closed;
  // Set by a producer that found the ring full; the consumer clears it and
  // rings the producer's doorbell after releasing entries.
  Flag producer_waiting;
  struct alignas(kLineBytes) Head {
    std::atomic<uint64_t> value;
  } consumer_head;
  alignas(kLineBytes) RingEntry entries[kRingEntries];
};

struct DoorbellShared {
  struct alignas(kLineBytes) Header {
    uint32_t magic;
    uint32_t version;
    uint64_t seg_id;
    int32_t rank;
    uint32_t pid;
  } header;
  struct alignas(kLineBytes) Bell {
    std::atomic<uint32_t> word;      // futex word, bumped by senders
    std::atomic<uint32_t> sleepers;  // owner threads about to sleep / asleep
  } bell;
};

// The sending side of a ring mapped from the receiver's segment.
// Thread contract: one thread at a time.
class RingProducer {
 public:
  RingProducer() = default;
  explicit RingProducer(RingShared* ring) : ring_(ring) {}

  // The next free entry, or nullptr when kRingEntries entries are
  // unconsumed. Calling it again before Publish returns the same entry.
  RingEntry* Reserve() {
    if (tail_ - cached_head_ >= kRingEntries) {
      cached_head_ = ring_->consumer_head.value.load(std::memory_order_acquire);
      if (tail_ - cached_head_ >= kRingEntries) return nullptr;
    }
    return &ring_->entries[tail_ & kRingMask];
  }
  // Publishes the entry Reserve returned: every store made before (entry
  // fields, payload copied into the receiver's memory) is visible to a
  // consumer that sees it.
  void Publish(RingEntry* e) {
    e->seq.store(static_cast<uint32_t>(tail_ + 1), std::memory_order_release);
    ++tail_;
  }
  uint64_t tail() const { return tail_; }
  // The consumer head seen by the last Reserve that found the ring full.
  uint64_t cached_head() const { return cached_head_; }
  RingShared* ring() const { return ring_; }

 private:
  RingShared* ring_ = nullptr;
  uint64_t tail_ = 0;
  uint64_t cached_head_ = 0;
};

// The receiving side of a ring in this process's own segment.
// Thread contract: one thread at a time.
class RingConsumer {
 public:
  RingConsumer() = default;
  explicit RingConsumer(RingShared* ring) : ring_(ring) {}

  // The oldest unconsumed entry, or nullptr when none is published.
  const RingEntry* Peek() const {
    const RingEntry* e = &ring_->entries[head_ & kRingMask];
    return e->seq.load(std::memory_order_acquire) == static_cast<uint32_t>(head_ + 1) ? e : nullptr;
  }
  // Consumes the entry Peek returned (its fields must have been read).
  void Pop() { ++head_; }
  // Hands consumed entries back to the producer.
  void Release() {
    if (head_ != released_) {
      ring_->consumer_head.value.store(head_, std::memory_order_release);
      released_ = head_;
    }
  }
  uint64_t head() const { return head_; }
  RingShared* ring() const { return ring_; }

 private:
  RingShared* ring_ = nullptr;
  uint64_t head_ = 0;
  uint64_t released_ = 0;
};

// Whether `ring` holds a published entry its consumer has not released yet
// (reads only shared atomics: safe from any thread of the owner).
inline bool RingHasPublished(const RingShared* ring) {
  const uint64_t h = ring->consumer_head.value.load(std::memory_order_acquire);
  return ring->entries[h & kRingMask].seq.load(std::memory_order_acquire) ==
         static_cast<uint32_t>(h + 1);
}

}  // namespace ciuic::transport::shm

#endif  // CIUIC_TRANSPORT_SHM_SHM_RING_H_
