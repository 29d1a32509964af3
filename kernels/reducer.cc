// Reducer: argument checking, SIMD target choice and the knobs that shape the
// kernels (tile, non-temporal threshold, prefetch).
#include <unistd.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cstring>
#include <string>

#include "ciuic/kernels.h"
#include "common/fp_env.h"
#include "common/log.h"
#include "hwy/highway.h"
#include "hwy/targets.h"
#include "kernels/dispatch.h"

namespace ciuic {

namespace kernels {
namespace internal {

int64_t SlotTarget(int slot) {
  static const int64_t kTargets[kNumSlots] = {
      HWY_AVX3_DL, HWY_AVX3, HWY_AVX2, HWY_SSE4, HWY_SSSE3, HWY_NEON, HWY_SVE, HWY_SVE2,
#if HWY_TARGETS & HWY_EMU128
      HWY_EMU128
#else
      HWY_SCALAR
#endif
  };
  return slot >= 0 && slot < kNumSlots ? kTargets[slot] : 0;
}

namespace {

// What the fp8 pair kernels ask of the CPU: CPUID leaf 1 ECX, leaf 7 EBX
// and EDX, and XCR0 (the register state the OS saves); zeros off x86.
struct CpuBits {
  unsigned leaf1_ecx = 0, leaf7_ebx = 0, leaf7_edx = 0, xcr0 = 0;
  bool Has(unsigned word, int bit) const { return (word & (1u << bit)) != 0; }
};

const CpuBits& Cpu() {
  static const CpuBits bits = [] {
    CpuBits b;
#if defined(__x86_64__) && defined(__GNUC__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_max(0, nullptr) < 7) return b;
    __cpuid_count(1, 0, eax, ebx, ecx, edx);
    b.leaf1_ecx = ecx;
    if (b.Has(ecx, 27)) {  // OSXSAVE: xgetbv may run
      unsigned xhi = 0;
      __asm__("xgetbv" : "=a"(b.xcr0), "=d"(xhi) : "c"(0));
    }
    __cpuid_count(7, 0, eax, ebx, ecx, edx);
    b.leaf7_ebx = ebx;
    b.leaf7_edx = edx;
#endif
    return b;
  }();
  return bits;
}

// The OS saves the YMM registers (XCR0 bits 1, 2), and the AVX-512 ones
// too (bits 5, 6, 7).
bool OsSavesYmm(const CpuBits& c) { return (c.xcr0 & 0x6u) == 0x6u; }
bool OsSavesZmm(const CpuBits& c) { return (c.xcr0 & 0xE6u) == 0xE6u; }

}  // namespace

// AVX512 F and BW (leaf 7 EBX bits 16, 30) with BMI2 (bit 8).
bool CpuHasAvx512Bw() {
  const CpuBits& c = Cpu();
  return OsSavesZmm(c) && c.Has(c.leaf7_ebx, 16) && c.Has(c.leaf7_ebx, 30) && c.Has(c.leaf7_ebx, 8);
}

// AVX512-FP16 (leaf 7 EDX bit 23) with F, BW, VL (EBX bit 31) and BMI2.
bool CpuHasAvx512Fp16() {
  const CpuBits& c = Cpu();
  return CpuHasAvx512Bw() && c.Has(c.leaf7_ebx, 31) && c.Has(c.leaf7_edx, 23);
}

// AVX2 (leaf 7 EBX bit 5), AVX and F16C (leaf 1 ECX bits 28, 29).
bool CpuHasAvx2F16c() {
  const CpuBits& c = Cpu();
  return OsSavesYmm(c) && c.Has(c.leaf1_ecx, 28) && c.Has(c.leaf1_ecx, 29) && c.Has(c.leaf7_ebx, 5);
}

}  // namespace internal

namespace {

using internal::kNumSlots;

bool SlotCompiled(int slot) { return internal::kReduceFloat[slot] != nullptr; }

bool SlotSupported(int slot) {
  if (slot == kNumSlots - 1) return true;  // the portable fallback
  return (hwy::SupportedTargets() & internal::SlotTarget(slot)) != 0;
}

std::string SlotName(int slot) {
  std::string n = hwy::TargetName(internal::SlotTarget(slot));
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::tolower(c); });
  return n;
}

// Whether [a, a+an) and [b, b+bn) share a byte.
bool Overlap(const void* a, size_t an, const void* b, size_t bn) {
  const auto pa = reinterpret_cast<uintptr_t>(a);
  const auto pb = reinterpret_cast<uintptr_t>(b);
  return pa < pb + bn && pb < pa + an;
}

size_t SysconfOr(int name, size_t fallback) {
  const long v = sysconf(name);
  return v > 0 ? static_cast<size_t>(v) : fallback;
}

}  // namespace

CacheSizes CacheSizes::FromSystem() {
  CacheSizes c;
#ifdef _SC_LEVEL1_DCACHE_SIZE
  c.l1d = SysconfOr(_SC_LEVEL1_DCACHE_SIZE, c.l1d);
  c.l2 = SysconfOr(_SC_LEVEL2_CACHE_SIZE, c.l2);
  c.llc = SysconfOr(_SC_LEVEL3_CACHE_SIZE, c.llc);
#endif
  return c;
}

std::vector<TargetInfo> CompiledTargets() {
  std::vector<TargetInfo> out;
  for (int s = 0; s < kNumSlots; ++s) {
    if (SlotCompiled(s)) out.push_back({SlotName(s), SlotSupported(s)});
  }
  return out;
}

StatusOr<Reducer> Reducer::Create(const Config& config, const CacheSizes& caches) {
  // The environment's parser caps it; a value set in code must not reach
  // the kernels either (the pair kernels prefetch three times as far).
  if (config.kernel_prefetch_bytes > (64u << 10)) {
    return InvalidArgumentError("CIUIC_KERNEL_PREFETCH=" + std::to_string(config.kernel_prefetch_bytes) +
                                ": the prefetch distance must be at most 64K bytes");
  }
  Reducer r;
  const std::string& want = config.simd_target;
  int chosen = -1;
  bool capped = want == "auto";
  for (int s = 0; s < kNumSlots; ++s) {
    if (!SlotCompiled(s)) continue;
    const std::string name = SlotName(s);
    if (!capped && name == want) {
      if (!SlotSupported(s)) {
        return InvalidArgumentError("CIUIC_SIMD_TARGET='" + want +
                                    "': this CPU cannot run that target");
      }
      capped = true;
    }
    if (capped && SlotSupported(s)) {
      chosen = s;
      break;
    }
  }
  if (chosen < 0) {
    std::string names;
    for (const TargetInfo& t : CompiledTargets()) names += " " + t.name;
    return InvalidArgumentError("CIUIC_SIMD_TARGET='" + want +
                                "': not a target compiled into this build (compiled:" + names +
                                ")");
  }
  r.slot_ = chosen;
  const int64_t target = internal::SlotTarget(chosen);
  static const bool fp16 = internal::kFp8PairFp16Compiled && internal::CpuHasAvx512Fp16();
  static const bool avx512 = internal::kFp8PairAvx512Compiled && internal::CpuHasAvx512Bw();
  static const bool f16c = internal::kFp8PairF16cCompiled && internal::CpuHasAvx2F16c();
  const bool avx3 = target == HWY_AVX3 || target == HWY_AVX3_DL;
  const std::string& pairs = config.fp8_pairs;
  auto refuse = [&](bool compiled, const char* cpu_lacks) {
    return InvalidArgumentError("CIUIC_FP8_PAIRS=" + pairs + ": " +
                                (compiled ? std::string("this CPU has no ") + cpu_lacks
                                          : std::string("this build has no such kernel (the compiler or not x86-64)")));
  };
  if (pairs != "auto" && pairs != "avx512fp16" && pairs != "avx512" && pairs != "f16c" && pairs != "f32") {
    return InvalidArgumentError("CIUIC_FP8_PAIRS='" + pairs + "': expected auto, avx512fp16, avx512, f16c or f32");
  }
  if (pairs == "avx512fp16" && !fp16) return refuse(internal::kFp8PairFp16Compiled, "AVX512-FP16");
  if (pairs == "avx512" && !avx512) return refuse(internal::kFp8PairAvx512Compiled, "AVX-512 BW");
  if (pairs == "f16c" && !f16c) return refuse(internal::kFp8PairF16cCompiled, "AVX2 and F16C");
  if (pairs == "avx512fp16" || (pairs == "auto" && avx3 && fp16)) {
    r.fp8_pairs_ = Fp8PairKernel::kAvx512Fp16;
  } else if (pairs == "avx512" || (pairs == "auto" && avx3 && avx512)) {
    r.fp8_pairs_ = Fp8PairKernel::kAvx512;
  } else if (pairs == "f16c" || (pairs == "auto" && (avx3 || target == HWY_AVX2) && f16c)) {
    r.fp8_pairs_ = Fp8PairKernel::kF16c;
  }
  // Tile for >4 inputs: a quarter of L1d holds the scratch tile while the
  // streaming inputs pass through the rest (kernel_perf -n 8,16 measures
  // the choice).
  r.tile_bytes_ = config.kernel_tile_bytes != 0 ? config.kernel_tile_bytes
                                                : std::clamp<size_t>(caches.l1d / 4, 4096, 65536);
  r.tile_large_bytes_ = config.kernel_tile_bytes != 0
                            ? config.kernel_tile_bytes
                            : std::clamp<size_t>(caches.l2 / 16, r.tile_bytes_, 65536);
  // Non-temporal stores pay off once the output cannot stay in cache. VMs
  // report the host's whole L3 (hundreds of MiB) as one core's: cap at 32 MiB.
  if (config.kernel_nt_threshold < 0) {
    r.nt_threshold_ = std::min<size_t>(caches.llc, 32u << 20) / 2;
  } else if (config.kernel_nt_threshold == 0) {
    r.nt_threshold_ = SIZE_MAX;
  } else {
    r.nt_threshold_ = static_cast<size_t>(config.kernel_nt_threshold);
  }
  r.prefetch_bytes_ = config.kernel_prefetch_bytes;
  r.prefetch_min_bytes_ = caches.l2;
  return r;
}

StatusOr<Reducer> Reducer::FromEnv() {
  CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
  return Create(config, CacheSizes::FromSystem());
}

namespace {
bool Overlap(const void* a, const void* b, size_t n) {
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  return x < y + n && y < x + n;
}
int BestSlot() {
  for (int s = 0; s < kNumSlots; ++s) {
    if (SlotCompiled(s) && SlotSupported(s)) return s;
  }
  return kNumSlots - 1;
}

// Sums and products of at most kTinyBytes: the vector kernel's tail (zeroed
// stack buffers, copies in and out, a dispatch) costs more than the
// arithmetic there. Each element folds its inputs left to right, as every
// lane of the kernel does (no FMA: -ffp-contract=off), so the bytes are the
// kernel's; integers wrap in their unsigned type, as the kernel's do.
// 16-byte vectors (the baseline's SSE2), then single elements: the
// element-at-a-time loop cost ~20 instructions an element, most of a
// small all-reduce's own work.
constexpr size_t kTinyBytes = 256;
template <typename T, bool kProd>
void TinyFold(void* dst, const void* const* srcs, int nsrcs, size_t count) {
  using V __attribute__((vector_size(16))) = T;
  constexpr size_t kLanes = sizeof(V) / sizeof(T);
  const auto fold = [&](auto one, size_t i) {
    using U = decltype(one);
    U acc;
    std::memcpy(&acc, static_cast<const char*>(srcs[0]) + i * sizeof(T), sizeof(U));
    for (int k = 1; k < nsrcs; ++k) {
      U v;
      std::memcpy(&v, static_cast<const char*>(srcs[k]) + i * sizeof(T), sizeof(U));
      acc = kProd ? static_cast<U>(acc * v) : static_cast<U>(acc + v);
    }
    // Every input's elements are read before dst's are written: dst may be
    // one of the inputs (identical, never partly overlapping).
    std::memcpy(static_cast<char*>(dst) + i * sizeof(T), &acc, sizeof(U));
  };
  size_t i = 0;
  for (; i + kLanes <= count; i += kLanes) fold(V{}, i);
  for (; i < count; ++i) fold(T{}, i);
}
template <bool kProd>
bool TinyReduce(void* dst, const void* const* srcs, int nsrcs, size_t count, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32: TinyFold<float, kProd>(dst, srcs, nsrcs, count); return true;
    case DataType::kFloat64: TinyFold<double, kProd>(dst, srcs, nsrcs, count); return true;
    case DataType::kInt32:
    case DataType::kUint32: TinyFold<uint32_t, kProd>(dst, srcs, nsrcs, count); return true;
    case DataType::kInt64:
    case DataType::kUint64: TinyFold<uint64_t, kProd>(dst, srcs, nsrcs, count); return true;
    default: return false;
  }
}

}  // namespace

void CopyBytes(void* dst, const void* src, size_t bytes, bool streaming) {
  static const int slot = BestSlot();
  if (bytes == 0 || dst == src) return;
  if (Overlap(dst, src, bytes)) {
    std::memmove(dst, src, bytes);
    return;
  }
  internal::kCopy[slot](dst, src, bytes, streaming);
}

void Reducer::Copy(void* dst, const void* src, size_t bytes) const {
  if (bytes == 0 || dst == src) return;
  if (Overlap(dst, src, bytes)) {
    std::memmove(dst, src, bytes);
    return;
  }
  internal::kCopy[slot_](dst, src, bytes, bytes >= nt_threshold_);
}

const char* Reducer::target_name() const {
  return hwy::TargetName(internal::SlotTarget(slot_));
}

Status Reducer::Reduce(void* dst, const void* const* srcs, int nsrcs, size_t count,
                       DataType dtype, ReduceOp op) const {
  return Reduce(dst, srcs, nsrcs, count, dtype, op, 1.0);
}

Status Reducer::Reduce(void* dst, const void* const* srcs, int nsrcs, size_t count,
                       DataType dtype, ReduceOp op, double factor) const {
  CIUIC_RETURN_IF_ERROR(CheckReduction(dtype, op));
  if (nsrcs < 1 || nsrcs > kMaxSources) {
    return InvalidArgumentError("nsrcs: " + std::to_string(nsrcs) + " is outside 1.." +
                                std::to_string(kMaxSources));
  }
  if (count == 0) return Status::Ok();
  const size_t esize = DataTypeSize(dtype);
  if (count > SIZE_MAX / esize) {
    return InvalidArgumentError("count: " + std::to_string(count) + " elements overflow size_t");
  }
  const size_t bytes = count * esize;
  if (dst == nullptr) return InvalidArgumentError("dst is null with count > 0");
  if (srcs == nullptr) return InvalidArgumentError("srcs is null with count > 0");
  bool aliased = false;
  for (int k = 0; k < nsrcs; ++k) {
    if (srcs[k] == nullptr) {
      return InvalidArgumentError("srcs[" + std::to_string(k) + "] is null with count > 0");
    }
    if (srcs[k] == dst) {
      aliased = true;
    } else if (Overlap(srcs[k], bytes, dst, bytes)) {
      return InvalidArgumentError("srcs[" + std::to_string(k) +
                                  "] overlaps dst without being identical to it");
    }
  }
  if (bytes <= kTinyBytes && (op == ReduceOp::kSum || op == ReduceOp::kProd)) {
    const DefaultFpEnv env;
    if (op == ReduceOp::kSum ? TinyReduce<false>(dst, srcs, nsrcs, count, dtype)
                             : TinyReduce<true>(dst, srcs, nsrcs, count, dtype)) {
      return Status::Ok();
    }
  }
  internal::ReduceArgs a;
  a.dst = dst;
  a.srcs = srcs;
  a.nsrcs = nsrcs;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.nt = !aliased && bytes >= nt_threshold_;
  const size_t working_set = bytes * static_cast<size_t>(nsrcs + 1);
  const bool beyond_l2 = working_set > prefetch_min_bytes_;
  a.tile_bytes = beyond_l2 ? tile_large_bytes_ : tile_bytes_;
  a.prefetch_bytes = beyond_l2 ? prefetch_bytes_ : 0;
  a.factor = factor;
  const DefaultFpEnv env;
  switch (dtype) {
    case DataType::kFloat32:
    case DataType::kFloat64: internal::kReduceFloat[slot_](a); break;
    case DataType::kFloat16:
    case DataType::kBFloat16: internal::kReduceHalf[slot_](a); break;
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2:
      if (fp8_pairs_ != Fp8PairKernel::kWidened && nsrcs == 2 && (op == ReduceOp::kSum || op == ReduceOp::kAvg)) {
        // Three times as far ahead: their many operations a line leave the
        // out-of-order window fewer lines in flight than a plain sum's
        // (perf/RESULTS.md, "Numerics").
        a.prefetch_bytes *= 3;
        switch (fp8_pairs_) {
          case Fp8PairKernel::kAvx512Fp16: internal::ReduceFp8PairFp16(a); break;
          case Fp8PairKernel::kAvx512: internal::ReduceFp8PairAvx512(a); break;
          default: internal::ReduceFp8PairF16c(a); break;
        }
      } else {
        internal::kReduceFp8[slot_](a);
      }
      break;
    default: internal::kReduceInt[slot_](a); break;
  }
  return Status::Ok();
}

namespace {
Status CheckConvert(const void* src, size_t sbytes, const void* dst, size_t dbytes,
                    size_t count) {
  if (count == 0) return Status::Ok();
  if (src == nullptr) return InvalidArgumentError("src is null with count > 0");
  if (dst == nullptr) return InvalidArgumentError("dst is null with count > 0");
  if (count > SIZE_MAX / 4) return InvalidArgumentError("count overflows size_t");
  if (Overlap(src, sbytes * count, dst, dbytes * count)) {
    return InvalidArgumentError("src and dst overlap");
  }
  return Status::Ok();
}
}  // namespace

Status Reducer::ConvertF32ToBF16(const float* src, uint16_t* dst, size_t count) const {
  CIUIC_RETURN_IF_ERROR(CheckConvert(src, 4, dst, 2, count));
  if (count == 0) return Status::Ok();
  const DefaultFpEnv env;
  internal::kF32ToBF16[slot_](src, dst, count);
  return Status::Ok();
}
Status Reducer::ConvertBF16ToF32(const uint16_t* src, float* dst, size_t count) const {
  CIUIC_RETURN_IF_ERROR(CheckConvert(src, 2, dst, 4, count));
  if (count == 0) return Status::Ok();
  const DefaultFpEnv env;
  internal::kBF16ToF32[slot_](src, dst, count);
  return Status::Ok();
}
Status Reducer::ConvertF32ToF16(const float* src, uint16_t* dst, size_t count) const {
  CIUIC_RETURN_IF_ERROR(CheckConvert(src, 4, dst, 2, count));
  if (count == 0) return Status::Ok();
  const DefaultFpEnv env;
  internal::kF32ToF16[slot_](src, dst, count);
  return Status::Ok();
}
Status Reducer::ConvertF16ToF32(const uint16_t* src, float* dst, size_t count) const {
  CIUIC_RETURN_IF_ERROR(CheckConvert(src, 2, dst, 4, count));
  if (count == 0) return Status::Ok();
  const DefaultFpEnv env;
  internal::kF16ToF32[slot_](src, dst, count);
  return Status::Ok();
}

Status Reducer::Convert(const void* src, DataType from, void* dst, DataType to, size_t count) const {
  const bool narrow_from = IsNarrowFloat(from), narrow_to = IsNarrowFloat(to);
  if (!(from == DataType::kFloat32 && narrow_to) && !(narrow_from && to == DataType::kFloat32)) {
    return InvalidArgumentError(std::string("Convert: ") + DataTypeName(from) + " -> " + DataTypeName(to) +
                                " is not one of f32 <-> f16, bf16, e4m3, e5m2");
  }
  CIUIC_RETURN_IF_ERROR(CheckConvert(src, DataTypeSize(from), dst, DataTypeSize(to), count));
  if (count == 0) return Status::Ok();
  const DataType narrow = narrow_to ? to : from;
  const internal::ConvertFn* table = nullptr;
  switch (narrow) {
    case DataType::kFloat16: table = narrow_to ? internal::kF32ToF16 : internal::kF16ToF32; break;
    case DataType::kBFloat16: table = narrow_to ? internal::kF32ToBF16 : internal::kBF16ToF32; break;
    case DataType::kFloat8E4M3: table = narrow_to ? internal::kF32ToE4M3 : internal::kE4M3ToF32; break;
    default: table = narrow_to ? internal::kF32ToE5M2 : internal::kE5M2ToF32; break;
  }
  const DefaultFpEnv env;
  table[slot_](src, dst, count);
  return Status::Ok();
}

}  // namespace kernels
}  // namespace ciuic
