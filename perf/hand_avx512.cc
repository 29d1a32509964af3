// The hand-written AVX-512 yardsticks of kernel_perf (x86-64 only).
#include <cstring>

#include "perf/scalar_loops.h"

#if defined(__x86_64__)
#include <immintrin.h>

namespace ciuic::perf {
namespace {

__attribute__((target("avx512f"))) void SumF32(float* dst, const float* a, const float* b,
                                               size_t count, bool nt) {
  size_t i = 0;
  if (nt) {
    for (; i + 32 <= count; i += 32) {
      _mm512_stream_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
      _mm512_stream_ps(dst + i + 16,
                       _mm512_add_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16)));
    }
    _mm_sfence();
  } else {
    for (; i + 32 <= count; i += 32) {
      _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
      _mm512_storeu_ps(dst + i + 16,
                       _mm512_add_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16)));
    }
  }
  for (; i < count; ++i) dst[i] = a[i] + b[i];
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void SumBF16(uint16_t* dst,
                                                                    const uint16_t* a,
                                                                    const uint16_t* b,
                                                                    size_t count, bool nt) {
  size_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m512i va = _mm512_loadu_si512(a + i);
    const __m512i vb = _mm512_loadu_si512(b + i);
    // Widen the low and high 16 lanes to f32 (shift into the top half).
    const __m512 alo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(va)), 16));
    const __m512 ahi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(va, 1)), 16));
    const __m512 blo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(vb)), 16));
    const __m512 bhi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(vb, 1)), 16));
    const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_add_ps(ahi, bhi), _mm512_add_ps(alo, blo));
    __m512i ri;
    std::memcpy(&ri, &r, sizeof(ri));
    if (nt) {
      _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), ri);
    } else {
      _mm512_storeu_si512(dst + i, ri);
    }
  }
  if (nt) _mm_sfence();
  for (; i < count; ++i) {
    uint32_t ua = static_cast<uint32_t>(a[i]) << 16, ub = static_cast<uint32_t>(b[i]) << 16;
    float fa, fb;
    std::memcpy(&fa, &ua, 4);
    std::memcpy(&fb, &ub, 4);
    float s = fa + fb;
    uint32_t u;
    std::memcpy(&u, &s, 4);
    u += 0x7FFFu + ((u >> 16) & 1u);
    dst[i] = static_cast<uint16_t>(u >> 16);
  }
}

}  // namespace

bool HandSumF32Avx512(float* dst, const float* a, const float* b, size_t count, bool nt) {
  if (!__builtin_cpu_supports("avx512f")) return false;
  SumF32(dst, a, b, count, nt);
  return true;
}

bool HandSumBF16Avx512(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t count,
                       bool nt) {
  if (!__builtin_cpu_supports("avx512bf16") || !__builtin_cpu_supports("avx512bw")) return false;
  SumBF16(dst, a, b, count, nt);
  return true;
}

}  // namespace ciuic::perf

#else
namespace ciuic::perf {
bool HandSumF32Avx512(float*, const float*, const float*, size_t, bool) { return false; }
bool HandSumBF16Avx512(uint16_t*, const uint16_t*, const uint16_t*, size_t, bool) { return false; }
}  // namespace ciuic::perf
#endif
