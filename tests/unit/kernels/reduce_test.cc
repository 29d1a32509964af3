// Every dtype x op x nsrcs x size x alignment x aliasing, on every SIMD target
// compiled in and runnable here, against the scalar reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <algorithm>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <xmmintrin.h>
#endif

#include "ciuic/kernels.h"
#include "kernels/dispatch.h"
#include "kernels/reference.h"
#include "test_util.h"

namespace ciuic::kernels {
namespace {

using testing::Fill;
using testing::MakeReducer;

struct Case {
  DataType dt;
  ReduceOp op;
  int nsrcs;
  size_t count;
  size_t misalign = 0;  // bytes added to every pointer
  int alias = -1;       // -1: dst separate; else dst == srcs[alias]
  double factor = 0.375;  // premul_sum's (others ignore it)
};

std::string Describe(const Case& c) {
  return std::string(DataTypeName(c.dt)) + " " + ReduceOpName(c.op) + " n=" +
         std::to_string(c.nsrcs) + " count=" + std::to_string(c.count) +
         " misalign=" + std::to_string(c.misalign) + " alias=" + std::to_string(c.alias);
}

// Runs one case on `r` and compares with the reference; returns the number
// of wrong elements (and reports the first).
size_t RunCase(const Reducer& r, const Case& c, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t es = DataTypeSize(c.dt);
  const size_t bytes = c.count * es + c.misalign + 64;
  std::vector<std::vector<unsigned char>> bufs(c.nsrcs, std::vector<unsigned char>(bytes));
  std::vector<const void*> srcs(c.nsrcs);
  // Random values for up to 4099 elements, then the pattern repeated (large
  // cases stay fast to fill; each source still differs).
  const size_t period = 4099;
  for (int k = 0; k < c.nsrcs; ++k) {
    unsigned char* p = bufs[k].data() + c.misalign;
    const size_t first = c.count < period ? c.count : period;
    Fill(p, first, c.dt, c.op, rng);
    for (size_t done = first; done < c.count;) {
      const size_t n = std::min(first, c.count - done);
      std::memcpy(p + done * es, p, n * es);
      done += n;
    }
    srcs[k] = p;
  }
  std::vector<unsigned char> want(c.count * es + 1);
  ref::Reduce(want.data(), srcs.data(), c.nsrcs, c.count, c.dt, c.op, c.factor);
  std::vector<unsigned char> out(bytes, 0xAB);
  void* dst = c.alias >= 0 ? const_cast<void*>(srcs[c.alias]) : out.data() + c.misalign;
  // Guard bytes after dst must stay untouched.
  unsigned char* dst_bytes = static_cast<unsigned char*>(dst);
  const std::vector<unsigned char> guard_before(dst_bytes + c.count * es,
                                                dst_bytes + c.count * es + 32);
  Status s = r.Reduce(dst, srcs.data(), c.nsrcs, c.count, c.dt, c.op, c.factor);
  EXPECT_TRUE(s.ok()) << s.ToString() << " " << Describe(c);
  size_t wrong = 0;
  for (size_t i = 0; i < c.count; ++i) {
    if (!ref::SameElement(dst, want.data(), i, c.dt)) {
      if (wrong++ == 0) {
        uint64_t got = 0, exp = 0;
        std::memcpy(&got, dst_bytes + i * es, es);
        std::memcpy(&exp, want.data() + i * es, es);
        ADD_FAILURE() << r.target_name() << " " << Describe(c) << ": element " << i << " got 0x"
                      << std::hex << got << " want 0x" << exp;
      }
    }
  }
  EXPECT_EQ(0, std::memcmp(guard_before.data(), dst_bytes + c.count * es, 32))
      << "wrote past the end: " << Describe(c);
  return wrong;
}

class ReduceTest : public ::testing::TestWithParam<std::string> {
 protected:
  Reducer r_ = MakeReducer(GetParam());
};

constexpr DataType kAllTypes[] = {
    DataType::kInt8,     DataType::kUint8,   DataType::kInt16,      DataType::kUint16,
    DataType::kInt32,    DataType::kUint32,  DataType::kInt64,      DataType::kUint64,
    DataType::kBool,     DataType::kFloat16, DataType::kBFloat16,   DataType::kFloat32,
    DataType::kFloat64,  DataType::kFloat8E4M3, DataType::kFloat8E5M2};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum,  ReduceOp::kProd, ReduceOp::kMin,
                                ReduceOp::kMax,  ReduceOp::kAvg,  ReduceOp::kBand,
                                ReduceOp::kBor,  ReduceOp::kBxor, ReduceOp::kPremulSum};
// The float ops, for the NaN/Inf cases.
constexpr ReduceOp kFloatOps[] = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax,
                                  ReduceOp::kAvg, ReduceOp::kPremulSum};

TEST_P(ReduceTest, EveryTypeOpArityAndSmallSize) {
  EXPECT_STREQ(r_.target_name(), [&] {
    static std::string up;
    up = GetParam();
    for (char& ch : up) ch = static_cast<char>(std::toupper(ch));
    return up.c_str();
  }());
  // Sizes around the vector widths of every target (up to 64 lanes of u8),
  // odd primes, and one larger than the L1 tile.
  const size_t sizes[] = {0, 1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 251, 4099};
  const int arities[] = {1, 2, 3, 4, 5, 8, 9, 16};
  uint64_t seed = 1;
  for (DataType dt : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      if (!Supports(dt, op)) continue;
      for (int n : arities) {
        for (size_t count : sizes) {
          ASSERT_EQ(RunCase(r_, Case{dt, op, n, count}, seed++), 0u);
        }
      }
    }
  }
}

TEST_P(ReduceTest, MisalignedPointersAndAliasing) {
  // Non-temporal stores from 1 KiB on, so that their head/tail handling is
  // covered at these sizes too (an aliased dst never streams).
  const Reducer r_ = MakeReducer(GetParam(), /*nt_threshold=*/1024);
  uint64_t seed = 100;
  for (DataType dt : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      if (!Supports(dt, op)) continue;
      for (int n : {2, 3, 6, 16}) {
        for (size_t mis : {1, 3, 5}) {
          for (int alias : {-1, 0, n - 1}) {
            ASSERT_EQ(RunCase(r_, Case{dt, op, n, 1021, mis, alias}, seed++), 0u);
          }
        }
      }
    }
  }
}

// Several MiB with non-temporal stores forced on (and off), prefetch on.
TEST_P(ReduceTest, LargeWithNonTemporalStores) {
  const Reducer nt = MakeReducer(GetParam(), /*nt_threshold=*/4096, /*tile=*/0, 1024);
  const Reducer plain = MakeReducer(GetParam(), /*nt_threshold=*/0, /*tile=*/8192, 0);
  uint64_t seed = 1000;
  for (DataType dt : kAllTypes) {
    const size_t count = (3u << 20) / DataTypeSize(dt) + 13;  // 3 MiB, odd tail
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kBxor}) {
      if (!Supports(dt, op)) continue;
      for (int n : {2, 7}) {
        ASSERT_EQ(RunCase(nt, Case{dt, op, n, count, n == 2 ? 0u : 2u, -1}, seed++), 0u);
        ASSERT_EQ(RunCase(plain, Case{dt, op, n, count, 0, 0}, seed++), 0u);
      }
    }
  }
}

template <typename T>
void NanInfCase(const Reducer& r, DataType dt) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  const T inf = std::numeric_limits<T>::infinity();
  std::vector<T> a = {1, nan, inf, -inf, inf, 2, nan, 0};
  std::vector<T> b = {nan, 1, -inf, -inf, 1, 3, nan, -0.0};
  const void* srcs[2] = {a.data(), b.data()};
  std::vector<T> out(a.size());
  for (ReduceOp op : kFloatOps) {
    ASSERT_TRUE(r.Reduce(out.data(), srcs, 2, a.size(), dt, op).ok());
    for (size_t i = 0; i < a.size(); ++i) {
      const bool any_nan = std::isnan(a[i]) || std::isnan(b[i]);
      if (any_nan) {
        EXPECT_TRUE(std::isnan(out[i])) << ReduceOpName(op) << " element " << i;
      }
    }
    if (op == ReduceOp::kSum) {
      EXPECT_TRUE(std::isnan(out[2]));  // inf + -inf
      EXPECT_EQ(out[3], -inf);
      EXPECT_EQ(out[4], inf);
    }
    if (op == ReduceOp::kMin) {
      EXPECT_EQ(out[2], -inf);
      EXPECT_EQ(out[4], 1);
    }
    if (op == ReduceOp::kMax) {
      EXPECT_EQ(out[2], inf);
    }
  }
}

TEST_P(ReduceTest, NanPropagatesAndInfinitiesFollowIeee) {
  NanInfCase<float>(r_, DataType::kFloat32);
  NanInfCase<double>(r_, DataType::kFloat64);
  // Halves: NaN (0x7E00 f16, 0x7FC0 bf16) and Inf through f32.
  const uint16_t f16[2][3] = {{0x7E00, 0x7C00, 0x3C00}, {0x3C00, 0xFC00, 0x7BFF}};
  const void* srcs[2] = {f16[0], f16[1]};
  uint16_t out[3];
  ASSERT_TRUE(r_.Reduce(out, srcs, 2, 3, DataType::kFloat16, ReduceOp::kMax).ok());
  EXPECT_EQ(out[0] & 0x7C00, 0x7C00);
  EXPECT_NE(out[0] & 0x03FF, 0);  // NaN
  EXPECT_EQ(out[1], 0x7C00);      // max(+inf, -inf)
  EXPECT_EQ(out[2], 0x7BFF);      // 65504
  ASSERT_TRUE(r_.Reduce(out, srcs, 2, 3, DataType::kFloat16, ReduceOp::kSum).ok());
  EXPECT_EQ(out[2], 0x7BFF);  // 1 + 65504 rounds back to 65504
}

TEST_P(ReduceTest, HalfSumRoundsOnceInF32) {
  // bf16: 1 + 2^-8 + 2^-8 is 1 + 2^-7 exactly in f32 (representable), while
  // rounding after each addition would give 1 (ties to even) both times.
  const uint16_t one = 0x3F80, eps = 0x3B80;  // 1.0, 2^-8
  const uint16_t a[1] = {one}, b[1] = {eps}, c[1] = {eps};
  const void* srcs[3] = {a, b, c};
  uint16_t out[1];
  ASSERT_TRUE(r_.Reduce(out, srcs, 3, 1, DataType::kBFloat16, ReduceOp::kSum).ok());
  EXPECT_EQ(out[0], 0x3F81);
}

TEST_P(ReduceTest, IntegersWrapAndAvgTruncates) {
  const int8_t a[4] = {127, -128, 100, -7};
  const int8_t b[4] = {1, -1, 100, 2};
  const void* srcs[2] = {a, b};
  int8_t out[4];
  ASSERT_TRUE(r_.Reduce(out, srcs, 2, 4, DataType::kInt8, ReduceOp::kSum).ok());
  EXPECT_EQ(out[0], -128);
  EXPECT_EQ(out[1], 127);
  ASSERT_TRUE(r_.Reduce(out, srcs, 2, 4, DataType::kInt8, ReduceOp::kProd).ok());
  EXPECT_EQ(out[2], static_cast<int8_t>(10000 & 0xFF));
  EXPECT_EQ(out[3], -14);
  ASSERT_TRUE(r_.Reduce(out, srcs, 2, 4, DataType::kInt8, ReduceOp::kAvg).ok());
  EXPECT_EQ(out[3], -2);  // (-7 + 2) / 2 truncates toward zero
  const uint64_t x[1] = {~0ull}, y[1] = {3};
  const void* s64[2] = {x, y};
  uint64_t o64[1];
  ASSERT_TRUE(r_.Reduce(o64, s64, 2, 1, DataType::kUint64, ReduceOp::kProd).ok());
  EXPECT_EQ(o64[0], ~0ull * 3);
}

TEST_P(ReduceTest, NarrowIntegersBoolAndBitwiseOps) {
  const int16_t a[4] = {32767, -32768, 300, -7};
  const int16_t b[4] = {1, -1, 300, 2};
  const void* srcs[2] = {a, b};
  int16_t out[4];
  ASSERT_TRUE(r_.Reduce(out, srcs, 2, 4, DataType::kInt16, ReduceOp::kSum).ok());
  EXPECT_EQ(out[0], -32768);  // wraps
  EXPECT_EQ(out[1], 32767);
  ASSERT_TRUE(r_.Reduce(out, srcs, 2, 4, DataType::kInt16, ReduceOp::kProd).ok());
  EXPECT_EQ(out[2], static_cast<int16_t>(90000 & 0xFFFF));
  ASSERT_TRUE(r_.Reduce(out, srcs, 2, 4, DataType::kInt16, ReduceOp::kMin).ok());
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], -32768);
  ASSERT_TRUE(r_.Reduce(out, srcs, 2, 4, DataType::kInt16, ReduceOp::kAvg).ok());
  EXPECT_EQ(out[3], -2);
  const uint16_t ua[3] = {0xF0F0, 0xFFFF, 40000}, ub[3] = {0x0FF0, 0x00FF, 50000};
  const void* us[2] = {ua, ub};
  uint16_t uo[3];
  ASSERT_TRUE(r_.Reduce(uo, us, 2, 3, DataType::kUint16, ReduceOp::kBand).ok());
  EXPECT_EQ(uo[0], 0x00F0);
  EXPECT_EQ(uo[1], 0x00FF);
  ASSERT_TRUE(r_.Reduce(uo, us, 2, 3, DataType::kUint16, ReduceOp::kBor).ok());
  EXPECT_EQ(uo[0], 0xFFF0);
  ASSERT_TRUE(r_.Reduce(uo, us, 2, 3, DataType::kUint16, ReduceOp::kBxor).ok());
  EXPECT_EQ(uo[0], 0xFF00);
  EXPECT_EQ(uo[1], 0xFF00);
  ASSERT_TRUE(r_.Reduce(uo, us, 2, 3, DataType::kUint16, ReduceOp::kMax).ok());
  EXPECT_EQ(uo[2], 50000);  // unsigned compare
  const int64_t x[1] = {-1}, y[1] = {0x0123456789ABCDEF};
  const void* s64[2] = {x, y};
  int64_t o64[1];
  ASSERT_TRUE(r_.Reduce(o64, s64, 2, 1, DataType::kInt64, ReduceOp::kBxor).ok());
  EXPECT_EQ(o64[0], ~0x0123456789ABCDEF);
  // bool: sum is or, prod is and (torch's mapping); the bitwise ops too.
  const uint8_t p[4] = {0, 0, 1, 1}, q[4] = {0, 1, 0, 1};
  const void* bs[2] = {p, q};
  uint8_t bo[4];
  const struct { ReduceOp op; uint8_t want[4]; } bool_cases[] = {
      {ReduceOp::kSum, {0, 1, 1, 1}},  {ReduceOp::kProd, {0, 0, 0, 1}}, {ReduceOp::kMin, {0, 0, 0, 1}},
      {ReduceOp::kMax, {0, 1, 1, 1}},  {ReduceOp::kBand, {0, 0, 0, 1}}, {ReduceOp::kBor, {0, 1, 1, 1}},
      {ReduceOp::kBxor, {0, 1, 1, 0}}};
  for (const auto& bc : bool_cases) {
    ASSERT_TRUE(r_.Reduce(bo, bs, 2, 4, DataType::kBool, bc.op).ok());
    EXPECT_EQ(std::vector<uint8_t>(bo, bo + 4), std::vector<uint8_t>(bc.want, bc.want + 4))
        << ReduceOpName(bc.op);
  }
}

TEST_P(ReduceTest, PremulSumScalesEachInputBeforeTheSum) {
  const float a[3] = {2, 4, 1e30f}, b[3] = {6, -4, 1e30f};
  const void* srcs[2] = {a, b};
  float out[3];
  ASSERT_TRUE(r_.Reduce(out, srcs, 2, 3, DataType::kFloat32, ReduceOp::kPremulSum, 0.5).ok());
  EXPECT_EQ(out[0], 4.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 1e30f);  // scaled first: no overflow on the way
  // f16 near its top: 60000 + 60000 overflows, 0.5 * each does not.
  const uint16_t h[1] = {ref::F32ToF16(60000.0f)};
  const void* hs[2] = {h, h};
  uint16_t ho[1];
  ASSERT_TRUE(r_.Reduce(ho, hs, 2, 1, DataType::kFloat16, ReduceOp::kPremulSum, 0.5).ok());
  EXPECT_EQ(ref::F16ToF32(ho[0]), ref::F16ToF32(h[0]));
  // Without a factor premul_sum is the sum.
  ASSERT_TRUE(r_.Reduce(out, srcs, 2, 2, DataType::kFloat32, ReduceOp::kPremulSum).ok());
  EXPECT_EQ(out[0], 8.0f);
}

// Every pair of fp8 codes (256 x 256, NaN, zeros, subnormals, the largest
// values) under every float op, against the scalar reference.
// fp8 results as bits: equal bytes (the sign of a zero included), or both NaN.
bool SameFp8Bits(uint8_t got, uint8_t want, DataType dt) {
  auto nan = [&](uint8_t v) {
    return dt == DataType::kFloat8E4M3 ? (v & 0x7F) == 0x7F : (v & 0x7C) == 0x7C && (v & 0x03) != 0;
  };
  return got == want || (nan(got) && nan(want));
}

// This target's Reducer under every two-input fp8 kernel this CPU and
// build can run (CIUIC_FP8_PAIRS): the target's own widening one, the
// AVX2 + F16C one, the AVX512-FP16 one.
std::vector<Reducer> EveryFp8PairKernel(const std::string& target, int64_t nt_threshold = -1,
                                        size_t prefetch = 1024, const CacheSizes& caches = CacheSizes{}) {
  std::vector<Reducer> out;
  for (const char* k : {"f32", "f16c", "avx512", "avx512fp16"}) {
    Config c;
    c.simd_target = target;
    c.fp8_pairs = k;
    c.kernel_nt_threshold = nt_threshold;
    c.kernel_prefetch_bytes = prefetch;
    StatusOr<Reducer> r = Reducer::Create(c, caches);
    if (r.ok()) out.push_back(*r);
  }
  return out;
}

TEST_P(ReduceTest, Fp8EveryPairOfCodes) {
  std::vector<uint8_t> a(65536), b(65536), out(65536), want(65536);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<uint8_t>(i >> 8);
    b[i] = static_cast<uint8_t>(i & 0xFF);
  }
  const void* srcs[2] = {a.data(), b.data()};
  for (const Reducer& r : EveryFp8PairKernel(GetParam())) {
    const char* kernel = Reducer::Fp8PairKernelName(r.fp8_pair_kernel());
    for (DataType dt : {DataType::kFloat8E4M3, DataType::kFloat8E5M2}) {
      for (ReduceOp op : kFloatOps) {
        // The pair kernels take sum and avg only: the others ran once.
        if (r.fp8_pair_kernel() != Reducer::Fp8PairKernel::kWidened && op != ReduceOp::kSum &&
            op != ReduceOp::kAvg) {
          continue;
        }
        for (double factor : {1.0, 0.125, 3.0}) {
          if (op != ReduceOp::kPremulSum && factor != 1.0) continue;
          ASSERT_TRUE(r.Reduce(out.data(), srcs, 2, out.size(), dt, op, factor).ok());
          ref::Reduce(want.data(), srcs, 2, want.size(), dt, op, factor);
          // Sum and avg to the bit (a zero's sign too); min and max may
          // pick either zero of a tie, as SameElement allows.
          const bool bits = op == ReduceOp::kSum || op == ReduceOp::kAvg;
          size_t wrong = 0;
          for (size_t i = 0; i < out.size(); ++i) {
            const bool same = bits ? SameFp8Bits(out[i], want[i], dt) : ref::SameElement(out.data(), want.data(), i, dt);
            if (!same && wrong++ < 3) {
              ADD_FAILURE() << kernel << " " << DataTypeName(dt) << " " << ReduceOpName(op) << " x" << factor
                            << " codes 0x" << std::hex << int{a[i]} << ", 0x" << int{b[i]} << ": got 0x"
                            << int{out[i]} << " want 0x" << int{want[i]};
            }
          }
          EXPECT_EQ(wrong, 0u) << kernel << " " << DataTypeName(dt) << " " << ReduceOpName(op);
        }
      }
    }
  }
}

// Two-input fp8 sum/avg under every pair kernel: random codes (zeros of
// either sign among them) at lengths around the kernels' 32-, 64- and
// 128-byte steps; the output at several offsets from a 64-byte boundary (the
// streaming heads), the inputs at the same or another offset, or in place;
// streamed and regular stores, each with prefetch (a 4 KiB "L2" turns it on
// from 1366 elements); 64 guard bytes on both sides; the bits compared.
TEST_P(ReduceTest, Fp8PairsAtEveryLengthAlignmentAndStorePath) {
  CacheSizes small;
  small.l2 = 4096;
  std::vector<Reducer> all = EveryFp8PairKernel(GetParam());
  for (int64_t nt : {1, 0}) {
    for (const Reducer& r : EveryFp8PairKernel(GetParam(), nt, 256, small)) all.push_back(r);
  }
  constexpr size_t kGuard = 64;
  std::mt19937_64 rng(7);
  for (const Reducer& r : all) {
    const char* kernel = Reducer::Fp8PairKernelName(r.fp8_pair_kernel());
    for (DataType dt : {DataType::kFloat8E4M3, DataType::kFloat8E5M2}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        for (size_t count : {1, 31, 32, 33, 63, 64, 65, 95, 96, 127, 128, 129, 191, 192, 193, 255, 1000, 70001}) {
          for (size_t out_off : {0, 1, 32, 63}) {
            for (int alias : {-1, 0, 1}) {
              // Inputs 7 bytes off the output's offset, or at it (in place).
              const size_t in_off = alias < 0 ? (out_off + 7) % 64 : out_off;
              const size_t bytes = count + 3 * kGuard;
              auto aligned = [](size_t n) {
                return std::unique_ptr<uint8_t[], decltype(&std::free)>(
                    static_cast<uint8_t*>(std::aligned_alloc(64, (n + 63) / 64 * 64)), &std::free);
              };
              auto a = aligned(bytes), b = aligned(bytes), out = aligned(bytes);
              for (size_t i = 0; i < bytes; ++i) {
                const uint64_t x = rng();
                // One code in 16 a zero of either sign.
                a[i] = (x & 0xF0) == 0 ? static_cast<uint8_t>(x & 0x80) : static_cast<uint8_t>(x >> 8);
                b[i] = (x & 0xF00) == 0 ? static_cast<uint8_t>((x >> 16) & 0x80) : static_cast<uint8_t>(x >> 24);
                out[i] = 0xAB;
              }
              const void* srcs[2] = {a.get() + kGuard + in_off, b.get() + kGuard + in_off};
              std::vector<uint8_t> want(count);
              ref::Reduce(want.data(), srcs, 2, count, dt, op, 1.0);
              uint8_t* base = alias < 0 ? out.get() : (alias == 0 ? a.get() : b.get());
              uint8_t* dst = base + kGuard + out_off;
              const std::vector<uint8_t> before(base, dst), after(dst + count, base + bytes);
              ASSERT_TRUE(r.Reduce(dst, srcs, 2, count, dt, op).ok());
              size_t wrong = 0;
              for (size_t i = 0; i < count; ++i) wrong += !SameFp8Bits(dst[i], want[i], dt);
              ASSERT_EQ(wrong, 0u) << kernel << " " << DataTypeName(dt) << " " << ReduceOpName(op) << " count "
                                   << count << " output offset " << out_off << " alias " << alias << " nt from "
                                   << r.nt_threshold_bytes();
              ASSERT_TRUE(std::equal(after.begin(), after.end(), dst + count)) << kernel << ": wrote past the end";
              ASSERT_TRUE(std::equal(before.begin(), before.end(), base)) << kernel << ": wrote before the start";
            }
          }
        }
      }
    }
  }
}

// Sums and products of at most 256 bytes take a short fold (the small
// all-reduce's path: 16-byte vectors, then single elements); its bytes must
// be the vector kernel's, which runs on
// the same inputs placed at the head of 257 elements: random values, NaNs
// with differing payloads, infinities, signed zeros, subnormals; every
// arity, in place (dst one of the inputs) and apart. A NaN must be NaN;
// its payload may differ (see below).
template <typename F>
F Bits(uint64_t b) {
  F f;
  std::memcpy(&f, &b, sizeof(F));
  return f;
}

TEST_P(ReduceTest, TinySumsAndProductsMatchTheVectorKernelsBits) {
  constexpr size_t kLong = 257;  // past two vectors of every target
  std::mt19937_64 rng(7);
  const uint32_t f32_special[] = {0x7fc00001u, 0xffc00002u, 0x7f800001u, 0x7f800000u, 0xff800000u,
                                  0x80000000u, 0x00000001u, 0x807fffffu, 0x3f800000u, 0x7f7fffffu};
  const uint64_t f64_special[] = {0x7ff8000000000001ull, 0xfff8000000000002ull, 0x7ff0000000000000ull,
                                  0xfff0000000000000ull, 0x8000000000000000ull, 0x0000000000000001ull,
                                  0x3ff0000000000000ull, 0x7fefffffffffffffull};
  for (DataType dt : {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kUint32,
                      DataType::kInt64, DataType::kUint64}) {
    const size_t es = DataTypeSize(dt);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd}) {
      for (int n : {1, 2, 3, 5, 16}) {
        for (size_t count = 1; count * es <= 288; ++count) {  // past the fold's limit too
          for (int alias : {-1, 0, n - 1}) {
            std::vector<std::vector<unsigned char>> in(n, std::vector<unsigned char>(kLong * es));
            for (auto& b : in) {
              for (auto& byte : b) byte = static_cast<unsigned char>(rng());
              // A third of the head's elements special values (floats).
              for (size_t i = 0; i < count; ++i) {
                if (rng() % 3 != 0) continue;
                if (dt == DataType::kFloat32) {
                  std::memcpy(&b[i * es], &f32_special[rng() % std::size(f32_special)], es);
                } else if (dt == DataType::kFloat64) {
                  std::memcpy(&b[i * es], &f64_special[rng() % std::size(f64_special)], es);
                }
              }
            }
            std::vector<const void*> long_srcs(n);
            for (int k = 0; k < n; ++k) long_srcs[k] = in[k].data();
            std::vector<unsigned char> want(kLong * es);
            ASSERT_TRUE(r_.Reduce(want.data(), long_srcs.data(), n, kLong, dt, op).ok());
            std::vector<std::vector<unsigned char>> head(n);
            std::vector<const void*> srcs(n);
            for (int k = 0; k < n; ++k) {
              head[k].assign(in[k].begin(), in[k].begin() + static_cast<std::ptrdiff_t>(count * es));
              srcs[k] = head[k].data();
            }
            std::vector<unsigned char> out(count * es + 16, 0xAB);
            void* dst = alias >= 0 ? head[alias].data() : out.data();
            ASSERT_TRUE(r_.Reduce(dst, srcs.data(), n, count, dt, op).ok());
            for (size_t i = 0; i < count; ++i) {
              uint64_t got = 0, exp = 0, a = 0;
              std::memcpy(&got, static_cast<const char*>(dst) + i * es, es);
              std::memcpy(&exp, want.data() + i * es, es);
              std::string ins;
              for (int k = 0; k < n; ++k) {
                std::memcpy(&a, in[k].data() + i * es, es);
                ins += " " + std::to_string(a);
              }
              // Which NaN payload wins where two meet is the compiler's
              // operand order (x86 returns the first operand's), in the
              // kernel as in the fold: NaN must stay NaN, any payload.
              const bool nan_exp = dt == DataType::kFloat32   ? std::isnan(Bits<float>(exp))
                                   : dt == DataType::kFloat64 ? std::isnan(Bits<double>(exp))
                                                              : false;
              if (nan_exp) {
                ASSERT_TRUE(dt == DataType::kFloat32 ? std::isnan(Bits<float>(got)) : std::isnan(Bits<double>(got)))
                    << r_.target_name() << " " << DataTypeName(dt) << " element " << i << " not NaN: " << got;
                continue;
              }
              ASSERT_EQ(got, exp) << r_.target_name() << " " << DataTypeName(dt) << " " << ReduceOpName(op)
                                  << " n=" << n << " count=" << count << " alias=" << alias << " element " << i
                                  << " inputs" << ins;
            }
            if (alias < 0) {
              EXPECT_EQ(out[count * es], 0xAB) << "wrote past the end";
            }
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTargets, ReduceTest, ::testing::ValuesIn(testing::RunnableTargets()),
                         [](const auto& info) { return info.param; });

// Two-input fp8 sum/avg take the AVX512-FP16 kernel on the AVX3 targets
// where the CPU has it, else the AVX-512 one there, the F16C kernel on
// AVX2, the target's own elsewhere; CIUIC_FP8_PAIRS names one or refuses
// it, naming the knob.
TEST(ReducerTest, Fp8PairsTakeTheBestKernelTheCpuHas) {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  bool fp16 = false, avx512 = false, f16c = false;
  while (std::getline(info, line)) {
    if (line.rfind("flags", 0) == 0) {
      line += " ";
      auto has = [&](const char* flag) { return line.find(std::string(" ") + flag + " ") != std::string::npos; };
      fp16 = has("avx512_fp16") && has("avx512bw") && has("bmi2");
      avx512 = has("avx512f") && has("avx512bw") && has("bmi2");
      f16c = has("f16c") && has("avx2");
      break;
    }
  }
  fp16 = fp16 && internal::kFp8PairFp16Compiled;
  avx512 = avx512 && internal::kFp8PairAvx512Compiled;
  f16c = f16c && internal::kFp8PairF16cCompiled;
  using K = Reducer::Fp8PairKernel;
  struct Choice {
    const char* knob;
    bool can;
    K kernel;
  };
  const Choice choices[] = {{"f32", true, K::kWidened},
                            {"f16c", f16c, K::kF16c},
                            {"avx512", avx512, K::kAvx512},
                            {"avx512fp16", fp16, K::kAvx512Fp16}};
  for (const std::string& t : testing::RunnableTargets()) {
    const bool avx3 = t == "avx3" || t == "avx3_dl";
    const K want = avx3 && fp16     ? K::kAvx512Fp16
                   : avx3 && avx512 ? K::kAvx512
                   : (avx3 || t == "avx2") && f16c ? K::kF16c
                                                  : K::kWidened;
    EXPECT_EQ(MakeReducer(t).fp8_pair_kernel(), want) << t;
    for (const Choice& k : choices) {
      Config c;
      c.simd_target = t;
      c.fp8_pairs = k.knob;
      StatusOr<Reducer> r = Reducer::Create(c, CacheSizes{});
      ASSERT_EQ(r.ok(), k.can) << t << " " << k.knob << ": " << r.status().ToString();
      if (k.can) {
        EXPECT_EQ(r->fp8_pair_kernel(), k.kernel) << t << " " << k.knob;
      } else {
        EXPECT_NE(r.status().message().find(std::string("CIUIC_FP8_PAIRS=") + k.knob), std::string::npos)
            << r.status().ToString();
      }
    }
  }
  // A value set in code, not through the parser, is checked too.
  Config odd;
  odd.fp8_pairs = "F16C";
  StatusOr<Reducer> refused = Reducer::Create(odd, CacheSizes{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("CIUIC_FP8_PAIRS='F16C'"), std::string::npos)
      << refused.status().ToString();
  Config far;
  far.kernel_prefetch_bytes = (64u << 10) + 1;
  refused = Reducer::Create(far, CacheSizes{});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("CIUIC_KERNEL_PREFETCH=65537"), std::string::npos)
      << refused.status().ToString();
  far.kernel_prefetch_bytes = 64u << 10;
  EXPECT_TRUE(Reducer::Create(far, CacheSizes{}).ok());
  // Every check above ran whatever the CPU has; say which kernels it lacks.
  for (const Choice& k : choices) {
    if (!k.can) std::printf("note: this CPU (/proc/cpuinfo) or build has no %s kernel\n", k.knob);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// Runs f with MXCSR = csr and returns MXCSR as f left it (the default
// environment is back before anything else runs: gtest's own arithmetic
// must not trap).
template <typename F>
unsigned UnderMxcsr(unsigned csr, F&& f) {
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(csr);
  f();
  const unsigned after = _mm_getcsr();
  _mm_setcsr(saved);
  return after;
}

// Every target, the AVX512-FP16 and F16C fp8 kernels included (the AVX3 and
// AVX2 targets take them by default), computes the same bits
// whatever floating-point environment the calling thread set: a rank whose
// program rounds upward or flushes subnormals (torch.set_flush_denormal)
// must not disagree with its peers, and one that unmasked exceptions must
// not take SIGFPE on an overflowing or NaN-making sum. The caller's MXCSR
// comes back unchanged, flags included (none raised by the kernels, none
// cleared).
TEST(ReducerTest, EveryTargetIgnoresTheCallersFloatingPointEnvironment) {
  struct Env {
    const char* name;
    unsigned csr;
  };
  const Env envs[] = {{"the default", 0x1F80}, {"the default with flags raised", 0x1FBF},
                      {"toward zero", 0x7F80}, {"upward", 0x5F80}, {"downward", 0x3F80},
                      {"FTZ and DAZ", 0x9FC0}, {"every exception unmasked", 0x0000}};
  const DataType types[] = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                            DataType::kBFloat16, DataType::kFloat8E4M3, DataType::kFloat8E5M2};
  const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProd, ReduceOp::kMin,
                          ReduceOp::kMax, ReduceOp::kPremulSum};
  // Random bits: every exponent, subnormals, Inf and NaN, sums that round,
  // overflow or cancel; 65536 + 3 elements so fp8 pairs meet every pair
  // of codes and the tails run too.
  constexpr size_t kCount = 65539;
  std::mt19937_64 rng(23);
  std::vector<std::vector<uint8_t>> in(3, std::vector<uint8_t>(kCount * 8));
  for (auto& v : in) {
    for (auto& byte : v) byte = static_cast<uint8_t>(rng());
  }
  for (size_t i = 0; i < 65536; ++i) {
    in[0][i] = static_cast<uint8_t>(i >> 8);
    in[1][i] = static_cast<uint8_t>(i & 0xFF);
  }
  std::vector<uint8_t> want(kCount * 8), got(kCount * 8);
  for (const std::string& t : testing::RunnableTargets()) {
    const Reducer r = MakeReducer(t);
    const std::vector<Reducer> fp8_kernels = EveryFp8PairKernel(t);
    for (DataType dt : types) {
      const size_t bytes = kCount * DataTypeSize(dt);
      const bool fp8 = dt == DataType::kFloat8E4M3 || dt == DataType::kFloat8E5M2;
      // fp8 under every pair kernel this CPU has, not only the one auto picks.
      for (const Reducer& rk : fp8 ? fp8_kernels : std::vector<Reducer>{r}) {
        const char* kernel = fp8 ? Reducer::Fp8PairKernelName(rk.fp8_pair_kernel()) : "";
        for (ReduceOp op : ops) {
          if (!Supports(dt, op)) continue;
          for (int nsrcs : {2, 3}) {
            const void* srcs[3] = {in[0].data(), in[1].data(), in[2].data()};
            ASSERT_TRUE(rk.Reduce(want.data(), srcs, nsrcs, kCount, dt, op, 0.1).ok());
            for (const Env& e : envs) {
              Status st;
              const unsigned after =
                  UnderMxcsr(e.csr, [&] { st = rk.Reduce(got.data(), srcs, nsrcs, kCount, dt, op, 0.1); });
              ASSERT_TRUE(st.ok()) << st.message();
              EXPECT_EQ(after, e.csr) << t << " " << kernel << ": the caller's MXCSR was not restored under "
                                      << e.name;
              EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0)
                  << t << " " << kernel << " " << DataTypeName(dt) << " " << ReduceOpName(op) << " of " << nsrcs
                  << " under " << e.name;
            }
          }
        }
      }
      if (dt == DataType::kFloat32 || dt == DataType::kFloat64) continue;
      // f32 -> the narrow type and back: the rounding, the saturation and
      // the subnormals of the conversions.
      const size_t nbytes = kCount * DataTypeSize(dt);
      std::vector<uint8_t> want_f(kCount * 4), got_f(kCount * 4);
      ASSERT_TRUE(r.Convert(in[2].data(), DataType::kFloat32, want.data(), dt, kCount).ok());
      ASSERT_TRUE(r.Convert(in[0].data(), dt, want_f.data(), DataType::kFloat32, kCount).ok());
      for (const Env& e : envs) {
        Status to, from;
        const unsigned after = UnderMxcsr(e.csr, [&] {
          to = r.Convert(in[2].data(), DataType::kFloat32, got.data(), dt, kCount);
          from = r.Convert(in[0].data(), dt, got_f.data(), DataType::kFloat32, kCount);
        });
        ASSERT_TRUE(to.ok() && from.ok());
        EXPECT_EQ(after, e.csr) << t << ": MXCSR not restored by Convert under " << e.name;
        EXPECT_EQ(std::memcmp(got.data(), want.data(), nbytes), 0)
            << t << " f32 -> " << DataTypeName(dt) << " under " << e.name;
        EXPECT_EQ(std::memcmp(got_f.data(), want_f.data(), kCount * 4), 0)
            << t << " " << DataTypeName(dt) << " -> f32 under " << e.name;
      }
    }
  }
}
#else
TEST(ReducerTest, EveryTargetIgnoresTheCallersFloatingPointEnvironment) {
  GTEST_SKIP() << "only x86 kernels run in the default floating-point environment (MXCSR); arm64's FPCR is "
                  "not handled yet";
}
#endif

TEST(ReducerTest, ChoosesBestAndHonoursCap) {
  const auto targets = testing::RunnableTargets();
  ASSERT_FALSE(targets.empty());
  auto best = Reducer::Create(Config{}, CacheSizes{});
  ASSERT_TRUE(best.ok());
  std::string want = targets.front();
  for (char& ch : want) ch = static_cast<char>(std::toupper(ch));
  EXPECT_EQ(best->target_name(), want);
  Config c;
  c.simd_target = "scalar";
  auto bad = Reducer::Create(c, CacheSizes{});
  // "scalar" is the fallback of this Highway build on x86; elsewhere EMU128.
  if (!bad.ok()) {
    EXPECT_NE(bad.status().message().find("CIUIC_SIMD_TARGET"), std::string::npos);
  }
  c.simd_target = "sve2";
  auto missing = Reducer::Create(c, CacheSizes{});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("CIUIC_SIMD_TARGET='sve2'"), std::string::npos);
}

TEST(ReducerTest, ThresholdsComeFromCachesAndKnobs) {
  CacheSizes caches{48 * 1024, 1 << 20, 512u << 20};
  auto r = Reducer::Create(Config{}, caches);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tile_bytes(), 12u * 1024);
  EXPECT_EQ(r->tile_large_bytes(), 64u * 1024);
  EXPECT_EQ(r->nt_threshold_bytes(), 16u << 20);  // LLC capped at 32 MiB, halved
  EXPECT_EQ(r->prefetch_min_bytes(), 1u << 20);
  Config never;
  never.kernel_nt_threshold = 0;
  EXPECT_EQ(Reducer::Create(never, caches)->nt_threshold_bytes(), SIZE_MAX);
}

TEST(ReducerTest, BadArgumentsAreNamedErrors) {
  auto r = Reducer::Create(Config{}, CacheSizes{});
  ASSERT_TRUE(r.ok());
  float a[8] = {}, b[8] = {}, out[8];
  const void* srcs[2] = {a, b};
  auto msg = [](const Status& s) { return s.message(); };
  Status s = r->Reduce(nullptr, srcs, 2, 8, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(msg(s).find("dst"), std::string::npos);
  const void* with_null[2] = {a, nullptr};
  s = r->Reduce(out, with_null, 2, 8, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_NE(msg(s).find("srcs[1]"), std::string::npos) << msg(s);
  s = r->Reduce(out, srcs, 0, 8, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_NE(msg(s).find("nsrcs"), std::string::npos);
  s = r->Reduce(out, srcs, 17, 8, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_NE(msg(s).find("nsrcs"), std::string::npos);
  s = r->Reduce(out, srcs, 2, 8, static_cast<DataType>(42), ReduceOp::kSum);
  EXPECT_NE(msg(s).find("dtype"), std::string::npos);
  s = r->Reduce(out, srcs, 2, 8, DataType::kFloat32, static_cast<ReduceOp>(-1));
  EXPECT_NE(msg(s).find("op"), std::string::npos);
  const void* overl[2] = {a, a + 1};
  s = r->Reduce(a, overl, 2, 4, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_NE(msg(s).find("srcs[1] overlaps dst"), std::string::npos) << msg(s);
  // Ops a dtype does not define are named with the dtype.
  s = r->Reduce(out, srcs, 2, 8, DataType::kFloat32, ReduceOp::kBand);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(msg(s).find("band on dtype f32"), std::string::npos) << msg(s);
  s = r->Reduce(out, srcs, 2, 8, DataType::kInt32, ReduceOp::kPremulSum, 2.0);
  EXPECT_NE(msg(s).find("premul_sum on dtype i32"), std::string::npos) << msg(s);
  s = r->Reduce(out, srcs, 2, 8, DataType::kBool, ReduceOp::kAvg);
  EXPECT_NE(msg(s).find("avg on dtype bool"), std::string::npos) << msg(s);
  // Null pointers are fine with count == 0.
  EXPECT_TRUE(r->Reduce(nullptr, srcs, 2, 0, DataType::kFloat32, ReduceOp::kSum).ok());
}

}  // namespace
}  // namespace ciuic::kernels
