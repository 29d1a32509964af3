// Two-input fp8 sum and avg on x86 CPUs with AVX-512 (F, BW) but without
// AVX512-FP16 (Skylake-SP to Ice Lake, Zen 4-5): the path a ring or tree
// step takes in the wire accumulation mode. The integer steps are the
// AVX512-FP16 kernel's (fp8_pair_512-inl.h: 64 elements as two registers
// of 32 f16 lanes); the sum is taken in f32 instead, each half widened
// with vcvtph2ps and narrowed with vcvtps2ph, every step with explicit
// round-to-nearest and no exceptions, so the caller's MXCSR plays no part.
//
// Why the result is the correctly rounded one: see fp8_pair_f16c.cc, which
// does the same on 256-bit registers. The unit tests check every pair of
// codes against the scalar reference.
//
// This file alone is compiled with -mavx512f -mavx512bw -mbmi2
// (kernels/CMakeLists.txt) and only called after Reducer has checked the
// CPU; the integer steps are templates on this file's SumInF32, so nothing
// compiled here is shared with other files.
#include <cstddef>
#include <cstdint>

#include "kernels/dispatch.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__BMI2__)
// GCC 12's AVX-512 intrinsics start the _round_ and extract forms from an
// "undefined" register it then calls maybe uninitialised (GCC PR 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/fp8_pair_512-inl.h"

namespace ciuic::kernels::internal {
namespace {

constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

// The sum of 32 f16 lanes, in f32 (fp8_pair_512-inl.h's Sum).
template <bool kE4M3, bool kAvg>
struct SumInF32 {
  static __m256i Half(__m256i x, __m256i y) {
    __m512 s = _mm512_add_round_ps(_mm512_cvt_roundph_ps(x, _MM_FROUND_NO_EXC),
                                   _mm512_cvt_roundph_ps(y, _MM_FROUND_NO_EXC), kRne);
    if constexpr (kAvg) s = _mm512_mul_round_ps(s, _mm512_set1_ps(0.5f), kRne);
    if constexpr (kE4M3) {
      s = _mm512_max_round_ps(_mm512_min_round_ps(s, _mm512_set1_ps(1.75f), _MM_FROUND_NO_EXC),
                              _mm512_set1_ps(-1.75f), _MM_FROUND_NO_EXC);
    }
    return _mm512_cvtps_ph(s, kRne);
  }
  static __m512i Run(__m512i x, __m512i y) {
    const __m256i lo = Half(_mm512_castsi512_si256(x), _mm512_castsi512_si256(y));
    const __m256i hi = Half(_mm512_extracti64x4_epi64(x, 1), _mm512_extracti64x4_epi64(y, 1));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
};

}  // namespace

const bool kFp8PairAvx512Compiled = true;

void ReduceFp8PairAvx512(const ReduceArgs& a) { ReducePairs64<SumInF32>(a); }

}  // namespace ciuic::kernels::internal

#else

namespace ciuic::kernels::internal {
const bool kFp8PairAvx512Compiled = false;
void ReduceFp8PairAvx512(const ReduceArgs&) {}
}  // namespace ciuic::kernels::internal

#endif
