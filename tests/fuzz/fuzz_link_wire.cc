// The Link's ring description (transport/link_wire.h), which a peer publishes
// through the store. The first two bytes pick the reader's own shape (so the
// decoder's layout check is reached both ways); whatever decodes re-encodes
// to the description itself, has the reader's shape within the limits, and
// a ring the placement check accepts lies inside the region.
#include <algorithm>
#include <cstring>

#include "fuzz_check.h"
#include "transport/link_wire.h"

using namespace ciuic;
using namespace ciuic::transport;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = SeedDir();
  if (dir == nullptr) return 0;
  RingDesc d;
  d.slot_size = 4096;
  d.nslots = 8;
  d.offset = 64;
  d.region = "CTR1 a region description";
  // Shape selector 0/0 picks 4096 x 8 (below).
  WriteSeed(dir, "ring", std::string(2, '\0') + EncodeRing(d));
  d.slot_size = 512u << 10;
  d.nslots = 16;
  d.offset = 0;
  d.region.clear();
  WriteSeed(dir, "ring_other_shape", std::string("\1\2", 2) + EncodeRing(d));
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // The reader's shape: slot 4096 << (b0 % 20) B (capped at 1 GiB), nslots 8 << (b1 % 16);
  // 0/0 is 4096 x 8, other bytes reach the limits.
  const uint64_t slot = std::min<uint64_t>(4096ull << (data[0] % 20), kMaxSlotSize);
  const uint64_t nslots = std::min<uint64_t>(8ull << (data[1] % 16), kMaxSlots);
  const std::string s = FuzzText(data + 2, size - 2);
  StatusOr<RingDesc> d = DecodeRing(s, 7, slot, nslots);
  if (!d.ok()) {
    FUZZ_CHECK(d.status().message().find("link to rank 7: ") == 0);
    return 0;
  }
  FUZZ_CHECK(EncodeRing(*d) == s);
  FUZZ_CHECK(d->slot_size == slot && d->nslots == nslots && RingShapeOk(d->slot_size, d->nslots));
  const uint64_t bytes = RingBytes(d->slot_size, d->nslots);
  FUZZ_CHECK(bytes >= d->slot_size * d->nslots);
  // Regions around the ring's end, and one that would need a wrap.
  for (uint64_t region : {d->offset + bytes, d->offset + bytes - 1, d->offset, bytes, uint64_t{1} << 62}) {
    const bool inside = d->offset <= region && region - d->offset >= bytes;
    FUZZ_CHECK(CheckRingInRegion(*d, region, 7).ok() == inside);
  }
  return 0;
}
