// Internal: the per-target kernel tables behind ciuic::kernels::Reducer.
// Each kernel translation unit is compiled once per SIMD target (Highway's
// foreach_target) and fills one slot per target of its tables; Reducer picks
// a slot at run time. Our own table instead of HWY_DYNAMIC_DISPATCH so that a
// caller (a test, a benchmark, CIUIC_SIMD_TARGET) can choose any compiled
// target without touching Highway's process-wide state.
#ifndef CIUIC_KERNELS_DISPATCH_H_
#define CIUIC_KERNELS_DISPATCH_H_

#include <cstddef>
#include <cstdint>

#include "ciuic/kernels.h"

namespace ciuic::kernels::internal {

struct ReduceArgs {
  void* dst;
  const void* const* srcs;
  int nsrcs;
  size_t count;
  DataType dtype;
  ReduceOp op;
  size_t tile_bytes;      // L1 tile for nsrcs > 4
  bool nt;                // non-temporal stores (dst does not alias a source)
  size_t prefetch_bytes;  // 0 = no software prefetch
  double factor;          // kPremulSum's
};

using ReduceFn = void (*)(const ReduceArgs& args);
using ConvertFn = void (*)(const void* src, void* dst, size_t count);
using CopyFn = void (*)(void* dst, const void* src, size_t bytes, bool nt);

// Slots, best first: AVX3_DL AVX3 AVX2 SSE4 SSSE3 NEON SVE SVE2 fallback.
constexpr int kNumSlots = 9;

// Highway target bit of a slot (0 when the slot is never compiled here).
int64_t SlotTarget(int slot);

extern const ReduceFn kReduceFloat[kNumSlots];  // f32, f64
extern const ReduceFn kReduceInt[kNumSlots];    // i8 u8 i16 u16 i32 u32 i64 u64 bool
extern const ReduceFn kReduceHalf[kNumSlots];   // f16, bf16
extern const ReduceFn kReduceFp8[kNumSlots];    // e4m3, e5m2
extern const ConvertFn kF32ToBF16[kNumSlots];
extern const ConvertFn kBF16ToF32[kNumSlots];
extern const ConvertFn kF32ToF16[kNumSlots];
extern const ConvertFn kF16ToF32[kNumSlots];
extern const ConvertFn kF32ToE4M3[kNumSlots];
extern const ConvertFn kE4M3ToF32[kNumSlots];
extern const ConvertFn kF32ToE5M2[kNumSlots];
extern const ConvertFn kE5M2ToF32[kNumSlots];
extern const CopyFn kCopy[kNumSlots];

// Two-input fp8 sum and avg on AVX512-FP16 (fp8_pair_fp16.cc), compiled
// where the compiler can (kFp8PairFp16Compiled); call only on a CPU that
// has AVX512-FP16, BW and BMI2 (CpuHasAvx512Fp16). Used by the AVX3 slots.
extern const bool kFp8PairFp16Compiled;
void ReduceFp8PairFp16(const ReduceArgs& args);
bool CpuHasAvx512Fp16();
// The same in f32 on AVX-512 F + BW (fp8_pair_avx512.cc), for AVX-512 CPUs
// without FP16; call only where CpuHasAvx512Bw.
extern const bool kFp8PairAvx512Compiled;
void ReduceFp8PairAvx512(const ReduceArgs& args);
bool CpuHasAvx512Bw();
// The same on AVX2 + F16C (fp8_pair_f16c.cc), for x86 CPUs without
// AVX-512; call only where CpuHasAvx2F16c.
extern const bool kFp8PairF16cCompiled;
void ReduceFp8PairF16c(const ReduceArgs& args);
bool CpuHasAvx2F16c();

}  // namespace ciuic::kernels::internal

// Expands to the initialiser of a kNumSlots table of FN's per-target
// instances (nullptr where a target is not compiled). Use after highway.h.
#define CIUIC_SLOT_TABLE(FN)                                                        \
  {                                                                                 \
    HWY_CHOOSE_AVX3_DL(FN), HWY_CHOOSE_AVX3(FN), HWY_CHOOSE_AVX2(FN),               \
        HWY_CHOOSE_SSE4(FN), HWY_CHOOSE_SSSE3(FN), HWY_CHOOSE_NEON(FN),             \
        HWY_CHOOSE_SVE(FN), HWY_CHOOSE_SVE2(FN), HWY_CHOOSE_FALLBACK(FN)            \
  }

#endif  // CIUIC_KERNELS_DISPATCH_H_
