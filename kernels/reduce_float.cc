// f32/f64 reductions, compiled once per SIMD target (see reduce-inl.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/reduce_float.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/reduce-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ciuic::kernels::HWY_NAMESPACE {
void ReduceFloat(const internal::ReduceArgs& a) {
  if (a.dtype == DataType::kFloat64) {
    RunFloatOp<PlainIO<double>>(a);
  } else {
    RunFloatOp<PlainIO<float>>(a);
  }
}
}  // namespace ciuic::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ciuic::kernels::internal {
const ReduceFn kReduceFloat[kNumSlots] = CIUIC_SLOT_TABLE(ReduceFloat);
}  // namespace ciuic::kernels::internal
#endif
