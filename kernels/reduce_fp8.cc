// fp8 (OCP e4m3, e5m2) reductions (f32 accumulation, one rounding) and the
// f32<->fp8 conversions, once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/reduce_fp8.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/reduce-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ciuic::kernels::HWY_NAMESPACE {
void ReduceFp8(const internal::ReduceArgs& a) {
  if (a.dtype == DataType::kFloat8E4M3) {
    RunFloatOp<Fp8IO<true>>(a);
  } else {
    RunFloatOp<Fp8IO<false>>(a);
  }
}
void F32ToE4M3(const void* s, void* d, size_t n) { ConvertLoop<ToFp8<true>>(s, d, n); }
void F32ToE5M2(const void* s, void* d, size_t n) { ConvertLoop<ToFp8<false>>(s, d, n); }
void E4M3ToF32(const void* s, void* d, size_t n) { ConvertLoop<FromFp8<true>>(s, d, n); }
void E5M2ToF32(const void* s, void* d, size_t n) { ConvertLoop<FromFp8<false>>(s, d, n); }
}  // namespace ciuic::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ciuic::kernels::internal {
const ReduceFn kReduceFp8[kNumSlots] = CIUIC_SLOT_TABLE(ReduceFp8);
const ConvertFn kF32ToE4M3[kNumSlots] = CIUIC_SLOT_TABLE(F32ToE4M3);
const ConvertFn kF32ToE5M2[kNumSlots] = CIUIC_SLOT_TABLE(F32ToE5M2);
const ConvertFn kE4M3ToF32[kNumSlots] = CIUIC_SLOT_TABLE(E4M3ToF32);
const ConvertFn kE5M2ToF32[kNumSlots] = CIUIC_SLOT_TABLE(E5M2ToF32);
}  // namespace ciuic::kernels::internal
#endif
