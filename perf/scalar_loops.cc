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

// fp8 the way a scalar converting loop does it (branches per element).
inline float E4M3ToF32(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80) << 24;
  const uint32_t e = (b >> 3) & 0xF, m = b & 7;
  uint32_t u;
  if (e == 15 && m == 7) {
    u = 0x7FC00000u;
  } else if (e == 0) {
    const float f = static_cast<float>(m) * 0.001953125f;
    std::memcpy(&u, &f, 4);
  } else {
    u = ((e + 120) << 23) | (m << 20);
  }
  u |= sign;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint8_t F32ToE4M3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 24) & 0x80;
  uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7F);
  if (a >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7E);  // >= 448: saturate
  uint32_t r;
  if (a < 0x3C800000u) {
    float x;
    std::memcpy(&x, &a, 4);
    x += 16384.0f;
    std::memcpy(&r, &x, 4);
    r -= 0x46800000u;
  } else {
    r = (a - 0x3C000000u + 0x7FFFFu + ((a >> 20) & 1)) >> 20;
  }
  return static_cast<uint8_t>(r | sign);
}
inline float E5M2ToF32(uint8_t b) { return F16ToF32(static_cast<uint16_t>(b << 8)); }
inline uint8_t F32ToE5M2(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 24) & 0x80;
  const uint32_t a = u & 0x7FFFFFFFu;
  uint32_t r;
  if (a > 0x7F800000u) {
    r = 0x7E;
  } else if (a >= 0x47800000u) {
    r = 0x7C;
  } else if (a < 0x38800000u) {
    float x;
    std::memcpy(&x, &a, 4);
    x += 128.0f;
    std::memcpy(&r, &x, 4);
    r -= 0x43000000u;
  } else {
    r = (a - 0x38000000u + 0xFFFFFu + ((a >> 21) & 1)) >> 21;
  }
  return static_cast<uint8_t>(r | sign);
}

}  // namespace

template <float (*Decode)(uint8_t), uint8_t (*Encode)(float)>
void ScalarSumFp8(uint8_t* dst, const uint8_t* const* srcs, int n, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float acc = Decode(srcs[0][i]);
    for (int k = 1; k < n; ++k) acc += Decode(srcs[k][i]);
    dst[i] = Encode(acc);
  }
}

void ScalarSumE4M3(uint8_t* dst, const uint8_t* const* srcs, int n, size_t count) {
  ScalarSumFp8<E4M3ToF32, F32ToE4M3>(dst, srcs, n, count);
}
void ScalarSumE5M2(uint8_t* dst, const uint8_t* const* srcs, int n, size_t count) {
  ScalarSumFp8<E5M2ToF32, F32ToE5M2>(dst, srcs, n, count);
}

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
