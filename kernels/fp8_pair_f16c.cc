// Two-input fp8 sum and avg on x86 CPUs with AVX2 and F16C but without
// AVX512-FP16 (Haswell to Alder Lake, Zen 1-5): the path a ring or tree
// step takes in the wire accumulation mode. Like fp8_pair_fp16.cc, 32
// elements stay as two registers of 16 u16 lanes (the even and the odd
// bytes) decoded to f16 with integer steps; F16C widens each half to f32
// (one instruction per 8 lanes), the sum is taken there, narrowed back to
// f16 with explicit round-to-nearest, and rounded to 8 bits with integer
// steps: about 75 (e5m2) and 120 (e4m3) operations per 64 elements, where
// the Highway kernels take about 45 per 16.
//
// Why the result is the correctly rounded one: every fp8 value is exact in
// f16 (e5m2 is an f16's high byte; e4m3 is exact after scaling by 2^-8);
// rounding the exact sum to f32 (24 bits) and then to f16 equals rounding
// it to f16 at once (24 >= 2 * 11 + 1, the double-rounding bound for
// sums), and so does rounding that f16 to fp8 (11 >= 2 * 4 + 1). f16 keeps
// 7 bits below the smallest fp8 subnormal; f32 never overflows or goes
// subnormal here. The halving of avg is exact in f32. The f32 additions
// follow MXCSR, which Reducer sets to its default around every call
// (common/fp_env.h); the narrowing names its rounding. The unit tests check
// every pair of codes against the scalar reference.
//
// This file alone is compiled with -mavx2 -mf16c (kernels/CMakeLists.txt)
// and only called after Reducer has checked the CPU, so it must not define
// or instantiate anything shared with other files (an inline function
// compiled here could be the copy the linker keeps for everyone).
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/dispatch.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

namespace ciuic::kernels::internal {
namespace {

// f16 lanes x and y -> f16 lanes of x + y (halved for avg, clamped to
// +-1.75 for e4m3, whose values are scaled by 2^-8: +-448, no Inf).
template <bool kE4M3, bool kAvg>
inline __m256i AddF16(__m256i x, __m256i y) {
  auto sum = [](__m128i a, __m128i b) {
    __m256 s = _mm256_add_ps(_mm256_cvtph_ps(a), _mm256_cvtph_ps(b));
    if constexpr (kAvg) s = _mm256_mul_ps(s, _mm256_set1_ps(0.5f));
    if constexpr (kE4M3) {
      s = _mm256_max_ps(_mm256_min_ps(s, _mm256_set1_ps(1.75f)), _mm256_set1_ps(-1.75f));
    }
    return _mm256_cvtps_ph(s, _MM_FROUND_TO_NEAREST_INT);
  };
  const __m128i lo = sum(_mm256_castsi256_si128(x), _mm256_castsi256_si128(y));
  const __m128i hi = sum(_mm256_extracti128_si256(x, 1), _mm256_extracti128_si256(y, 1));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

// 32 results from 32 codes of each input (one byte per element).
template <bool kE4M3, bool kAvg>
inline __m256i Pair32(__m256i a, __m256i b) {
  const __m256i hi_bytes = _mm256_set1_epi16(static_cast<int16_t>(0xFF00));
  const __m256i one = _mm256_set1_epi16(1);
  // Each u16 lane holds an even element in its low byte and the next odd
  // one in its high byte; "e" and "o" are f16 lanes of those.
  if constexpr (!kE4M3) {
    __m256i se = AddF16<false, kAvg>(_mm256_slli_epi16(a, 8), _mm256_slli_epi16(b, 8));
    __m256i so = AddF16<false, kAvg>(_mm256_and_si256(a, hi_bytes), _mm256_and_si256(b, hi_bytes));
    // Round to the high byte, ties to even. Inf stays Inf, NaN stays NaN
    // (a NaN's low byte is zero here: no carry), and from 61440 the carry
    // gives Inf, as IEEE-like e5m2 wants.
    const __m256i k7f = _mm256_set1_epi16(0x7F);
    se = _mm256_add_epi16(_mm256_add_epi16(se, k7f), _mm256_and_si256(_mm256_srli_epi16(se, 8), one));
    so = _mm256_add_epi16(_mm256_add_epi16(so, k7f), _mm256_and_si256(_mm256_srli_epi16(so, 8), one));
    return _mm256_or_si256(_mm256_and_si256(so, hi_bytes), _mm256_srli_epi16(se, 8));
  } else {
    // sign -> bit 15, exponent and mantissa -> bits 7..13: the value times
    // 2^-8 as an f16 (subnormals included). srai copies the sign into bit
    // 14 as well, which the mask clears.
    const __m256i no_bit14 = _mm256_set1_epi16(static_cast<int16_t>(0xBF80));
    auto dec = [&](__m256i x) { return _mm256_and_si256(_mm256_srai_epi16(x, 1), no_bit14); };
    __m256i re = AddF16<true, kAvg>(dec(_mm256_slli_epi16(a, 8)), dec(_mm256_slli_epi16(b, 8)));
    __m256i ro = AddF16<true, kAvg>(dec(a), dec(b));
    // Round away the low 7 bits, ties to even; the carry stops below bit 14
    // (|x| <= 1.75).
    const __m256i k3f = _mm256_set1_epi16(0x3F);
    re = _mm256_add_epi16(_mm256_add_epi16(re, k3f), _mm256_and_si256(_mm256_srli_epi16(re, 7), one));
    ro = _mm256_add_epi16(_mm256_add_epi16(ro, k3f), _mm256_and_si256(_mm256_srli_epi16(ro, 7), one));
    // Even byte: sign from bit 15, code from bits 7..13; odd byte likewise,
    // one byte up. Bit 14 is clear, so the shifted code needs no mask
    // beyond the sign's.
    const __m256i ev = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(re, 8), _mm256_set1_epi16(0x80)),
                                       _mm256_and_si256(_mm256_srli_epi16(re, 7), _mm256_set1_epi16(0x7F)));
    const __m256i od = _mm256_or_si256(_mm256_and_si256(ro, _mm256_set1_epi16(static_cast<int16_t>(0x8000))),
                                       _mm256_and_si256(_mm256_slli_epi16(ro, 1), _mm256_set1_epi16(0x7F00)));
    const __m256i out = _mm256_or_si256(ev, od);
    // S.1111.111 (NaN) decoded as a finite value above: any NaN input gives NaN.
    const __m256i s80 = _mm256_set1_epi8(static_cast<char>(0x80));
    const __m256i ones = _mm256_set1_epi8(-1);
    const __m256i nan =
        _mm256_cmpeq_epi8(_mm256_max_epu8(_mm256_or_si256(a, s80), _mm256_or_si256(b, s80)), ones);
    return _mm256_blendv_epi8(out, _mm256_set1_epi8(0x7F), nan);
  }
}

// Whole 64-byte lines from i on (two registers each), prefetching pf bytes
// ahead where asked; returns where they stop. Steps of two adjacent lines,
// all four halves computed before any is stored, as in fp8_pair_512-inl.h.
template <bool kE4M3, bool kAvg, bool kStream>
size_t Lines(uint8_t* d, const uint8_t* a, const uint8_t* b, size_t i, size_t n, size_t pf) {
  auto half = [&](size_t at) {
    return Pair32<kE4M3, kAvg>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + at)),
                               _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + at)));
  };
  auto put = [&](size_t at, __m256i r) {
    if constexpr (kStream) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(d + at), r);
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + at), r);
    }
  };
  auto two_lines = [&](size_t at) {
    const __m256i r0 = half(at), r1 = half(at + 32), r2 = half(at + 64), r3 = half(at + 96);
    put(at, r0);
    put(at + 32, r1);
    put(at + 64, r2);
    put(at + 96, r3);
  };
  for (; pf != 0 && i + 128 + pf <= n; i += 128) {
    _mm_prefetch(reinterpret_cast<const char*>(a + i + pf), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(a + i + pf + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + i + pf), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + i + pf + 64), _MM_HINT_T0);
    two_lines(i);
  }
  for (; i + 128 <= n; i += 128) two_lines(i);
  if (i + 64 <= n) {
    const __m256i r0 = half(i), r1 = half(i + 32);
    put(i, r0);
    put(i + 32, r1);
    i += 64;
  }
  return i;
}

template <bool kE4M3, bool kAvg>
void Run(const ReduceArgs& args) {
  auto* d = static_cast<uint8_t*>(args.dst);
  const auto* a = static_cast<const uint8_t*>(args.srcs[0]);
  const auto* b = static_cast<const uint8_t*>(args.srcs[1]);
  const size_t n = args.count;
  // Fewer than 32 elements (a head or a tail) go through zero-padded copies:
  // AVX2 has no byte-masked loads. Both inputs are read before d is
  // written, so d may be either input.
  auto partial = [&](size_t i, size_t len) {
    alignas(32) uint8_t x[32] = {}, y[32] = {}, r[32];
    std::memcpy(x, a + i, len);
    std::memcpy(y, b + i, len);
    _mm256_store_si256(reinterpret_cast<__m256i*>(r),
                       Pair32<kE4M3, kAvg>(_mm256_load_si256(reinterpret_cast<const __m256i*>(x)),
                                           _mm256_load_si256(reinterpret_cast<const __m256i*>(y))));
    std::memcpy(d + i, r, len);
  };
  auto whole = [&](size_t i) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                        Pair32<kE4M3, kAvg>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + i)),
                                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + i))));
  };
  size_t i = 0;
  if (args.nt) {
    // Streaming stores need 32-byte alignment, and the line pairs want the
    // output's lines: the head (to a 64-byte boundary) goes through a copy
    // and one plain store.
    const size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
    i = head < n ? head : n;
    if (i > 32) {
      partial(0, i - 32);
      whole(i - 32);
    } else if (i != 0) {
      partial(0, i);
    }
    i = Lines<kE4M3, kAvg, true>(d, a, b, i, n, args.prefetch_bytes);
    _mm_sfence();
  } else {
    i = Lines<kE4M3, kAvg, false>(d, a, b, i, n, args.prefetch_bytes);
  }
  if (i + 32 <= n) {
    whole(i);
    i += 32;
  }
  if (i < n) partial(i, n - i);
}

}  // namespace

const bool kFp8PairF16cCompiled = true;

void ReduceFp8PairF16c(const ReduceArgs& a) {
  const bool e4m3 = a.dtype == DataType::kFloat8E4M3;
  if (a.op == ReduceOp::kAvg) {
    e4m3 ? Run<true, true>(a) : Run<false, true>(a);
  } else {
    e4m3 ? Run<true, false>(a) : Run<false, false>(a);
  }
}

}  // namespace ciuic::kernels::internal

#else

namespace ciuic::kernels::internal {
const bool kFp8PairF16cCompiled = false;
void ReduceFp8PairF16c(const ReduceArgs&) {}
}  // namespace ciuic::kernels::internal

#endif
