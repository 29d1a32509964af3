// ciuic::kernels: local reductions and conversions on host memory, SIMD with
// run-time dispatch (Google Highway), cache-aware (single pass over n inputs,
// L1 tiles, software prefetch, non-temporal stores for large outputs).
// No Highway types appear here.
// Thread contract: a Reducer is immutable after Create(); one Reducer may be
// used from any number of threads at once.
#ifndef CIUIC_KERNELS_H_
#define CIUIC_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/status.h"

namespace ciuic {

// Values match ciuic_datatype_t / ciuic_redop_t.
enum class DataType : int {
  kInt8 = 0, kUint8 = 1, kInt32 = 2, kUint32 = 3, kInt64 = 4, kUint64 = 5,
  kFloat16 = 6, kBFloat16 = 7, kFloat32 = 8, kFloat64 = 9,
  kInt16 = 10, kUint16 = 11,
  kBool = 12,         // one byte, 0 = false; reduced as bytes (see Supports)
  kFloat8E4M3 = 13,   // OCP FP8 E4M3: no Inf, one NaN (S.1111.111), max 448
  kFloat8E5M2 = 14,   // OCP FP8 E5M2: IEEE-like (Inf, NaN), max 57344
};
constexpr int kNumDataTypes = 15;
// kBand/kBor/kBxor: bitwise, on integers and bool. kPremulSum: sum of
// factor * input (the factor applied to each input before the sum, as NCCL
// and torch define it), on floating-point types; the factor is a call
// argument (Reducer::Reduce) or part of a communicator's premul op.
enum class ReduceOp : int {
  kSum = 0, kProd = 1, kMin = 2, kMax = 3, kAvg = 4, kBand = 5, kBor = 6, kBxor = 7, kPremulSum = 8,
};
constexpr int kNumReduceOps = 9;

// Bytes per element; 0 for an invalid value.
constexpr size_t DataTypeSize(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8: case DataType::kUint8: case DataType::kBool:
    case DataType::kFloat8E4M3: case DataType::kFloat8E5M2: return 1;
    case DataType::kFloat16: case DataType::kBFloat16: case DataType::kInt16: case DataType::kUint16: return 2;
    case DataType::kInt32: case DataType::kUint32: case DataType::kFloat32: return 4;
    case DataType::kInt64: case DataType::kUint64: case DataType::kFloat64: return 8;
  }
  return 0;
}
// "f32", "bf16", "i8", "e4m3", ...
constexpr const char* DataTypeName(DataType dtype) {
  switch (dtype) {
    case DataType::kInt8: return "i8";
    case DataType::kUint8: return "u8";
    case DataType::kInt16: return "i16";
    case DataType::kUint16: return "u16";
    case DataType::kInt32: return "i32";
    case DataType::kUint32: return "u32";
    case DataType::kInt64: return "i64";
    case DataType::kUint64: return "u64";
    case DataType::kBool: return "bool";
    case DataType::kFloat16: return "f16";
    case DataType::kBFloat16: return "bf16";
    case DataType::kFloat32: return "f32";
    case DataType::kFloat64: return "f64";
    case DataType::kFloat8E4M3: return "e4m3";
    case DataType::kFloat8E5M2: return "e5m2";
  }
  return "invalid";
}

// "sum", "prod", ..., "band", "bor", "bxor", "premul_sum"
constexpr const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kProd: return "prod";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kBand: return "band";
    case ReduceOp::kBor: return "bor";
    case ReduceOp::kBxor: return "bxor";
    case ReduceOp::kPremulSum: return "premul_sum";
  }
  return "invalid";
}
constexpr bool IsValid(DataType dtype) { return static_cast<unsigned>(dtype) < kNumDataTypes; }
constexpr bool IsValid(ReduceOp op) { return static_cast<unsigned>(op) < kNumReduceOps; }

constexpr bool IsFloatType(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: case DataType::kBFloat16: case DataType::kFloat32:
    case DataType::kFloat64: case DataType::kFloat8E4M3: case DataType::kFloat8E5M2: return true;
    default: return false;
  }
}
// Types narrower than f32 that every kernel computes in f32 and rounds once
// per call (f16, bf16, e4m3, e5m2): the ones CIUIC_ACCUMULATE is about.
constexpr bool IsNarrowFloat(DataType dtype) {
  return IsFloatType(dtype) && DataTypeSize(dtype) < 4;
}

// Whether `op` is defined on `dtype`: the bitwise ops on integers and bool
// only; premul_sum on floating-point types only; bool takes min, max
// (= and, or on 0/1), sum (= or, as torch maps it), prod (= and) and the
// bitwise ops, not avg.
constexpr bool Supports(DataType dtype, ReduceOp op) {
  if (!IsValid(dtype) || !IsValid(op)) return false;
  const bool bitwise = op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
  if (IsFloatType(dtype)) return !bitwise;
  if (op == ReduceOp::kPremulSum) return false;
  if (dtype == DataType::kBool) return op != ReduceOp::kAvg;
  return true;
}

namespace kernels {

constexpr int kMaxSources = 16;

// Ok when `op` is defined on `dtype` (Supports); else kInvalidArgument
// naming both and why ("op: band on dtype f32: the bitwise ops are for
// integer and bool dtypes").
inline Status CheckReduction(DataType dtype, ReduceOp op) {
  if (!IsValid(dtype)) {
    return InvalidArgumentError("dtype: unknown datatype " + std::to_string(static_cast<int>(dtype)));
  }
  if (!IsValid(op)) {
    return InvalidArgumentError("op: unknown reduction op " + std::to_string(static_cast<int>(op)));
  }
  if (!Supports(dtype, op)) {
    const char* why = IsFloatType(dtype)  ? "the bitwise ops are for integer and bool dtypes"
                      : op == ReduceOp::kPremulSum ? "premul_sum is for floating-point dtypes"
                                                   : "avg is not defined on bool";
    return InvalidArgumentError(std::string("op: ") + ReduceOpName(op) + " on dtype " +
                                DataTypeName(dtype) + ": " + why);
  }
  return Status::Ok();
}

// Cache sizes the kernels size their tiles and thresholds from. A
// communicator takes them from its topology plan (topology/, hwloc or /sys);
// FromSystem() is the fallback (sysconf, then defaults of 32 KiB / 1 MiB /
// 32 MiB).
struct CacheSizes {
  size_t l1d = 32 * 1024;
  size_t l2 = 1024 * 1024;
  size_t llc = 32 * 1024 * 1024;
  static CacheSizes FromSystem();
};

struct TargetInfo {
  std::string name;   // "avx3", "avx2", "sse4", "ssse3", "scalar", ...
  bool supported;     // this CPU can run it
};

// Every SIMD target compiled into this binary, best first.
std::vector<TargetInfo> CompiledTargets();

// dst = src, `bytes` bytes (the ranges may overlap), with vector loads and
// stores of the best SIMD target of this CPU. For payloads of a KiB and up
// use this, not memcpy: glibc's memcpy uses `rep movsb` from 2 KiB, which on
// some CPUs (AMD Zen here) runs 5-8x slower for unlucky relative alignments
// of the two buffers, so a run is fast or slow by where the allocator put
// them. `streaming`: non-temporal stores (for copies larger than the
// caches, whose destination nobody reads soon from this core's cache).
// Thread-safe.
void CopyBytes(void* dst, const void* src, size_t bytes, bool streaming = false);

class Reducer {
 public:
  // Chooses the SIMD target (best supported, capped by config.simd_target)
  // and the tile / non-temporal / prefetch parameters from `config` and
  // `caches`. Errors: kInvalidArgument when CIUIC_SIMD_TARGET names a target
  // that is not compiled in or that this CPU cannot run.
  static StatusOr<Reducer> Create(const Config& config, const CacheSizes& caches);
  // Create(Config::FromEnv(), CacheSizes::FromSystem()).
  static StatusOr<Reducer> FromEnv();

  // dst = op over srcs[0..nsrcs) elementwise (see ciuic_reduce_local);
  // kPremulSum with a factor of 1. Errors: kInvalidArgument naming the bad
  // argument, or the op a dtype does not support (Supports()).
  Status Reduce(void* dst, const void* const* srcs, int nsrcs, size_t count, DataType dtype,
                ReduceOp op) const;
  // The same; kPremulSum computes factor * srcs[0] + factor * srcs[1] + ...
  // (in f32 for the narrow types, f64 for f64), other ops ignore `factor`.
  Status Reduce(void* dst, const void* const* srcs, int nsrcs, size_t count, DataType dtype,
                ReduceOp op, double factor) const;

  // Round-to-nearest-even conversions. Errors: kInvalidArgument.
  Status ConvertF32ToBF16(const float* src, uint16_t* dst, size_t count) const;
  Status ConvertBF16ToF32(const uint16_t* src, float* dst, size_t count) const;
  Status ConvertF32ToF16(const float* src, uint16_t* dst, size_t count) const;
  Status ConvertF16ToF32(const uint16_t* src, float* dst, size_t count) const;
  // Between f32 and a narrow float type (f16, bf16, e4m3, e5m2), either
  // way: round to nearest even; NaN stays NaN; f16, bf16 and e5m2 overflow
  // to Inf, e4m3 (no Inf) saturates to +-448 (Inf too). Exact the other way.
  // Errors: kInvalidArgument (another pair of types, null or overlapping
  // buffers).
  Status Convert(const void* src, DataType from, void* dst, DataType to, size_t count) const;

  // dst = src, `bytes` bytes (the ranges may overlap), with vector loads and
  // stores of this Reducer's target, non-temporal from nt_threshold_bytes().
  // Use it instead of memcpy for payloads (see CopyBytes).
  void Copy(void* dst, const void* src, size_t bytes) const;

  const char* target_name() const;
  // Tile for >4 inputs when the working set fits in L2 (a quarter of L1d),
  // and when it does not (a sixteenth of L2: longer bursts per input stream
  // keep the hardware prefetchers going; the tile itself stays in L2).
  size_t tile_bytes() const { return tile_bytes_; }
  size_t tile_large_bytes() const { return tile_large_bytes_; }
  // Output bytes from which stores are non-temporal (SIZE_MAX = never).
  size_t nt_threshold_bytes() const { return nt_threshold_; }
  size_t prefetch_bytes() const { return prefetch_bytes_; }
  size_t prefetch_min_bytes() const { return prefetch_min_bytes_; }
  // Which kernel runs two-input fp8 sum and avg: the AVX512-FP16 one (the
  // AVX3 targets on CPUs that have it; the sum in f16), the AVX-512 one
  // (the AVX3 targets on other CPUs; in f32), the AVX2 + F16C one (the
  // AVX2 target; in f32), or the target's own, which widens every element
  // to f32 through the target's vector code.
  enum class Fp8PairKernel : uint8_t { kWidened, kAvx512Fp16, kAvx512, kF16c };
  Fp8PairKernel fp8_pair_kernel() const { return fp8_pairs_; }
  static const char* Fp8PairKernelName(Fp8PairKernel k) {
    switch (k) {
      case Fp8PairKernel::kAvx512Fp16: return "AVX512-FP16 kernel";
      case Fp8PairKernel::kAvx512: return "AVX-512 kernel";
      case Fp8PairKernel::kF16c: return "F16C kernel";
      default: return "via f32";
    }
  }

 private:
  Reducer() = default;
  int slot_ = 0;  // index into the per-target dispatch tables
  size_t tile_bytes_ = 0;
  size_t tile_large_bytes_ = 0;
  size_t nt_threshold_ = 0;
  size_t prefetch_bytes_ = 0;
  size_t prefetch_min_bytes_ = 0;
  Fp8PairKernel fp8_pairs_ = Fp8PairKernel::kWidened;
};

}  // namespace kernels
}  // namespace ciuic

#endif  // CIUIC_KERNELS_H_
