// Yardsticks for kernel_perf: what other libraries do (a plain scalar loop,
// compiled without auto-vectorisation, as Gloo/UCC reduce) and what a
// hand-written AVX-512 loop reaches (the bar our Highway kernels must meet).
#ifndef CIUIC_PERF_SCALAR_LOOPS_H_
#define CIUIC_PERF_SCALAR_LOOPS_H_

#include <cstddef>
#include <cstdint>

namespace ciuic::perf {

// dst[i] = sum over srcs; scalar, no vectorisation (scalar_loops.cc is
// compiled with -fno-tree-vectorize). Halves convert per element (RNE).
void ScalarSumF32(float* dst, const float* const* srcs, int n, size_t count);
void ScalarSumBF16(uint16_t* dst, const uint16_t* const* srcs, int n, size_t count);
void ScalarSumF16(uint16_t* dst, const uint16_t* const* srcs, int n, size_t count);
// fp8 decoded and rounded (RNE; e4m3 saturating) per element with branches.
void ScalarSumE4M3(uint8_t* dst, const uint8_t* const* srcs, int n, size_t count);
void ScalarSumE5M2(uint8_t* dst, const uint8_t* const* srcs, int n, size_t count);

// Hand-written AVX-512 loops (two inputs). Return false when the CPU lacks
// the instructions. `nt`: streaming stores (dst must be 64-byte aligned).
bool HandSumF32Avx512(float* dst, const float* a, const float* b, size_t count, bool nt);
// Uses AVX512-BF16 (vcvtne2ps2bf16) for the rounding.
bool HandSumBF16Avx512(uint16_t* dst, const uint16_t* a, const uint16_t* b, size_t count,
                       bool nt);

}  // namespace ciuic::perf

#endif  // CIUIC_PERF_SCALAR_LOOPS_H_
