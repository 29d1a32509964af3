// The kernels' part of the C ABI (include/ciuic/ciuic.h).
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "ciuic/ciuic.h"
#include "ciuic/kernels.h"
#include "common/c_api.h"

using ciuic::DataType;
using ciuic::ReduceOp;
using ciuic::ToCStatus;
using ciuic::kernels::Reducer;

namespace {
// The C entry points share one Reducer per process, built from the
// environment at the first call (reading the CIUIC_* knobs and the cache
// sizes costs tens of microseconds: cpuid traps to a VM's hypervisor), so
// a call costs its kernel and a pointer load; ciuic_local_reconfigure
// builds it again. A failed build (a bad CIUIC_* value) is kept too, so
// every call names the variable.
struct Built {
  ciuic::StatusOr<Reducer> reducer;
};
std::atomic<const Built*> g_built{nullptr};
std::mutex g_build_mu;
// Every reducer built stays alive: a thread may still be inside a call on
// one that a reconfiguration replaced (a few bytes each).
std::vector<std::unique_ptr<Built>>& AllBuilt() {
  static std::vector<std::unique_ptr<Built>> all;
  return all;
}

// Builds the reducer (unless `only_if_missing` and one exists) and
// publishes it.
const Built* Build(bool only_if_missing) {
  std::lock_guard<std::mutex> lock(g_build_mu);
  if (only_if_missing) {
    if (const Built* b = g_built.load(std::memory_order_acquire)) return b;
  }
  auto b = std::make_unique<Built>(Built{Reducer::FromEnv()});
  const Built* p = b.get();
  AllBuilt().push_back(std::move(b));
  g_built.store(p, std::memory_order_release);
  return p;
}

const ciuic::StatusOr<Reducer>& EnvReducer() {
  const Built* b = g_built.load(std::memory_order_acquire);
  if (b == nullptr) b = Build(/*only_if_missing=*/true);
  return b->reducer;
}
}  // namespace

extern "C" {

ciuic_status_t ciuic_local_reconfigure(void) { return ToCStatus(Build(/*only_if_missing=*/false)->reducer.status()); }

size_t ciuic_datatype_size(ciuic_datatype_t dtype) {
  return ciuic::DataTypeSize(static_cast<DataType>(dtype));
}

ciuic_status_t ciuic_reduce_local(void* dst, const void* const* srcs, int nsrcs, size_t count,
                                  ciuic_datatype_t dtype, ciuic_redop_t op) {
  const auto& r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->Reduce(dst, srcs, nsrcs, count, static_cast<DataType>(dtype),
                             static_cast<ReduceOp>(op)));
}

ciuic_status_t ciuic_reduce_local_premul_sum(void* dst, const void* const* srcs, int nsrcs,
                                             size_t count, ciuic_datatype_t dtype, double factor) {
  const auto& r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->Reduce(dst, srcs, nsrcs, count, static_cast<DataType>(dtype), ReduceOp::kPremulSum,
                             factor));
}

ciuic_status_t ciuic_convert(const void* src, ciuic_datatype_t from, void* dst, ciuic_datatype_t to,
                             size_t count) {
  const auto& r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->Convert(src, static_cast<DataType>(from), dst, static_cast<DataType>(to), count));
}

ciuic_status_t ciuic_convert_f32_to_bf16(const float* src, uint16_t* dst, size_t count) {
  const auto& r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->ConvertF32ToBF16(src, dst, count));
}
ciuic_status_t ciuic_convert_bf16_to_f32(const uint16_t* src, float* dst, size_t count) {
  const auto& r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->ConvertBF16ToF32(src, dst, count));
}
ciuic_status_t ciuic_convert_f32_to_f16(const float* src, uint16_t* dst, size_t count) {
  const auto& r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->ConvertF32ToF16(src, dst, count));
}
ciuic_status_t ciuic_convert_f16_to_f32(const uint16_t* src, float* dst, size_t count) {
  const auto& r = EnvReducer();
  if (!r.ok()) return ToCStatus(r.status());
  return ToCStatus(r->ConvertF16ToF32(src, dst, count));
}

}  // extern "C"
