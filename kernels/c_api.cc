// The kernels' part of the C ABI (include/ciuic/ciuic.h).
#include "ciuic/ciuic.h"
#include "ciuic/kernels.h"
#include "common/c_api.h"

using ciuic::DataType;
using ciuic::ReduceOp;
using ciuic::ToCStatus;
using ciuic::kernels::Reducer;

namespace {
// The C entry points read the CIUIC_* knobs on every call (no cached
// globals); frameworks that call in a hot loop hold a ciuic::kernels::Reducer
// or a communicator instead.
ciuic::StatusOr<Reducer> EnvReducer() { return Reducer::FromEnv(); }
}  // namespace

extern "C" {

size_t ciuic_datatype_size(ciuic_datatype_t dtype) {
  return ciuic::DataTypeSize(static_cast<DataType>(dtype));
}

ciuic_status_t ciuic_reduce_local(void* dst, const void* const* srcs, int nsrcs, size_t count,
                                  ciuic_datatype_t dtype, ciuic_redop_t op) {
  auto r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->Reduce(dst, srcs, nsrcs, count, static_cast<DataType>(dtype),
                             static_cast<ReduceOp>(op)));
}

ciuic_status_t ciuic_convert_f32_to_bf16(const float* src, uint16_t* dst, size_t count) {
  auto r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->ConvertF32ToBF16(src, dst, count));
}
ciuic_status_t ciuic_convert_bf16_to_f32(const uint16_t* src, float* dst, size_t count) {
  auto r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->ConvertBF16ToF32(src, dst, count));
}
ciuic_status_t ciuic_convert_f32_to_f16(const float* src, uint16_t* dst, size_t count) {
  auto r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->ConvertF32ToF16(src, dst, count));
}
ciuic_status_t ciuic_convert_f16_to_f32(const uint16_t* src, float* dst, size_t count) {
  auto r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->ConvertF16ToF32(src, dst, count));
}

}  // extern "C"
