// cuda_kernel_perf: GB/s of ciuic's CUDA reduction kernels against a
// device-to-device cudaMemcpy in the same run. GB/s counts bytes read +
// bytes written. Every result is copied back and checked against the CPU
// reference (#wrong). Times with CUDA events: median of 5 repetitions after
// warm-up. `cuda_kernel_perf MAX_MIB --breakdown`: the host cost of a call
// and the aligned kernel with 1, 2 and 4 vectors per thread side by side.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ciuic/ciuic.h"
#include "ciuic/kernels.h"
#include "common/version.h"
#include "kernels/cuda/reduce_cuda.h"
#include "kernels/reference.h"

namespace {

using ciuic::DataType;
using ciuic::ReduceOp;

#define CUDA_OK(x)                                                              \
  do {                                                                          \
    cudaError_t e_ = (x);                                                       \
    if (e_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "cuda_kernel_perf: %s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                             \
    }                                                                           \
  } while (0)

template <typename F>
float MedianMs(F fn, int iters) {
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  fn();
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int r = 0; r < 5; ++r) {
    CUDA_OK(cudaEventRecord(a));
    for (int i = 0; i < iters; ++i) fn();
    CUDA_OK(cudaEventRecord(b));
    CUDA_OK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_OK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t / iters);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[2];
}

// Values repeat with a period of kPeriod elements (they depend on
// i mod 4096), so inputs are filled by replication and each output element is
// checked against the reference of its residue class: every element is
// checked, without a reference pass over gigabytes on the host.
constexpr size_t kPeriod = 4096;

void Fill(void* p, size_t count, DataType dt, int salt) {
  const size_t es = ciuic::DataTypeSize(dt);
  const size_t first = count < kPeriod ? count : kPeriod;
  for (size_t i = 0; i < first; ++i) {
    const float v = static_cast<float>(static_cast<int>((i * 2654435761u + salt * 97u) % 4096) - 2048) / 256.f;
    switch (dt) {
      case DataType::kFloat32: static_cast<float*>(p)[i] = v; break;
      case DataType::kFloat16: static_cast<uint16_t*>(p)[i] = ciuic::kernels::ref::F32ToF16(v); break;
      case DataType::kBFloat16: static_cast<uint16_t*>(p)[i] = ciuic::kernels::ref::F32ToBF16(v); break;
      default: std::memset(static_cast<char*>(p) + i * es, salt, es); break;
    }
  }
  for (size_t done = first; done < count; done += first) {
    const size_t n = count - done < first ? count - done : first;
    std::memcpy(static_cast<char*>(p) + done * es, p, n * es);
  }
}

// n inputs of `bytes` (filled by Fill with salts 1..n) on the host and on
// the device, and the reference of one period of their sum.
struct Inputs {
  Inputs(int n, size_t bytes, DataType dt) : host(n, std::vector<unsigned char>(bytes)), hs(n), ds(n) {
    const size_t es = ciuic::DataTypeSize(dt), count = bytes / es;
    for (int k = 0; k < n; ++k) {
      Fill(host[k].data(), count, dt, k + 1);
      hs[k] = host[k].data();
      void* d;
      CUDA_OK(cudaMalloc(&d, bytes));
      CUDA_OK(cudaMemcpy(d, host[k].data(), bytes, cudaMemcpyHostToDevice));
      ds[k] = d;
    }
    period = count < kPeriod ? count : kPeriod;
    want.resize(kPeriod * es);
    ciuic::kernels::ref::Reduce(want.data(), hs.data(), n, period, dt, ReduceOp::kSum);
  }
  ~Inputs() {
    for (const void* d : ds) cudaFree(const_cast<void*>(d));
  }
  Inputs(const Inputs&) = delete;
  Inputs& operator=(const Inputs&) = delete;
  // Output elements that differ from the reference.
  size_t Wrong(const void* dev_out, size_t count, size_t es) const {
    std::vector<unsigned char> got(count * es);
    CUDA_OK(cudaMemcpy(got.data(), dev_out, got.size(), cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += std::memcmp(got.data() + i * es, want.data() + (i % period) * es, es) != 0;
    return wrong;
  }
  std::vector<std::vector<unsigned char>> host;
  std::vector<const void*> hs, ds;
  std::vector<unsigned char> want;
  size_t period = 0;
};

// Host microseconds per call of `fn` (wall clock, `calls` calls).
template <typename F>
double HostUs(F fn, int calls) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) fn();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
}

// What one call costs the host (the GPU work of a small call is shorter
// than its launch), and the aligned kernel's vectors per thread side by
// side (f32 sum; every result checked).
size_t Breakdown(size_t max_bytes) {
  void* a = nullptr;
  CUDA_OK(cudaMalloc(&a, 1 << 20));
  cudaPointerAttributes attr;
  int dev = 0, sms = 0;
  const double pga = HostUs([&] { (void)cudaPointerGetAttributes(&attr, a); }, 10000);
  const double gd = HostUs([&] { (void)cudaGetDevice(&dev); }, 10000);
  const double da = HostUs([&] { (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev); }, 10000);
  const void* srcs[2] = {a, a};
  CUDA_OK(cudaDeviceSynchronize());
  const double call = HostUs([&] {
    (void)ciuic_reduce_local_cuda(a, srcs, 2, 1024, CIUIC_FLOAT32, CIUIC_SUM, nullptr);
  }, 500);
  CUDA_OK(cudaDeviceSynchronize());
  std::printf("# host us per call: cudaPointerGetAttributes %.2f, cudaGetDevice %.3f, "
              "cudaDeviceGetAttribute %.2f, ciuic_reduce_local_cuda(2 x 4 KiB) %.2f\n",
              pga, gd, da, call);
  cudaFree(a);
  std::printf("%-5s %2s %11s | %9s %9s %9s %9s | %6s\n", "type", "n", "bytes", "unroll 1", "unroll 2", "unroll 4",
              "4, 8/SM", "#wrong");
  size_t total_wrong = 0;
  const DataType dt = DataType::kFloat32;
  for (int n : {2, 4, 8}) {
    for (size_t bytes = 1u << 20; bytes <= max_bytes; bytes *= 4) {
      const size_t count = bytes / 4;
      Inputs in(n, bytes, dt);
      void* out;
      CUDA_OK(cudaMalloc(&out, bytes));
      double gbs[4];
      size_t wrong = 0;
      // Vectors per thread 1, 2, 4 with one wave of resident blocks; then 4
      // with the former grid of 8 blocks per multiprocessor.
      const int unrolls[4] = {1, 2, 4, 4};
      for (int u = 0; u < 4; ++u) {
        ciuic::kernels::cuda::SetVectorUnrollForBenchmark(unrolls[u]);
        ciuic::kernels::cuda::SetGridForBenchmark(u == 3 ? 1 : 0);
        CUDA_OK(cudaMemset(out, 0, bytes));
        const float t = MedianMs([&] {
          (void)ciuic_reduce_local_cuda(out, in.ds.data(), n, count, CIUIC_FLOAT32, CIUIC_SUM, nullptr);
        }, bytes >= (64u << 20) ? 5 : 50);
        gbs[u] = (n + 1.0) * bytes / (t * 1e-3) / 1e9;
        wrong += in.Wrong(out, count, 4);
      }
      ciuic::kernels::cuda::SetVectorUnrollForBenchmark(0);
      ciuic::kernels::cuda::SetGridForBenchmark(0);
      total_wrong += wrong;
      std::printf("%-5s %2d %11zu | %9.1f %9.1f %9.1f %9.1f | %6zu\n", "f32", n, bytes, gbs[0], gbs[1], gbs[2], gbs[3],
                  wrong);
      std::fflush(stdout);
      cudaFree(out);
    }
  }
  return total_wrong;
}

}  // namespace

int main(int argc, char** argv) {
  size_t max_bytes = 256u << 20;
  if (argc > 1) max_bytes = std::strtoull(argv[1], nullptr, 10) << 20;
  int dev = 0, ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::printf("# cuda_kernel_perf: no CUDA device; nothing to measure\n");
    return 0;
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, dev));
  std::printf("# ciuic cuda_kernel_perf %s (git %s)\n", ciuic::Version(), ciuic::GitRevision());
  std::printf("# device: %s, sm_%d%d, %d SMs, %.0f GiB\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
  std::printf("# GB/s = (inputs + output bytes) / time; memcpy = cudaMemcpy D2D (2 x bytes)\n");
  std::printf("%-5s %-4s %2s %11s | %9s %9s %6s | %6s\n", "type", "op", "n", "bytes", "ciuic",
              "memcpy", "/mcpy", "#wrong");
  size_t total_wrong = 0;
  if (argc > 2 && std::string(argv[2]) == "--breakdown") {
    total_wrong = Breakdown(max_bytes);
    std::printf("# %zu wrong elements in total\n", total_wrong);
    return total_wrong == 0 ? 0 : 1;
  }
  for (DataType dt : {DataType::kFloat32, DataType::kBFloat16, DataType::kFloat16}) {
    for (int n : {2, 8}) {
      for (size_t bytes = 1u << 20; bytes <= max_bytes; bytes *= 16) {
        const size_t es = ciuic::DataTypeSize(dt), count = bytes / es;
        Inputs in(n, bytes, dt);
        const std::vector<const void*>& ds = in.ds;
        void *out, *tmp;
        CUDA_OK(cudaMalloc(&out, bytes));
        CUDA_OK(cudaMalloc(&tmp, bytes));
        const int iters = bytes >= (64u << 20) ? 5 : 50;
        const float t = MedianMs([&] {
          if (ciuic_reduce_local_cuda(out, ds.data(), n, count, static_cast<ciuic_datatype_t>(dt),
                                      CIUIC_SUM, nullptr) != CIUIC_SUCCESS) {
            std::fprintf(stderr, "cuda_kernel_perf: %s\n", ciuic_last_error());
            std::exit(1);
          }
        }, iters);
        const float tm = MedianMs([&] { cudaMemcpyAsync(tmp, ds[0], bytes, cudaMemcpyDeviceToDevice); }, iters);
        const size_t wrong = in.Wrong(out, count, es);
        total_wrong += wrong;
        const double gbs = (n + 1.0) * bytes / (t * 1e-3) / 1e9;
        const double mgbs = 2.0 * bytes / (tm * 1e-3) / 1e9;
        std::printf("%-5s %-4s %2d %11zu | %9.1f %9.1f %6.2f | %6zu\n", ciuic::DataTypeName(dt), "sum",
                    n, bytes, gbs, mgbs, gbs / mgbs, wrong);
        std::fflush(stdout);
        cudaFree(out);
        cudaFree(tmp);
      }
    }
  }
  std::printf("# %zu wrong elements in total\n", total_wrong);
  return total_wrong == 0 ? 0 : 1;
}
