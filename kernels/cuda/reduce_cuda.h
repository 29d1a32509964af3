// Internal C++ entry of the CUDA kernels (the C ABI is
// ciuic_reduce_local_cuda in include/ciuic/ciuic.h).
#ifndef CIUIC_KERNELS_CUDA_REDUCE_CUDA_H_
#define CIUIC_KERNELS_CUDA_REDUCE_CUDA_H_

#include <cuda_runtime.h>

#include "ciuic/kernels.h"

namespace ciuic::kernels::cuda {
// Enqueues dst = op over srcs (device pointers) on `stream`.
// Errors: kInvalidArgument (bad argument, host pointer, overlap),
// kUnavailable (no device, launch failure).
Status Reduce(void* dst, const void* const* srcs, int nsrcs, size_t count, DataType dtype,
              ReduceOp op, cudaStream_t stream, double factor = 1.0);

// Benchmarks only: vectors per thread and pass of the aligned kernel (1, 2
// or 4; 0 = chosen by the input count). Not thread-safe with running calls.
void SetVectorUnrollForBenchmark(int unroll);
// Benchmarks only: the grid of the aligned kernel: 0 = one wave of the
// blocks that fit at once (the default), 1 = 8 blocks per multiprocessor.
void SetGridForBenchmark(int mode);
}  // namespace ciuic::kernels::cuda

#endif  // CIUIC_KERNELS_CUDA_REDUCE_CUDA_H_
