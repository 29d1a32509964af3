// The shm transport's decoders: the endpoint and region descriptions a rank
// on the same host publishes through the store. Whatever decodes re-encodes
// to the input itself (the format has one encoding per description), stays
// inside the limits the decoder promises, and nothing else is accepted.
#include <climits>

#include "fuzz_check.h"
#include "transport/shm/shm_ring.h"
#include "transport/shm/shm_wire.h"

using namespace ciuic::transport::shm;

static const char kJob[] = "job-1";

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = SeedDir();
  if (dir == nullptr) return 0;
  EndpointDesc e;
  e.rank = 1;
  e.peer = 0;
  e.tag = 3;
  e.pid = 1234;
  e.doorbell = {5, 4096, 77, 0x0102030405060708ull};
  e.ring = {6, 1u << 16, 78, 0x1112131415161718ull};
  e.ring_entries = kRingEntries;
  e.entry_bytes = kEntryBytes;
  WriteSeed(dir, "endpoint", EncodeEndpoint(kJob, e));
  RegionDesc r;
  r.rank = 1;
  r.pid = 1234;
  r.size = 4096;
  r.mode = RegionMode::kSegment;
  r.segment = {7, 1u << 21, 79, 0x2122232425262728ull};
  r.offset = 8192;
  WriteSeed(dir, "region_segment", EncodeRegion(kJob, r));
  r.mode = RegionMode::kCaller;
  r.address = 0x7f0000002000ull;
  WriteSeed(dir, "region_caller", EncodeRegion(kJob, r));
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string s = FuzzText(data, size);
  if (auto e = DecodeEndpoint(s, kJob); e.ok()) {
    FUZZ_CHECK(EncodeEndpoint(kJob, *e) == s);
    FUZZ_CHECK(e->rank >= 0 && e->peer >= 0 && e->pid != 0 && e->pid <= static_cast<uint32_t>(INT_MAX));
    FUZZ_CHECK(e->ring_entries == kRingEntries && e->entry_bytes == kEntryBytes);
    FUZZ_CHECK(e->ring.bytes >= sizeof(RingShared) && e->doorbell.bytes >= sizeof(DoorbellShared));
    FUZZ_CHECK(!DecodeEndpoint(s, "job-2").ok());
    FUZZ_CHECK(!DecodeRegion(s, kJob).ok());
  }
  if (auto r = DecodeRegion(s, kJob); r.ok()) {
    FUZZ_CHECK(EncodeRegion(kJob, *r) == s);
    FUZZ_CHECK(r->rank >= 0 && r->pid != 0);
    if (r->mode == RegionMode::kSegment) {
      FUZZ_CHECK(r->offset <= r->segment.bytes && r->size <= r->segment.bytes - r->offset);
    } else {
      FUZZ_CHECK(r->mode == RegionMode::kCaller && r->address + r->size >= r->address);
    }
  }
  return 0;
}
