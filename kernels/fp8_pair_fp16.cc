// Two-input fp8 sum and avg on x86 CPUs with AVX512-FP16 (Sapphire Rapids
// and later): the path a ring or tree step takes in the wire accumulation
// mode. The Highway kernels widen every element to f32 and narrow it back
// (about 45 operations per 16 elements, compute-bound even at DRAM sizes);
// here 64 elements stay in two registers of 32 f16 lanes (the even and the
// odd bytes), are added in f16 and rounded to 8 bits with integer steps.
//
// Why f16 gives the correctly rounded result: every fp8 value is exact in
// f16 (e5m2 is an f16's high byte; e4m3 is exact after scaling by 2^-8), a
// sum of two values of p significand bits is rounded once without harm by
// a format of at least 2p + 2 bits (f16 has 11; e4m3 p = 4, e5m2 p = 3),
// and f16 keeps 7 bits below the smallest fp8 subnormal and overflows
// (65520) only above e5m2's Inf threshold (61440); scaled e4m3 stays <= 3.5.
// The f16 operations use explicit round-to-nearest and suppress exceptions:
// the caller's MXCSR (rounding mode, unmasked exceptions) plays no part.
// The unit tests check every pair of codes against the scalar reference.
//
// This file alone is compiled with -mavx512fp16 (kernels/CMakeLists.txt)
// and only called after Reducer has checked the CPU, so it must not define
// or instantiate anything shared with other files (an inline function
// compiled here could be the copy the linker keeps for everyone).
#include <cstddef>
#include <cstdint>

#include "kernels/dispatch.h"

#if defined(__x86_64__) && defined(__AVX512FP16__) && defined(__AVX512BW__) && defined(__BMI2__)
#include <immintrin.h>

namespace ciuic::kernels::internal {
namespace {

constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
inline __m512h Add(__m512h x, __m512h y) { return _mm512_add_round_ph(x, y, kRne); }
inline __m512h Mul(__m512h x, __m512h y) { return _mm512_mul_round_ph(x, y, kRne); }
inline __m512h Min(__m512h x, __m512h y) { return _mm512_min_round_ph(x, y, _MM_FROUND_NO_EXC); }
inline __m512h Max(__m512h x, __m512h y) { return _mm512_max_round_ph(x, y, _MM_FROUND_NO_EXC); }

// 64 results from 64 codes of each input (one byte per element).
template <bool kE4M3, bool kAvg>
inline __m512i Pair64(__m512i a, __m512i b) {
  const __m512i hi_bytes = _mm512_set1_epi16(static_cast<int16_t>(0xFF00));
  const __m512i one = _mm512_set1_epi16(1);
  // Each u16 lane holds an even element in its low byte and the next odd
  // one in its high byte; "e" and "o" are f16 registers of those.
  if constexpr (!kE4M3) {
    __m512h ae = _mm512_castsi512_ph(_mm512_slli_epi16(a, 8));
    __m512h ao = _mm512_castsi512_ph(_mm512_and_si512(a, hi_bytes));
    __m512h be = _mm512_castsi512_ph(_mm512_slli_epi16(b, 8));
    __m512h bo = _mm512_castsi512_ph(_mm512_and_si512(b, hi_bytes));
    if constexpr (kAvg) {
      // Halve the inputs, not the sum: 57344 + 57344 overflows f16.
      const __m512h half = _mm512_set1_ph(static_cast<_Float16>(0.5f));
      ae = Mul(ae, half);
      ao = Mul(ao, half);
      be = Mul(be, half);
      bo = Mul(bo, half);
    }
    __m512i se = _mm512_castph_si512(Add(ae, be));
    __m512i so = _mm512_castph_si512(Add(ao, bo));
    // Round to the high byte, ties to even. Inf stays Inf, NaN stays NaN
    // (quiet NaNs have bit 9 set), and from 61440 the carry gives Inf, as
    // IEEE-like e5m2 wants.
    const __m512i k7f = _mm512_set1_epi16(0x7F);
    se = _mm512_add_epi16(_mm512_add_epi16(se, k7f), _mm512_and_si512(_mm512_srli_epi16(se, 8), one));
    so = _mm512_add_epi16(_mm512_add_epi16(so, k7f), _mm512_and_si512(_mm512_srli_epi16(so, 8), one));
    // 0xCA: first ? second : third, bit by bit.
    return _mm512_ternarylogic_epi32(hi_bytes, so, _mm512_srli_epi16(se, 8), 0xCA);
  } else {
    // sign -> bit 15, exponent and mantissa -> bits 7..13: the value times
    // 2^-8 as an f16 (subnormals included). srai copies the sign into bit
    // 14 as well, which the mask clears.
    const __m512i no_bit14 = _mm512_set1_epi16(static_cast<int16_t>(0xBF80));
    auto dec = [&](__m512i x) {
      return _mm512_castsi512_ph(_mm512_and_si512(_mm512_srai_epi16(x, 1), no_bit14));
    };
    const __m512h ae = dec(_mm512_slli_epi16(a, 8)), ao = dec(a);
    const __m512h be = dec(_mm512_slli_epi16(b, 8)), bo = dec(b);
    __m512h se = Add(ae, be), so = Add(ao, bo);
    if constexpr (kAvg) {
      const __m512h half = _mm512_set1_ph(static_cast<_Float16>(0.5f));
      se = Mul(se, half);
      so = Mul(so, half);
    }
    // Saturate at +-448 (1.75 scaled): e4m3 has no Inf.
    const __m512h top = _mm512_set1_ph(static_cast<_Float16>(1.75f));
    const __m512h bottom = _mm512_set1_ph(static_cast<_Float16>(-1.75f));
    se = Max(Min(se, top), bottom);
    so = Max(Min(so, top), bottom);
    // Round away the low 7 bits, ties to even; the carry stops below bit 14.
    const __m512i k3f = _mm512_set1_epi16(0x3F);
    __m512i re = _mm512_castph_si512(se), ro = _mm512_castph_si512(so);
    re = _mm512_add_epi16(_mm512_add_epi16(re, k3f), _mm512_and_si512(_mm512_srli_epi16(re, 7), one));
    ro = _mm512_add_epi16(_mm512_add_epi16(ro, k3f), _mm512_and_si512(_mm512_srli_epi16(ro, 7), one));
    // Even byte: sign from bit 15, code from bits 7..13; odd byte likewise,
    // one byte up.
    const __m512i ev = _mm512_ternarylogic_epi32(_mm512_set1_epi16(0x0080), _mm512_srli_epi16(re, 8),
                                                 _mm512_srli_epi16(re, 7), 0xCA);
    const __m512i od = _mm512_ternarylogic_epi32(_mm512_set1_epi16(static_cast<int16_t>(0x8000)), ro,
                                                 _mm512_slli_epi16(ro, 1), 0xCA);
    const __m512i out = _mm512_ternarylogic_epi32(hi_bytes, od, ev, 0xCA);
    // S.1111.111 (NaN) decoded as a finite value above: any NaN input gives NaN.
    const __m512i s80 = _mm512_set1_epi8(static_cast<char>(0x80));
    const __mmask64 nan = _mm512_cmpeq_epi8_mask(
        _mm512_max_epu8(_mm512_or_si512(a, s80), _mm512_or_si512(b, s80)), _mm512_set1_epi8(-1));
    return _mm512_mask_mov_epi8(out, nan, _mm512_set1_epi8(0x7F));
  }
}

// Whole 64-byte blocks from i on, prefetching pf bytes ahead where asked;
// returns where they stop.
template <bool kE4M3, bool kAvg, bool kStream>
size_t Blocks(uint8_t* d, const uint8_t* a, const uint8_t* b, size_t i, size_t n, size_t pf) {
  auto block = [&](size_t at) {
    const __m512i r = Pair64<kE4M3, kAvg>(_mm512_loadu_si512(a + at), _mm512_loadu_si512(b + at));
    if constexpr (kStream) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + at), r);
    } else {
      _mm512_storeu_si512(d + at, r);
    }
  };
  for (; pf != 0 && i + 64 + pf <= n; i += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(a + i + pf), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + i + pf), _MM_HINT_T0);
    block(i);
  }
  for (; i + 64 <= n; i += 64) block(i);
  return i;
}

template <bool kE4M3, bool kAvg>
void Run(const ReduceArgs& args) {
  auto* d = static_cast<uint8_t*>(args.dst);
  const auto* a = static_cast<const uint8_t*>(args.srcs[0]);
  const auto* b = static_cast<const uint8_t*>(args.srcs[1]);
  const size_t n = args.count;
  auto masked = [&](size_t i, size_t len) {
    const __mmask64 m = _bzhi_u64(~0ULL, static_cast<unsigned>(len));
    _mm512_mask_storeu_epi8(d + i, m, Pair64<kE4M3, kAvg>(_mm512_maskz_loadu_epi8(m, a + i),
                                                         _mm512_maskz_loadu_epi8(m, b + i)));
  };
  size_t i = 0;
  if (args.nt) {
    // Streaming stores need 64-byte alignment: the head goes through a mask.
    const size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
    i = head < n ? head : n;
    if (i != 0) masked(0, i);
    i = Blocks<kE4M3, kAvg, true>(d, a, b, i, n, args.prefetch_bytes);
    _mm_sfence();
  } else {
    i = Blocks<kE4M3, kAvg, false>(d, a, b, i, n, args.prefetch_bytes);
  }
  if (i < n) masked(i, n - i);
}

}  // namespace

const bool kFp8PairFp16Compiled = true;

void ReduceFp8PairFp16(const ReduceArgs& a) {
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
const bool kFp8PairFp16Compiled = false;
void ReduceFp8PairFp16(const ReduceArgs&) {}
}  // namespace ciuic::kernels::internal

#endif
