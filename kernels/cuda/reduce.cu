// CUDA reduction kernels: the same dtypes, ops and rounding as the CPU
// kernels (left fold s0 op s1 op ..., f16/bf16 computed in f32 and rounded
// once to nearest even, integer sum/prod wrapping, NaN-propagating min/max),
// so a GPU and a CPU rank produce bitwise identical results.
// Vectorised: each thread handles 4 x 16 bytes per input and pass (uint4
// loads/stores, all four issued before use) when every pointer is 16-byte
// aligned; grid-stride loops; a scalar kernel covers unaligned pointers and
// the tail.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "ciuic/ciuic.h"
#include "ciuic/kernels.h"
#include "common/c_api.h"
#include "kernels/cuda/reduce_cuda.h"

namespace ciuic::kernels::cuda {
namespace {

constexpr int kMaxSrc = 16;

struct Ptrs {
  const void* p[kMaxSrc];
  double factor;  // premul_sum's
};

// OCP fp8 storage types, one byte each.
struct E4M3 { uint8_t bits; };
struct E5M2 { uint8_t bits; };

// The same integer steps as the CPU kernels (kernels/reduce-inl.h), so both
// round alike: e4m3 saturates to +-448, e5m2 overflows to Inf.
__device__ __forceinline__ float DecodeE4M3(uint8_t b) {
  const uint32_t mag = b & 0x7Fu;
  uint32_t r;
  if (mag == 0x7Fu) {
    r = 0x7FC00000u;
  } else if (mag < 8u) {
    r = __float_as_uint(__fmul_rn(static_cast<float>(b & 7u), 1.0f / 512));
  } else {
    r = (mag << 20) + (120u << 23);
  }
  return __uint_as_float(r | (static_cast<uint32_t>(b & 0x80u) << 24));
}
__device__ __forceinline__ float DecodeE5M2(uint8_t b) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(b << 8)));
}
__device__ __forceinline__ uint8_t EncodeE4M3(float v) {
  const uint32_t bits = __float_as_uint(v);
  const uint32_t sign = (bits >> 24) & 0x80u;
  if (isnan(v)) return static_cast<uint8_t>(sign | 0x7Fu);
  const float absf = fminf(fabsf(v), 448.0f);
  const uint32_t a = __float_as_uint(absf);
  const uint32_t r = a < 0x3C800000u ? __float_as_uint(__fadd_rn(absf, 16384.0f)) - 0x46800000u
                                     : (a - 0x3C000000u + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
  return static_cast<uint8_t>(sign | r);
}
__device__ __forceinline__ uint8_t EncodeE5M2(float v) {
  const uint32_t bits = __float_as_uint(v);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t a = bits & 0x7FFFFFFFu;
  uint32_t r;
  if (a > 0x7F800000u) {
    r = 0x7Eu;
  } else if (a > 0x477FFFFFu) {
    r = 0x7Cu;
  } else if (a < 0x38800000u) {
    r = __float_as_uint(__fadd_rn(__uint_as_float(a), 128.0f)) - 0x43000000u;
  } else {
    r = (a - 0x38000000u + 0xFFFFFu + ((a >> 21) & 1u)) >> 21;
  }
  return static_cast<uint8_t>(sign | r);
}

// Storage <-> compute conversions.
template <typename S> struct Conv {
  using C = S;
  __device__ static C In(S v) { return v; }
  __device__ static S Out(C v) { return v; }
};
template <> struct Conv<__half> {
  using C = float;
  __device__ static float In(__half v) { return __half2float(v); }
  __device__ static __half Out(float v) { return __float2half_rn(v); }
};
template <> struct Conv<__nv_bfloat16> {
  using C = float;
  __device__ static float In(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 Out(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Conv<E4M3> {
  using C = float;
  __device__ static float In(E4M3 v) { return DecodeE4M3(v.bits); }
  __device__ static E4M3 Out(float v) { return E4M3{EncodeE4M3(v)}; }
};
template <> struct Conv<E5M2> {
  using C = float;
  __device__ static float In(E5M2 v) { return DecodeE5M2(v.bits); }
  __device__ static E5M2 Out(float v) { return E5M2{EncodeE5M2(v)}; }
};

// premul_sum's factor times a loaded input; _rn: never fused with the sum
// (nvcc contracts a * b + c by default), so it rounds like the CPU.
__device__ __forceinline__ float Scale(float v, double f) { return __fmul_rn(v, static_cast<float>(f)); }
__device__ __forceinline__ double Scale(double v, double f) { return __dmul_rn(v, f); }
template <typename C>
__device__ __forceinline__ C Scale(C v, double) { return v; }

template <typename S>
__device__ __forceinline__ typename Conv<S>::C Load(S v, int op, double f) {
  using C = typename Conv<S>::C;
  const C x = Conv<S>::In(v);
  if constexpr (std::is_floating_point_v<C>) {
    if (op == CIUIC_PREMUL_SUM) return Scale(x, f);
  }
  return x;
}

template <typename C>
__device__ __forceinline__ C Apply(int op, C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case CIUIC_PROD: return a * b;
      case CIUIC_MIN: return (isnan(a) || isnan(b)) ? a + b : (a < b ? a : b);
      case CIUIC_MAX: return (isnan(a) || isnan(b)) ? a + b : (a > b ? a : b);
      default: return a + b;  // SUM, AVG, PREMUL_SUM
    }
  } else {
    using U = std::make_unsigned_t<C>;
    switch (op) {
      case CIUIC_PROD:
        return static_cast<C>(static_cast<U>(static_cast<unsigned long long>(static_cast<U>(a)) *
                                             static_cast<unsigned long long>(static_cast<U>(b))));
      case CIUIC_MIN: return a < b ? a : b;
      case CIUIC_MAX: return a > b ? a : b;
      case CIUIC_BAND: return static_cast<C>(a & b);
      case CIUIC_BOR: return static_cast<C>(a | b);
      case CIUIC_BXOR: return static_cast<C>(a ^ b);
      default: return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    }
  }
}

template <typename S>
__device__ __forceinline__ S ReduceOne(const Ptrs& src, int n, size_t i, int op) {
  using C = typename Conv<S>::C;
  C acc = Load<S>(static_cast<const S*>(src.p[0])[i], op, src.factor);
  for (int k = 1; k < n; ++k) acc = Apply<C>(op, acc, Load<S>(static_cast<const S*>(src.p[k])[i], op, src.factor));
  if (op == CIUIC_AVG) acc = static_cast<C>(acc / static_cast<C>(n));
  return Conv<S>::Out(acc);
}

template <typename S>
__global__ void ScalarKernel(S* dst, Ptrs src, int n, size_t begin, size_t count, int op) {
  for (size_t i = begin + blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    dst[i] = ReduceOne<S>(src, n, i, op);
  }
}

// 16 bytes per thread per input (kVec elements loaded as one uint4), kU
// such vectors per thread and pass (grid-strided, so warps stay coalesced)
// with all kU loads of an input issued before any is used: more bytes in
// flight per thread for the latency of L2 and HBM.
template <typename S, int kU>
__global__ void VectorKernel(S* dst, Ptrs src, int n, size_t nvec, int op) {
  constexpr int kVec = 16 / sizeof(S);
  using C = typename Conv<S>::C;
  union V { uint4 raw; S e[kVec]; };
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t base = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; base < nvec;
       base += stride * kU) {
    V in[kU];
    C acc[kU][kVec];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const size_t v = base + u * stride;
      if (v < nvec) in[u].raw = __ldg(static_cast<const uint4*>(src.p[0]) + v);
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[u][j] = Load<S>(in[u].e[j], op, src.factor);
    }
    for (int k = 1; k < n; ++k) {
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const size_t v = base + u * stride;
        if (v < nvec) in[u].raw = __ldg(static_cast<const uint4*>(src.p[k]) + v);
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[u][j] = Apply<C>(op, acc[u][j], Load<S>(in[u].e[j], op, src.factor));
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const size_t v = base + u * stride;
      if (v >= nvec) break;
      V out;
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        C r = acc[u][j];
        if (op == CIUIC_AVG) r = static_cast<C>(r / static_cast<C>(n));
        out.e[j] = Conv<S>::Out(r);
      }
      reinterpret_cast<uint4*>(dst)[v] = out.raw;
    }
  }
}

// Multiprocessors of the current device, asked once per device (the
// attribute query costs more than a launch).
int SmCount() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices] = {};
  int dev = 0;
  cudaGetDevice(&dev);
  if (dev < 0 || dev >= kMaxDevices) dev = kMaxDevices - 1;
  int sms = cache[dev].load(std::memory_order_relaxed);
  if (sms > 0) return sms;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sms <= 0) {
    cudaGetLastError();
    sms = 80;
  }
  cache[dev].store(sms, std::memory_order_relaxed);
  return sms;
}

std::atomic<int> g_unroll_override{0};

std::atomic<int> g_grid_override{0};

// Blocks of `kernel` that run at once on one multiprocessor (registers and
// threads allow), asked once per kernel.
template <typename K>
int ResidentBlocks(K kernel, int threads) {
  static std::atomic<int> cached{0};
  int b = cached.load(std::memory_order_relaxed);
  if (b > 0) return b;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kernel, threads, 0) != cudaSuccess || b <= 0) {
    cudaGetLastError();
    b = 8;
  }
  cached.store(b, std::memory_order_relaxed);
  return b;
}

// Grid for `work` items of one thread each: no more blocks than run at once
// (`resident` per multiprocessor), so a grid-stride loop ends in one wave
// instead of leaving a second wave (8 per multiprocessor before: the
// unrolled kernel's 63 registers a thread let 4 fit, the other 4 ran after).
int Blocks(size_t work, int threads, int resident = 8) {
  const int sms = SmCount();
  const size_t want = (work + threads - 1) / threads;
  const int per_sm = g_grid_override.load(std::memory_order_relaxed) == 1 ? 8 : resident;
  const size_t cap = static_cast<size_t>(sms) * per_sm;
  return static_cast<int>(want < cap ? (want == 0 ? 1 : want) : cap);
}

template <typename S>
cudaError_t Launch(void* dst, const Ptrs& src, int n, size_t count, int op, cudaStream_t stream) {
  constexpr int kThreads = 256;
  constexpr size_t kVec = 16 / sizeof(S);
  bool aligned = reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  for (int k = 0; k < n; ++k) aligned = aligned && reinterpret_cast<uintptr_t>(src.p[k]) % 16 == 0;
  size_t done = 0;
  if (aligned && count >= kVec) {
    const size_t nvec = count / kVec;
    // Vectors per thread and pass: 4 (registers do not grow with n): more
    // loads in flight per thread, which device memory needs to stream
    // (perf/RESULTS.md, cuda_kernel_perf --breakdown).
    int unroll = g_unroll_override.load(std::memory_order_relaxed);
    if (unroll <= 0) unroll = 4;
    S* d = static_cast<S*>(dst);
    if (unroll >= 4) {
      const int r = ResidentBlocks(VectorKernel<S, 4>, kThreads);
      VectorKernel<S, 4><<<Blocks((nvec + 3) / 4, kThreads, r), kThreads, 0, stream>>>(d, src, n, nvec, op);
    } else if (unroll == 2) {
      const int r = ResidentBlocks(VectorKernel<S, 2>, kThreads);
      VectorKernel<S, 2><<<Blocks((nvec + 1) / 2, kThreads, r), kThreads, 0, stream>>>(d, src, n, nvec, op);
    } else {
      const int r = ResidentBlocks(VectorKernel<S, 1>, kThreads);
      VectorKernel<S, 1><<<Blocks(nvec, kThreads, r), kThreads, 0, stream>>>(d, src, n, nvec, op);
    }
    done = nvec * kVec;
  }
  if (done < count) {
    ScalarKernel<S><<<Blocks(count - done, kThreads), kThreads, 0, stream>>>(
        static_cast<S*>(dst), src, n, done, count, op);
  }
  return cudaGetLastError();
}

Status CheckDevicePointer(const void* p, const std::string& name) {
  cudaPointerAttributes attr;
  const cudaError_t e = cudaPointerGetAttributes(&attr, p);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    int devices = 0;
    const cudaError_t de = cudaGetDeviceCount(&devices);
    if (de != cudaSuccess || devices == 0) {
      cudaGetLastError();
      return UnavailableError(std::string("no usable CUDA device: ") +
                              (de != cudaSuccess ? cudaGetErrorString(de) : "0 devices"));
    }
    return InvalidArgumentError(name + ": not a pointer the CUDA runtime knows (" +
                                cudaGetErrorString(e) + ")");
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    return InvalidArgumentError(name + " is not device memory (use ciuic_reduce_local for host buffers)");
  }
  return Status::Ok();
}

}  // namespace

void SetVectorUnrollForBenchmark(int unroll) { g_unroll_override.store(unroll, std::memory_order_relaxed); }
void SetGridForBenchmark(int mode) { g_grid_override.store(mode, std::memory_order_relaxed); }

Status Reduce(void* dst, const void* const* srcs, int nsrcs, size_t count, DataType dtype,
              ReduceOp op, cudaStream_t stream, double factor) {
  CIUIC_RETURN_IF_ERROR(CheckReduction(dtype, op));
  if (nsrcs < 1 || nsrcs > kMaxSrc) {
    return InvalidArgumentError("nsrcs: " + std::to_string(nsrcs) + " is outside 1..16");
  }
  if (count == 0) return Status::Ok();
  if (dst == nullptr) return InvalidArgumentError("dst is null with count > 0");
  if (srcs == nullptr) return InvalidArgumentError("srcs is null with count > 0");
  const size_t bytes = count * DataTypeSize(dtype);
  CIUIC_RETURN_IF_ERROR(CheckDevicePointer(dst, "dst"));
  Ptrs p{};
  p.factor = factor;
  for (int k = 0; k < nsrcs; ++k) {
    const std::string name = "srcs[" + std::to_string(k) + "]";
    if (srcs[k] == nullptr) return InvalidArgumentError(name + " is null with count > 0");
    CIUIC_RETURN_IF_ERROR(CheckDevicePointer(srcs[k], name));
    const auto a = reinterpret_cast<uintptr_t>(srcs[k]);
    const auto d = reinterpret_cast<uintptr_t>(dst);
    if (a != d && a < d + bytes && d < a + bytes) {
      return InvalidArgumentError(name + " overlaps dst without being identical to it");
    }
    p.p[k] = srcs[k];
  }
  int o = static_cast<int>(op);
  cudaError_t e = cudaSuccess;
  switch (dtype) {
    case DataType::kInt8: e = Launch<int8_t>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kUint8: e = Launch<uint8_t>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kInt16: e = Launch<int16_t>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kUint16: e = Launch<uint16_t>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kBool:  // bytes; sum is or (max), prod is and (min)
      if (o == CIUIC_SUM) o = CIUIC_MAX;
      if (o == CIUIC_PROD) o = CIUIC_MIN;
      e = Launch<uint8_t>(dst, p, nsrcs, count, o, stream);
      break;
    case DataType::kFloat8E4M3: e = Launch<E4M3>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kFloat8E5M2: e = Launch<E5M2>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kInt32: e = Launch<int32_t>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kUint32: e = Launch<uint32_t>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kInt64: e = Launch<int64_t>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kUint64: e = Launch<uint64_t>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kFloat16: e = Launch<__half>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kBFloat16: e = Launch<__nv_bfloat16>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kFloat32: e = Launch<float>(dst, p, nsrcs, count, o, stream); break;
    case DataType::kFloat64: e = Launch<double>(dst, p, nsrcs, count, o, stream); break;
  }
  if (e != cudaSuccess) {
    return UnavailableError(std::string("CUDA kernel launch failed: ") + cudaGetErrorString(e));
  }
  return Status::Ok();
}

}  // namespace ciuic::kernels::cuda

extern "C" ciuic_status_t ciuic_reduce_local_cuda(void* dst, const void* const* srcs, int nsrcs,
                                                  size_t count, ciuic_datatype_t dtype,
                                                  ciuic_redop_t op, void* cuda_stream) {
  return ciuic::ToCStatus(ciuic::kernels::cuda::Reduce(
      dst, srcs, nsrcs, count, static_cast<ciuic::DataType>(dtype), static_cast<ciuic::ReduceOp>(op),
      static_cast<cudaStream_t>(cuda_stream), 1.0));
}
