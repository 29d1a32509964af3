// Compiled with -O2 -fno-tree-vectorize -fno-tree-slp-vectorize: the scalar
// loop a library without SIMD kernels runs.
#include "perf/scalar_loops.h"

#include <cstring>

namespace ciuic::perf {
namespace {

inline float Bf16ToF32(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
  uint32_t u;
  if (e == 0) {
    float f = static_cast<float>(m) * 5.9604644775390625e-8f;
    std::memcpy(&u, &f, 4);
  } else if (e == 31) {
    u = 0x7F800000u | (m << 13);
  } else {
    u = ((e + 112) << 23) | (m << 13);
  }
  u |= sign;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t F32ToF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000;
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t r;
  if (a >= 0x47800000u) {
    r = a > 0x7F800000u ? 0x7E00 : 0x7C00;
  } else if (a < 0x38800000u) {
    float x;
    std::memcpy(&x, &a, 4);
    x += 0.5f;
    std::memcpy(&r, &x, 4);
    r -= 0x3F000000u;
  } else {
    r = (a + 0xC8000FFFu + ((a >> 13) & 1)) >> 13;
  }
  return static_cast<uint16_t>(r | sign);
}

}  // namespace

void ScalarSumF32(float* dst, const float* const* srcs, int n, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float acc = srcs[0][i];
    for (int k = 1; k < n; ++k) acc += srcs[k][i];
    dst[i] = acc;
  }
}

void ScalarSumBF16(uint16_t* dst, const uint16_t* const* srcs, int n, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float acc = Bf16ToF32(srcs[0][i]);
    for (int k = 1; k < n; ++k) acc += Bf16ToF32(srcs[k][i]);
    dst[i] = F32ToBf16(acc);
  }
}

void ScalarSumF16(uint16_t* dst, const uint16_t* const* srcs, int n, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float acc = F16ToF32(srcs[0][i]);
    for (int k = 1; k < n; ++k) acc += F16ToF32(srcs[k][i]);
    dst[i] = F32ToF16(acc);
  }
}

}  // namespace ciuic::perf
