// Integer and bool reductions (i8 u8 i16 u16 i32 u32 i64 u64 bool), once per SIMD
// target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/reduce_int.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/reduce-inl.h"

HWY_BEFORE_NAMESPACE();
namespace ciuic::kernels::HWY_NAMESPACE {
void ReduceInt(const internal::ReduceArgs& a) {
  switch (a.dtype) {
    case DataType::kInt8: RunIntOp<int8_t>(a); break;
    case DataType::kUint8: RunIntOp<uint8_t>(a); break;
    case DataType::kInt16: RunIntOp<int16_t>(a); break;
    case DataType::kUint16: RunIntOp<uint16_t>(a); break;
    case DataType::kBool: RunBoolOp(a); break;
    case DataType::kInt32: RunIntOp<int32_t>(a); break;
    case DataType::kUint32: RunIntOp<uint32_t>(a); break;
    case DataType::kInt64: RunIntOp<int64_t>(a); break;
    default: RunIntOp<uint64_t>(a); break;
  }
}
}  // namespace ciuic::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ciuic::kernels::internal {
const ReduceFn kReduceInt[kNumSlots] = CIUIC_SLOT_TABLE(ReduceInt);
}  // namespace ciuic::kernels::internal
#endif
