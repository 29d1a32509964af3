/* ciuic C ABI: what frameworks link. Every function returns a
 * ciuic_status_t; on error, ciuic_last_error() (thread-local) says what was
 * wrong, naming the argument, variable or peer. Nothing here aborts the
 * process or throws.
 * Thread contract: every function may be called from any thread; the
 * last-error string belongs to the calling thread. */
#ifndef CIUIC_CIUIC_H_
#define CIUIC_CIUIC_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  CIUIC_INT8 = 0,
  CIUIC_UINT8 = 1,
  CIUIC_INT32 = 2,
  CIUIC_UINT32 = 3,
  CIUIC_INT64 = 4,
  CIUIC_UINT64 = 5,
  CIUIC_FLOAT16 = 6,  /* IEEE binary16; computed in f32, rounded once (RNE) */
  CIUIC_BFLOAT16 = 7, /* bfloat16; computed in f32, rounded once (RNE) */
  CIUIC_FLOAT32 = 8,
  CIUIC_FLOAT64 = 9,
  CIUIC_NUM_DATATYPES = 10
} ciuic_datatype_t;

typedef enum {
  CIUIC_SUM = 0,  /* integers wrap like C unsigned arithmetic */
  CIUIC_PROD = 1, /* integers wrap */
  CIUIC_MIN = 2,  /* floats: a NaN in any input gives NaN */
  CIUIC_MAX = 3,  /* floats: a NaN in any input gives NaN */
  CIUIC_AVG = 4,  /* sum / n; integers: wrapped sum / n, truncated toward 0 */
  CIUIC_NUM_REDOPS = 5
} ciuic_redop_t;

/* The same codes as ciuic::StatusCode. */
typedef enum {
  CIUIC_SUCCESS = 0,
  CIUIC_ERROR_INVALID_ARGUMENT = 1,
  CIUIC_ERROR_NOT_FOUND = 2,
  CIUIC_ERROR_FAILED_PRECONDITION = 3,
  CIUIC_ERROR_RESOURCE_EXHAUSTED = 4,
  CIUIC_ERROR_UNAVAILABLE = 5,
  CIUIC_ERROR_DEADLINE_EXCEEDED = 6,
  CIUIC_ERROR_ABORTED = 7,
  CIUIC_ERROR_UNIMPLEMENTED = 8,
  CIUIC_ERROR_DATA_LOSS = 9,
  CIUIC_ERROR_INTERNAL = 10
} ciuic_status_t;

/* A static name for a status ("CIUIC_ERROR_INVALID_ARGUMENT"). */
const char* ciuic_status_string(ciuic_status_t status);
/* The message of the last error returned on this thread ("" if none). */
const char* ciuic_last_error(void);
/* "0.1.0" */
const char* ciuic_version(void);
/* Bytes per element of `dtype`, 0 for an unknown dtype. */
size_t ciuic_datatype_size(ciuic_datatype_t dtype);

/* dst[i] = op(srcs[0][i], ..., srcs[nsrcs-1][i]) for i in [0, count).
 * nsrcs is 1..16. dst may be identical to any source (in place); any other
 * overlap between dst and a source is an error. Pointers need only the
 * natural alignment of nothing (any byte address works). One pass: each
 * input is read once and dst written once (integer AVG adds a pass over
 * dst). Uses the best SIMD target of this CPU, capped by CIUIC_SIMD_TARGET;
 * the CIUIC_KERNEL_* knobs are read from the environment on each call.
 * Errors: CIUIC_ERROR_INVALID_ARGUMENT (null pointer with count > 0, nsrcs
 * out of range, unknown dtype/op, overlapping ranges, bad CIUIC_* value). */
ciuic_status_t ciuic_reduce_local(void* dst, const void* const* srcs, int nsrcs, size_t count,
                                  ciuic_datatype_t dtype, ciuic_redop_t op);

/* Conversions, round-to-nearest-even; NaN stays NaN, overflow gives Inf.
 * src and dst must not overlap. Errors: CIUIC_ERROR_INVALID_ARGUMENT. */
ciuic_status_t ciuic_convert_f32_to_bf16(const float* src, uint16_t* dst, size_t count);
ciuic_status_t ciuic_convert_bf16_to_f32(const uint16_t* src, float* dst, size_t count);
ciuic_status_t ciuic_convert_f32_to_f16(const float* src, uint16_t* dst, size_t count);
ciuic_status_t ciuic_convert_f16_to_f32(const uint16_t* src, float* dst, size_t count);

/* ciuic_reduce_local on device memory (CUDA): enqueued on `cuda_stream`
 * (a cudaStream_t, NULL = the default stream); returns once enqueued.
 * `srcs` is a host array of nsrcs device pointers. Same semantics and
 * rounding as the CPU kernels.
 * Errors: as ciuic_reduce_local; CIUIC_ERROR_UNIMPLEMENTED when built
 * without CUDA; CIUIC_ERROR_UNAVAILABLE when no GPU/driver is usable. */
ciuic_status_t ciuic_reduce_local_cuda(void* dst, const void* const* srcs, int nsrcs,
                                       size_t count, ciuic_datatype_t dtype, ciuic_redop_t op,
                                       void* cuda_stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CIUIC_CIUIC_H_ */
