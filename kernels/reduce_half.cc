// f16/bf16 reductions (f32 accumulation, one rounding) and the f32<->f16/bf16
// conversions, once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/reduce_half.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/reduce-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ciuic::kernels::HWY_NAMESPACE {
void ReduceHalf(const internal::ReduceArgs& a) {
  if (a.dtype == DataType::kBFloat16) {
    RunFloatOp<HalfIO<hwy::bfloat16_t>>(a);
  } else {
    RunFloatOp<HalfIO<hwy::float16_t>>(a);
  }
}
void F32ToBF16(const void* s, void* d, size_t n) { ConvertLoop<ToBF16>(s, d, n); }
void F32ToF16(const void* s, void* d, size_t n) { ConvertLoop<ToF16>(s, d, n); }
void BF16ToF32(const void* s, void* d, size_t n) { ConvertLoop<FromHalf<hwy::bfloat16_t>>(s, d, n); }
void F16ToF32(const void* s, void* d, size_t n) { ConvertLoop<FromHalf<hwy::float16_t>>(s, d, n); }
}  // namespace ciuic::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ciuic::kernels::internal {
const ReduceFn kReduceHalf[kNumSlots] = CIUIC_SLOT_TABLE(ReduceHalf);
const ConvertFn kF32ToBF16[kNumSlots] = CIUIC_SLOT_TABLE(F32ToBF16);
const ConvertFn kF32ToF16[kNumSlots] = CIUIC_SLOT_TABLE(F32ToF16);
const ConvertFn kBF16ToF32[kNumSlots] = CIUIC_SLOT_TABLE(BF16ToF32);
const ConvertFn kF16ToF32[kNumSlots] = CIUIC_SLOT_TABLE(F16ToF32);
}  // namespace ciuic::kernels::internal
#endif
