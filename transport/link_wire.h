// Private: the ring description a Link publishes through the store for its
// peer, as pure functions, so it is unit-tested and fuzzed without a backend.
// Thread contract: plain values and pure functions.
//
// Wire format (integers little-endian; the region's own description, which
// the backend's Connection::ImportRegion decodes, is everything after):
//   "CILR" u8 version(=1)  u64 slot_size  u64 nslots  u64 offset  region...
// slot_size and nslots must equal the reader's own (CIUIC_CHUNK_SIZE and
// CIUIC_BUFFER_SIZE agree on every rank); offset is where the ring starts
// in the region, which must hold RingBytes(slot_size, nslots) from there.
#ifndef CIUIC_TRANSPORT_LINK_WIRE_H_
#define CIUIC_TRANSPORT_LINK_WIRE_H_

#include <cstdint>
#include <string>

#include "ciuic/status.h"

namespace ciuic::transport {

struct RingDesc {
  uint64_t slot_size = 0;
  uint64_t nslots = 0;
  uint64_t offset = 0;
  std::string region;  // the backend's description of the region holding the ring
};

inline constexpr size_t kRingHeaderBytes = 29;
// Bounds on a ring's shape, so RingBytes cannot overflow.
inline constexpr uint64_t kMaxSlotSize = 1ull << 30;
inline constexpr uint64_t kMaxSlots = 1ull << 20;

// The shapes Link::Create accepts (CIUIC_BUFFER_SIZE <= 1 GiB and
// CIUIC_CHUNK_SIZE >= 1 KiB keep a configured one inside).
inline bool RingShapeOk(uint64_t slot_size, uint64_t nslots) {
  return slot_size > 0 && slot_size <= kMaxSlotSize && nslots >= 2 && nslots <= kMaxSlots;
}

// A ring's bytes: one slot of slack, less a byte (link.h says why).
// Only for a shape RingShapeOk accepts.
inline uint64_t RingBytes(uint64_t slot_size, uint64_t nslots) { return slot_size * (nslots + 1) - 1; }

std::string EncodeRing(const RingDesc& d);

// The peer's ring, checked against this rank's layout: errors name `peer`
// (kDataLoss for a malformed description, kInvalidArgument for another
// layout, which names the knobs that must agree).
StatusOr<RingDesc> DecodeRing(const std::string& blob, int peer, uint64_t slot_size, uint64_t nslots);

// The ring inside the imported region of `region_size` bytes (kDataLoss
// naming `peer` if not).
Status CheckRingInRegion(const RingDesc& d, uint64_t region_size, int peer);

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_LINK_WIRE_H_
