// The Link's ring description (transport/link_wire.h), which a peer publishes
// through the store. The first two bytes pick the reader's own shape, from
// the smallest to the largest (so the decoder's layout check is reached both
// ways); whatever decodes re-encodes to the description itself and has the
// reader's shape within the limits, and the placement check accepts a ring
// exactly when it lies inside the region (computed in 128 bits).
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
  // Shape selector 12/3 picks 4096 x 8 (below).
  WriteSeed(dir, "ring", std::string("\x0c\x03", 2) + EncodeRing(d));
  d.slot_size = 512u << 10;
  d.nslots = 16;
  d.offset = 0;
  d.region.clear();
  WriteSeed(dir, "ring_other_shape", std::string("\x13\x04", 2) + EncodeRing(d));
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // The reader's shape: 2^(b0 % 31) B slots (1 B..1 GiB), 2^(b1 % 21) slots
  // (at least 2, at most 2^20); 12/3 is 4096 x 8.
  const uint64_t slot = uint64_t{1} << (data[0] % 31);
  const uint64_t nslots = std::max<uint64_t>(uint64_t{1} << (data[1] % 21), 2);
  const std::string s = FuzzText(data + 2, size - 2);
  StatusOr<RingDesc> d = DecodeRing(s, 7, slot, nslots);
  if (!d.ok()) {
    FUZZ_CHECK(d.status().message().find("link to rank 7: ") == 0);
    return 0;
  }
  FUZZ_CHECK(EncodeRing(*d) == s);
  FUZZ_CHECK(d->slot_size == slot && d->nslots == nslots && RingShapeOk(d->slot_size, d->nslots));
  const uint64_t bytes = RingBytes(d->slot_size, d->nslots);
  FUZZ_CHECK(static_cast<unsigned __int128>(bytes) + 1 ==
             static_cast<unsigned __int128>(d->slot_size) * (d->nslots + 1));
  // Regions around the ring's end (which may wrap in 64 bits), and more.
  for (uint64_t region : {d->offset + bytes, d->offset + bytes - 1, d->offset, bytes, uint64_t{1} << 62, ~uint64_t{0}}) {
    const bool inside = static_cast<unsigned __int128>(d->offset) + bytes <= region;
    FUZZ_CHECK(CheckRingInRegion(*d, region, 7).ok() == inside);
  }
  return 0;
}
