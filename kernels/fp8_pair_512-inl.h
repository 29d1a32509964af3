// The integer half of the 512-bit two-input fp8 sum/avg kernels
// (fp8_pair_fp16.cc: the sum in f16; fp8_pair_avx512.cc: in f32): decode
// 64 codes of each input to f16 lanes, hand them to the file's `Sum`, round
// the f16 result to 8 bits, and loop over whole lines with masked ends.
//
// Included only by those files, each compiled with its own ISA flags. Every
// function here is a template on the file's Sum, a type in that file's
// anonymous namespace, so each instantiation is the file's own: no copy
// compiled for one ISA can be the one the linker keeps for the other.
//
// Sum<kE4M3, kAvg>::Run(x, y) takes two registers of 32 f16 lanes (e4m3
// scaled by 2^-8) and returns the f16 lanes of x + y, halved for avg,
// clamped to +-1.75 for e4m3 (+-448, no Inf), rounded to nearest.
#ifndef CIUIC_KERNELS_FP8_PAIR_512_INL_H_
#define CIUIC_KERNELS_FP8_PAIR_512_INL_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/dispatch.h"

namespace ciuic::kernels::internal {

// 64 results from 64 codes of each input (one byte per element).
template <template <bool, bool> class Sum, bool kE4M3, bool kAvg>
inline __m512i Pair64(__m512i a, __m512i b) {
  const __m512i hi_bytes = _mm512_set1_epi16(static_cast<int16_t>(0xFF00));
  const __m512i one = _mm512_set1_epi16(1);
  // Each u16 lane holds an even element in its low byte and the next odd
  // one in its high byte; "e" and "o" are f16 lanes of those.
  if constexpr (!kE4M3) {
    __m512i se = Sum<false, kAvg>::Run(_mm512_slli_epi16(a, 8), _mm512_slli_epi16(b, 8));
    __m512i so = Sum<false, kAvg>::Run(_mm512_and_si512(a, hi_bytes), _mm512_and_si512(b, hi_bytes));
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
    auto dec = [&](__m512i x) { return _mm512_and_si512(_mm512_srai_epi16(x, 1), no_bit14); };
    __m512i re = Sum<true, kAvg>::Run(dec(_mm512_slli_epi16(a, 8)), dec(_mm512_slli_epi16(b, 8)));
    __m512i ro = Sum<true, kAvg>::Run(dec(a), dec(b));
    // Round away the low 7 bits, ties to even; the carry stops below bit 14.
    const __m512i k3f = _mm512_set1_epi16(0x3F);
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
// returns where they stop. Steps of two adjacent lines, both computed before
// either is stored: faster than line by line at DRAM sizes, as the pairs
// reach memory together (perf/RESULTS.md, "Numerics").
template <template <bool, bool> class Sum, bool kE4M3, bool kAvg, bool kStream>
size_t Blocks64(uint8_t* d, const uint8_t* a, const uint8_t* b, size_t i, size_t n, size_t pf) {
  auto put = [&](size_t at, __m512i r) {
    if constexpr (kStream) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + at), r);
    } else {
      _mm512_storeu_si512(d + at, r);
    }
  };
  auto pair = [&](size_t at) {
    const __m512i r0 = Pair64<Sum, kE4M3, kAvg>(_mm512_loadu_si512(a + at), _mm512_loadu_si512(b + at));
    const __m512i r1 =
        Pair64<Sum, kE4M3, kAvg>(_mm512_loadu_si512(a + at + 64), _mm512_loadu_si512(b + at + 64));
    put(at, r0);
    put(at + 64, r1);
  };
  for (; pf != 0 && i + 128 + pf <= n; i += 128) {
    _mm_prefetch(reinterpret_cast<const char*>(a + i + pf), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(a + i + pf + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + i + pf), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b + i + pf + 64), _MM_HINT_T0);
    pair(i);
  }
  for (; i + 128 <= n; i += 128) pair(i);
  if (i + 64 <= n) {
    put(i, Pair64<Sum, kE4M3, kAvg>(_mm512_loadu_si512(a + i), _mm512_loadu_si512(b + i)));
    i += 64;
  }
  return i;
}

template <template <bool, bool> class Sum, bool kE4M3, bool kAvg>
void RunPairs64(const ReduceArgs& args) {
  auto* d = static_cast<uint8_t*>(args.dst);
  const auto* a = static_cast<const uint8_t*>(args.srcs[0]);
  const auto* b = static_cast<const uint8_t*>(args.srcs[1]);
  const size_t n = args.count;
  auto masked = [&](size_t i, size_t len) {
    const __mmask64 m = _bzhi_u64(~0ULL, static_cast<unsigned>(len));
    _mm512_mask_storeu_epi8(d + i, m, Pair64<Sum, kE4M3, kAvg>(_mm512_maskz_loadu_epi8(m, a + i),
                                                              _mm512_maskz_loadu_epi8(m, b + i)));
  };
  size_t i = 0;
  if (args.nt) {
    // Streaming stores need 64-byte alignment: the head goes through a mask.
    const size_t head = (64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63;
    i = head < n ? head : n;
    if (i != 0) masked(0, i);
    i = Blocks64<Sum, kE4M3, kAvg, true>(d, a, b, i, n, args.prefetch_bytes);
    _mm_sfence();
  } else {
    i = Blocks64<Sum, kE4M3, kAvg, false>(d, a, b, i, n, args.prefetch_bytes);
  }
  if (i < n) masked(i, n - i);
}

template <template <bool, bool> class Sum>
void ReducePairs64(const ReduceArgs& a) {
  const bool e4m3 = a.dtype == DataType::kFloat8E4M3;
  if (a.op == ReduceOp::kAvg) {
    e4m3 ? RunPairs64<Sum, true, true>(a) : RunPairs64<Sum, false, true>(a);
  } else {
    e4m3 ? RunPairs64<Sum, true, false>(a) : RunPairs64<Sum, false, false>(a);
  }
}

}  // namespace ciuic::kernels::internal

#endif  // CIUIC_KERNELS_FP8_PAIR_512_INL_H_
