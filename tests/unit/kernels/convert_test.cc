// f32 <-> f16/bf16 conversions on every target, bit-exact against the
// search-based reference rounding (round to nearest, ties to even).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/reference.h"
#include "test_util.h"

namespace ciuic::kernels {
namespace {

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

bool IsNan16(uint16_t v, bool bf) {
  return bf ? ((v & 0x7F80) == 0x7F80 && (v & 0x7F)) : ((v & 0x7C00) == 0x7C00 && (v & 0x3FF));
}

// Inputs that exercise rounding: every tie and neighbour around the values
// of both formats' exponent range, subnormals, overflow edges, and random bits.
std::vector<float> Inputs() {
  std::vector<float> v;
  const uint32_t edges[] = {0x00000000, 0x80000000, 0x00000001, 0x33000000, 0x33000001,
                            0x337FFFFF, 0x387FC000, 0x387FE000, 0x387FF000, 0x38800000,
                            0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FFFFF, 0x47800000,
                            0x7F7FFFFF, 0x7F7F8000, 0x7F7F7FFF, 0x7F800000, 0xFF800000,
                            0x7FC00000, 0x7F800001, 0xFFC12345, 0x3F808000, 0x3F818000,
                            0x3F808001, 0x3F807FFF, 0x3F800FFF, 0x3F801000, 0x3F803000};
  for (uint32_t e : edges) v.push_back(FromBits(e));
  // Every f32 whose low 13 bits are a tie / near-tie for f16, and whose low
  // 16 bits are for bf16, across the whole exponent range.
  for (uint32_t exp = 0; exp < 256; ++exp) {
    for (uint32_t low : {0x0FFFu, 0x1000u, 0x1001u, 0x3000u, 0x7FFFu, 0x8000u, 0x8001u, 0x18000u}) {
      v.push_back(FromBits((exp << 23) | low));
      v.push_back(FromBits(0x80000000u | (exp << 23) | 0x2000u | low));
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) v.push_back(FromBits(rng()));
  return v;
}

class ConvertTest : public ::testing::TestWithParam<std::string> {
 protected:
  Reducer r_ = testing::MakeReducer(GetParam());
};

TEST_P(ConvertTest, F32ToHalfMatchesReferenceBitExactly) {
  const std::vector<float> in = Inputs();
  std::vector<uint16_t> bf(in.size()), h(in.size());
  ASSERT_TRUE(r_.ConvertF32ToBF16(in.data(), bf.data(), in.size()).ok());
  ASSERT_TRUE(r_.ConvertF32ToF16(in.data(), h.data(), in.size()).ok());
  size_t bad_bf = 0, bad_h = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const uint16_t want_bf = ref::F32ToBF16(in[i]);
    const uint16_t want_h = ref::F32ToF16(in[i]);
    const bool ok_bf = std::isnan(in[i]) ? IsNan16(bf[i], true) && (bf[i] >> 15) == (want_bf >> 15)
                                         : bf[i] == want_bf;
    const bool ok_h = std::isnan(in[i]) ? IsNan16(h[i], false) : h[i] == want_h;
    if (!ok_bf && bad_bf++ < 3) {
      ADD_FAILURE() << "bf16 of " << std::hexfloat << in[i] << ": got 0x" << std::hex << bf[i]
                    << " want 0x" << want_bf;
    }
    if (!ok_h && bad_h++ < 3) {
      ADD_FAILURE() << "f16 of " << std::hexfloat << in[i] << ": got 0x" << std::hex << h[i]
                    << " want 0x" << want_h;
    }
  }
  EXPECT_EQ(bad_bf, 0u);
  EXPECT_EQ(bad_h, 0u);
}

TEST_P(ConvertTest, HalfToF32IsExactForEveryEncoding) {
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> fb(65536), fh(65536);
  ASSERT_TRUE(r_.ConvertBF16ToF32(all.data(), fb.data(), all.size()).ok());
  ASSERT_TRUE(r_.ConvertF16ToF32(all.data(), fh.data(), all.size()).ok());
  std::vector<uint16_t> back(65536);
  ASSERT_TRUE(r_.ConvertF32ToF16(fh.data(), back.data(), back.size()).ok());
  for (uint32_t i = 0; i < 65536; ++i) {
    const float wb = ref::BF16ToF32(static_cast<uint16_t>(i));
    const float wh = ref::F16ToF32(static_cast<uint16_t>(i));
    if (std::isnan(wb)) {
      ASSERT_TRUE(std::isnan(fb[i])) << i;
    } else {
      ASSERT_EQ(std::memcmp(&wb, &fb[i], 4), 0) << "bf16 0x" << std::hex << i;
    }
    if (std::isnan(wh)) {
      ASSERT_TRUE(std::isnan(fh[i])) << i;
      ASSERT_TRUE(IsNan16(back[i], false)) << i;
    } else {
      ASSERT_EQ(std::memcmp(&wh, &fh[i], 4), 0) << "f16 0x" << std::hex << i;
      ASSERT_EQ(back[i], i) << "f16 round trip 0x" << std::hex << i;
    }
  }
}

TEST_P(ConvertTest, OddSizesAndUnalignedPointers) {
  std::vector<float> in(1000);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(i) * 1.37f - 300.f;
  for (size_t off : {0, 1, 3}) {
    for (size_t n : {0, 1, 5, 17, 99}) {
      std::vector<uint16_t> out(n + 8, 0xDEAD);
      ASSERT_TRUE(r_.ConvertF32ToBF16(in.data() + off, out.data() + off, n).ok());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[off + i], ref::F32ToBF16(in[off + i]));
      ASSERT_EQ(out[off + n], 0xDEAD) << "wrote past the end";
    }
  }
  EXPECT_EQ(r_.ConvertF32ToF16(nullptr, nullptr, 0).code(), StatusCode::kOk);
  uint16_t o[4];
  EXPECT_EQ(r_.ConvertF32ToF16(nullptr, o, 4).code(), StatusCode::kInvalidArgument);
  float f[4] = {};
  // cppcheck-suppress invalidPointerCast ; an overlapping source on purpose
  EXPECT_EQ(r_.ConvertBF16ToF32(reinterpret_cast<uint16_t*>(f) + 1, f, 2).code(),
            StatusCode::kInvalidArgument);  // overlapping
}

// Inputs for fp8: every code's value, the midpoints between neighbours and
// their neighbouring floats (ties and near-ties), past the largest values,
// subnormal edges, specials and random bits.
std::vector<float> Fp8Inputs(bool e4m3) {
  std::vector<float> v = Inputs();
  auto dec = [e4m3](uint32_t c) {
    return e4m3 ? ref::DecodeE4M3(static_cast<uint8_t>(c)) : ref::DecodeE5M2(static_cast<uint8_t>(c));
  };
  const uint32_t last = e4m3 ? 0x7E : 0x7B;
  for (uint32_t c = 0; c <= last; ++c) {
    const double lo = dec(c), hi = c < last ? dec(c + 1) : 2 * dec(c) - dec(c - 1);
    const float mid = static_cast<float>((lo + hi) / 2);
    for (float x : {static_cast<float>(lo), mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e30f),
                    static_cast<float>(hi) * 1.5f}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  for (float x : {448.f, 449.f, 463.99f, 464.f, 465.f, 1e6f, 57344.f, 61439.f, 61440.f, 65536.f}) {
    v.push_back(x);
    v.push_back(-x);
  }
  return v;
}

TEST_P(ConvertTest, F32ToFp8MatchesReferenceBitExactly) {
  for (bool e4m3 : {true, false}) {
    const DataType dt = e4m3 ? DataType::kFloat8E4M3 : DataType::kFloat8E5M2;
    const std::vector<float> in = Fp8Inputs(e4m3);
    std::vector<uint8_t> out(in.size());
    ASSERT_TRUE(r_.Convert(in.data(), DataType::kFloat32, out.data(), dt, in.size()).ok());
    size_t bad = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const uint8_t want = ref::RoundTo8(in[i], e4m3);
      const bool ok = std::isnan(in[i]) ? ref::IsNaN8(out[i], e4m3) : out[i] == want;
      if (!ok && bad++ < 3) {
        ADD_FAILURE() << DataTypeName(dt) << " of " << std::hexfloat << in[i] << ": got 0x" << std::hex
                      << int{out[i]} << " want 0x" << int{want};
      }
    }
    EXPECT_EQ(bad, 0u) << DataTypeName(dt);
  }
}

TEST_P(ConvertTest, Fp8ToF32IsExactForEveryCode) {
  for (bool e4m3 : {true, false}) {
    const DataType dt = e4m3 ? DataType::kFloat8E4M3 : DataType::kFloat8E5M2;
    std::vector<uint8_t> all(256 + 7), back(256 + 7, 0xEE);
    for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(i);
    std::vector<float> f(all.size());
    ASSERT_TRUE(r_.Convert(all.data(), dt, f.data(), DataType::kFloat32, all.size()).ok());
    ASSERT_TRUE(r_.Convert(f.data(), DataType::kFloat32, back.data(), dt, 256).ok());
    for (uint32_t i = 0; i < 256; ++i) {
      const double want = e4m3 ? ref::DecodeE4M3(static_cast<uint8_t>(i)) : ref::DecodeE5M2(static_cast<uint8_t>(i));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(f[i])) << DataTypeName(dt) << " 0x" << std::hex << i;
        ASSERT_TRUE(ref::IsNaN8(back[i], e4m3)) << i;
      } else {
        ASSERT_EQ(static_cast<double>(f[i]), want) << DataTypeName(dt) << " 0x" << std::hex << i;
        ASSERT_EQ(std::signbit(f[i]), (i & 0x80) != 0) << i;
        ASSERT_EQ(back[i], i) << DataTypeName(dt) << " round trip 0x" << std::hex << i;
      }
    }
    EXPECT_EQ(back[256], 0xEE) << "wrote past the end";
  }
  float f[4] = {};
  EXPECT_EQ(r_.Convert(f, DataType::kFloat32, f + 1, DataType::kFloat64, 2).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r_.Convert(f, DataType::kInt8, f + 1, DataType::kFloat32, 2).code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, ConvertTest,
                         ::testing::ValuesIn(testing::RunnableTargets()),
                         [](const auto& info) { return info.param; });

// The reference rounding itself, on values whose answer is known by hand.
TEST(ReferenceRoundingTest, KnownValues) {
  EXPECT_EQ(ref::F32ToF16(1.0f), 0x3C00);
  EXPECT_EQ(ref::F32ToF16(65504.f), 0x7BFF);
  EXPECT_EQ(ref::F32ToF16(65519.f), 0x7BFF);
  EXPECT_EQ(ref::F32ToF16(65520.f), 0x7C00);  // halfway to 65536 -> even -> Inf
  EXPECT_EQ(ref::F32ToF16(std::ldexp(1.f, -24)), 0x0001);
  EXPECT_EQ(ref::F32ToF16(std::ldexp(1.f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(ref::F32ToF16(std::ldexp(3.f, -25)), 0x0002);  // 1.5 ulp -> 2
  EXPECT_EQ(ref::F32ToF16(-2.f), 0xC000);
  EXPECT_EQ(ref::F32ToBF16(1.0f), 0x3F80);
  EXPECT_EQ(ref::F32ToBF16(FromBits(0x3F808000)), 0x3F80);  // tie -> even
  EXPECT_EQ(ref::F32ToBF16(FromBits(0x3F818000)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(ref::F32ToBF16(FromBits(0x3F808001)), 0x3F81);
  EXPECT_EQ(ref::F32ToBF16(FromBits(0x7F7FFFFF)), 0x7F80);  // rounds to Inf
}

// The fp8 reference against the OCP spec's own numbers.
TEST(ReferenceRoundingTest, Fp8KnownValues) {
  EXPECT_EQ(ref::DecodeE4M3(0x7E), 448.0);             // largest finite
  EXPECT_TRUE(std::isnan(ref::DecodeE4M3(0x7F)));      // the one NaN (and 0xFF)
  EXPECT_EQ(ref::DecodeE4M3(0x08), std::ldexp(1, -6));  // smallest normal
  EXPECT_EQ(ref::DecodeE4M3(0x01), std::ldexp(1, -9));  // smallest subnormal
  EXPECT_EQ(ref::DecodeE4M3(0x38), 1.0);
  EXPECT_EQ(ref::F32ToE4M3(1000.f), 0x7E);              // saturates
  EXPECT_EQ(ref::F32ToE4M3(-INFINITY), 0xFE);
  EXPECT_EQ(ref::F32ToE4M3(1.0625f), 0x38);             // tie -> even (1.0)
  EXPECT_EQ(ref::F32ToE4M3(1.1875f), 0x3A);             // tie -> even (1.25)
  EXPECT_EQ(ref::F32ToE4M3(std::ldexp(1.f, -10)), 0x00);  // half the smallest: tie -> 0
  EXPECT_EQ(ref::DecodeE5M2(0x7B), 57344.0);
  EXPECT_TRUE(std::isinf(ref::DecodeE5M2(0x7C)));
  EXPECT_TRUE(std::isnan(ref::DecodeE5M2(0x7D)));
  EXPECT_EQ(ref::DecodeE5M2(0x01), std::ldexp(1, -16));
  EXPECT_EQ(ref::DecodeE5M2(0x3C), 1.0);
  EXPECT_EQ(ref::F32ToE5M2(61439.f), 0x7B);
  EXPECT_EQ(ref::F32ToE5M2(61440.f), 0x7C);  // halfway past 57344 -> Inf
  EXPECT_EQ(ref::F32ToE5M2(-1e9f), 0xFC);
}

}  // namespace
}  // namespace ciuic::kernels
