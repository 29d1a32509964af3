// Private to the shm backend: the descriptions a rank publishes (through the
// store) for its peers on the same host to connect and to import its memory,
// as pure functions, so they are unit-tested and fuzzed without segments.
//
// Blob wire format (integers big-endian; nothing may follow the last field):
//   "CISH" u8 version(=1) u8 type u16 job_len job_id[job_len]
//   type 1, endpoint: i32 rank i32 peer u32 tag u32 pid
//                     segment doorbell, segment ring,
//                     u32 ring_entries u32 entry_bytes
//   type 2, region:   i32 rank u32 pid u64 size u8 mode
//                     mode 1 (shared segment): segment, u64 offset
//                     mode 2 (caller memory):  u64 address
//   segment:          u32 fd u64 bytes u64 inode u64 seg_id
//
// A decoder checks the structure and what needs no state: header, job, the
// ring layout, a pid a process can have, a region inside its segment. The
// backend then checks the ranks, tag and pid against the connection, and
// the segments themselves (fetched through the peer's pidfd).
#ifndef CIUIC_TRANSPORT_SHM_SHM_WIRE_H_
#define CIUIC_TRANSPORT_SHM_SHM_WIRE_H_

#include <cstdint>
#include <string>

#include "ciuic/status.h"

namespace ciuic::transport::shm {

// Where a peer finds a segment: the owner's fd number (for pidfd_getfd) and
// what the fetched file must be.
struct SegmentDesc {
  uint32_t fd = 0;
  uint64_t bytes = 0;
  uint64_t inode = 0;
  uint64_t seg_id = 0;
};

struct EndpointDesc {
  int32_t rank = 0;  // the owner
  int32_t peer = 0;  // the rank it was made for
  uint32_t tag = 0;
  uint32_t pid = 0;  // the owner's
  SegmentDesc doorbell;
  SegmentDesc ring;  // the owner's receive ring for `peer`
  uint32_t ring_entries = 0;
  uint32_t entry_bytes = 0;
};

enum class RegionMode : uint8_t { kSegment = 1, kCaller = 2 };

struct RegionDesc {
  int32_t rank = 0;
  uint32_t pid = 0;
  uint64_t size = 0;
  RegionMode mode = RegionMode::kSegment;
  SegmentDesc segment;   // kSegment
  uint64_t offset = 0;   // kSegment: where the region starts in the segment
  uint64_t address = 0;  // kCaller: in the owner's address space
};

// The job id is cut to 64 KiB - 1 bytes (never reached: job ids are short).
std::string EncodeEndpoint(const std::string& job_id, const EndpointDesc& d);
std::string EncodeRegion(const std::string& job_id, const RegionDesc& d);

// kInvalidArgument saying what is wrong: not an shm blob, another version,
// the other type, another job, malformed, or (endpoint) a ring layout this
// build does not use or segments too small for it, a pid no process has;
// (region) a range outside its segment or an unknown mode.
StatusOr<EndpointDesc> DecodeEndpoint(const std::string& blob, const std::string& job_id);
StatusOr<RegionDesc> DecodeRegion(const std::string& blob, const std::string& job_id);

}  // namespace ciuic::transport::shm

#endif  // CIUIC_TRANSPORT_SHM_SHM_WIRE_H_
