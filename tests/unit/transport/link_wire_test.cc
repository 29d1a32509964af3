// The ring description a Link publishes for its peer (transport/link_wire.h):
// what decodes, what is refused and how the refusal is named.
#include <cstdint>
#include <limits>
#include <string>

#include <gtest/gtest.h>

#include "transport/link_wire.h"

namespace ciuic::transport {
namespace {

RingDesc Desc() {
  RingDesc d;
  d.slot_size = 4096;
  d.nslots = 8;
  d.offset = 64;
  d.region = std::string("CTR1 region\0bytes", 17);
  return d;
}

TEST(LinkWire, DecodesWhatItEncodes) {
  const std::string blob = EncodeRing(Desc());
  ASSERT_EQ(blob.size(), kRingHeaderBytes + 17);
  StatusOr<RingDesc> d = DecodeRing(blob, 3, 4096, 8);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->slot_size, 4096u);
  EXPECT_EQ(d->nslots, 8u);
  EXPECT_EQ(d->offset, 64u);
  EXPECT_EQ(d->region, Desc().region);
  EXPECT_EQ(EncodeRing(*d), blob);
}

TEST(LinkWire, RefusesWhatIsNotARingDescription) {
  const std::string blob = EncodeRing(Desc());
  for (const std::string& bad : {std::string(), blob.substr(0, kRingHeaderBytes - 1), "CILX" + blob.substr(4),
                                 std::string(64, 'A')}) {
    StatusOr<RingDesc> d = DecodeRing(bad, 3, 4096, 8);
    ASSERT_FALSE(d.ok()) << bad.size();
    EXPECT_EQ(d.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(d.status().message().find("link to rank 3"), std::string::npos) << d.status().message();
  }
  std::string other_version = blob;
  other_version[4] = 2;
  StatusOr<RingDesc> d = DecodeRing(other_version, 3, 4096, 8);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("version 2"), std::string::npos) << d.status().message();
}

TEST(LinkWire, AnotherLayoutNamesTheKnobs) {
  StatusOr<RingDesc> d = DecodeRing(EncodeRing(Desc()), 5, 8192, 8);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(d.status().message().find("link to rank 5: it uses 8 slots of 4096 B, this rank 8 of 8192 B"),
            std::string::npos)
      << d.status().message();
  EXPECT_NE(d.status().message().find("CIUIC_CHUNK_SIZE / CIUIC_BUFFER_SIZE"), std::string::npos);
  EXPECT_FALSE(DecodeRing(EncodeRing(Desc()), 5, 4096, 9).ok());
}

TEST(LinkWire, ShapesBeyondTheLimitsAreRefusedEvenWhenBothSidesAgree) {
  // A ring whose byte count would overflow must never reach RingBytes.
  RingDesc d = Desc();
  d.slot_size = std::numeric_limits<uint64_t>::max();
  d.nslots = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(DecodeRing(EncodeRing(d), 1, d.slot_size, d.nslots).status().code(), StatusCode::kInvalidArgument);
  d.slot_size = kMaxSlotSize + 1;
  d.nslots = 2;
  EXPECT_FALSE(DecodeRing(EncodeRing(d), 1, d.slot_size, d.nslots).ok());
  d.slot_size = 1024;
  d.nslots = kMaxSlots + 1;
  EXPECT_FALSE(DecodeRing(EncodeRing(d), 1, d.slot_size, d.nslots).ok());
  d.nslots = 1;
  EXPECT_FALSE(DecodeRing(EncodeRing(d), 1, d.slot_size, d.nslots).ok());
  d.slot_size = kMaxSlotSize;
  d.nslots = kMaxSlots;
  EXPECT_TRUE(DecodeRing(EncodeRing(d), 1, d.slot_size, d.nslots).ok());
  EXPECT_TRUE(RingShapeOk(kMaxSlotSize, kMaxSlots));
  EXPECT_FALSE(RingShapeOk(0, 8));
}

TEST(LinkWire, TheRingMustLieInsideItsRegion) {
  RingDesc d = Desc();  // 4096 * 9 - 1 = 36863 bytes at offset 64
  const uint64_t bytes = RingBytes(d.slot_size, d.nslots);
  ASSERT_EQ(bytes, 36863u);
  EXPECT_TRUE(CheckRingInRegion(d, 64 + bytes, 2).ok());
  Status s = CheckRingInRegion(d, 64 + bytes - 1, 2);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("link to rank 2: its ring (36863 B at offset 64) lies outside its region of 36926 B"),
            std::string::npos)
      << s.message();
  // An offset that would wrap the sum around 2^64.
  d.offset = std::numeric_limits<uint64_t>::max() - 10;
  EXPECT_FALSE(CheckRingInRegion(d, 1ull << 40, 2).ok());
  d.offset = (1ull << 40) + 1;
  EXPECT_FALSE(CheckRingInRegion(d, 1ull << 40, 2).ok());
}

}  // namespace
}  // namespace ciuic::transport
