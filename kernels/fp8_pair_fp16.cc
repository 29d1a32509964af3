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
// compiled here could be the copy the linker keeps for everyone): the
// integer steps (fp8_pair_512-inl.h) are templates on this file's SumInF16.
#include <cstddef>
#include <cstdint>

#include "kernels/dispatch.h"

#if defined(__x86_64__) && defined(__AVX512FP16__) && defined(__AVX512BW__) && defined(__BMI2__)
#include <immintrin.h>

#include "kernels/fp8_pair_512-inl.h"

namespace ciuic::kernels::internal {
namespace {

constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
inline __m512h Add(__m512h x, __m512h y) { return _mm512_add_round_ph(x, y, kRne); }
inline __m512h Mul(__m512h x, __m512h y) { return _mm512_mul_round_ph(x, y, kRne); }
inline __m512h Min(__m512h x, __m512h y) { return _mm512_min_round_ph(x, y, _MM_FROUND_NO_EXC); }
inline __m512h Max(__m512h x, __m512h y) { return _mm512_max_round_ph(x, y, _MM_FROUND_NO_EXC); }

// The sum of 32 f16 lanes, in f16 (fp8_pair_512-inl.h's Sum).
template <bool kE4M3, bool kAvg>
struct SumInF16 {
  static __m512i Run(__m512i xi, __m512i yi) {
    __m512h x = _mm512_castsi512_ph(xi), y = _mm512_castsi512_ph(yi);
    const __m512h half = _mm512_set1_ph(static_cast<_Float16>(0.5f));
    if constexpr (!kE4M3) {
      if constexpr (kAvg) {
        // Halve the inputs, not the sum: 57344 + 57344 overflows f16.
        x = Mul(x, half);
        y = Mul(y, half);
      }
      return _mm512_castph_si512(Add(x, y));
    } else {
      __m512h s = Add(x, y);
      if constexpr (kAvg) s = Mul(s, half);
      // Saturate at +-448 (1.75 scaled): e4m3 has no Inf.
      s = Max(Min(s, _mm512_set1_ph(static_cast<_Float16>(1.75f))), _mm512_set1_ph(static_cast<_Float16>(-1.75f)));
      return _mm512_castph_si512(s);
    }
  }
};

}  // namespace

const bool kFp8PairFp16Compiled = true;

void ReduceFp8PairFp16(const ReduceArgs& a) { ReducePairs64<SumInF16>(a); }

}  // namespace ciuic::kernels::internal

#else

namespace ciuic::kernels::internal {
const bool kFp8PairFp16Compiled = false;
void ReduceFp8PairFp16(const ReduceArgs&) {}
}  // namespace ciuic::kernels::internal

#endif
