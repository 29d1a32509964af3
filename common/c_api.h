// Internal helpers for the C ABI: Status -> ciuic_status_t plus the
// thread-local last-error message.
#ifndef CIUIC_COMMON_C_API_H_
#define CIUIC_COMMON_C_API_H_

#include "ciuic/ciuic.h"
#include "ciuic/kernels.h"
#include "ciuic/status.h"

namespace ciuic {

// The C ABI casts its enums to the C++ ones: they must stay equal.
#define CIUIC_SAME_ENUM(c, cpp) static_assert(static_cast<int>(c) == static_cast<int>(cpp), #c " != " #cpp)
CIUIC_SAME_ENUM(CIUIC_INT8, DataType::kInt8);
CIUIC_SAME_ENUM(CIUIC_UINT8, DataType::kUint8);
CIUIC_SAME_ENUM(CIUIC_INT32, DataType::kInt32);
CIUIC_SAME_ENUM(CIUIC_UINT32, DataType::kUint32);
CIUIC_SAME_ENUM(CIUIC_INT64, DataType::kInt64);
CIUIC_SAME_ENUM(CIUIC_UINT64, DataType::kUint64);
CIUIC_SAME_ENUM(CIUIC_FLOAT16, DataType::kFloat16);
CIUIC_SAME_ENUM(CIUIC_BFLOAT16, DataType::kBFloat16);
CIUIC_SAME_ENUM(CIUIC_FLOAT32, DataType::kFloat32);
CIUIC_SAME_ENUM(CIUIC_FLOAT64, DataType::kFloat64);
CIUIC_SAME_ENUM(CIUIC_INT16, DataType::kInt16);
CIUIC_SAME_ENUM(CIUIC_UINT16, DataType::kUint16);
CIUIC_SAME_ENUM(CIUIC_BOOL, DataType::kBool);
CIUIC_SAME_ENUM(CIUIC_FLOAT8_E4M3, DataType::kFloat8E4M3);
CIUIC_SAME_ENUM(CIUIC_FLOAT8_E5M2, DataType::kFloat8E5M2);
CIUIC_SAME_ENUM(CIUIC_NUM_DATATYPES, kNumDataTypes);
CIUIC_SAME_ENUM(CIUIC_SUM, ReduceOp::kSum);
CIUIC_SAME_ENUM(CIUIC_PROD, ReduceOp::kProd);
CIUIC_SAME_ENUM(CIUIC_MIN, ReduceOp::kMin);
CIUIC_SAME_ENUM(CIUIC_MAX, ReduceOp::kMax);
CIUIC_SAME_ENUM(CIUIC_AVG, ReduceOp::kAvg);
CIUIC_SAME_ENUM(CIUIC_BAND, ReduceOp::kBand);
CIUIC_SAME_ENUM(CIUIC_BOR, ReduceOp::kBor);
CIUIC_SAME_ENUM(CIUIC_BXOR, ReduceOp::kBxor);
CIUIC_SAME_ENUM(CIUIC_PREMUL_SUM, ReduceOp::kPremulSum);
CIUIC_SAME_ENUM(CIUIC_NUM_REDOPS, kNumReduceOps);
CIUIC_SAME_ENUM(CIUIC_SUCCESS, StatusCode::kOk);
CIUIC_SAME_ENUM(CIUIC_ERROR_INVALID_ARGUMENT, StatusCode::kInvalidArgument);
CIUIC_SAME_ENUM(CIUIC_ERROR_NOT_FOUND, StatusCode::kNotFound);
CIUIC_SAME_ENUM(CIUIC_ERROR_FAILED_PRECONDITION, StatusCode::kFailedPrecondition);
CIUIC_SAME_ENUM(CIUIC_ERROR_RESOURCE_EXHAUSTED, StatusCode::kResourceExhausted);
CIUIC_SAME_ENUM(CIUIC_ERROR_UNAVAILABLE, StatusCode::kUnavailable);
CIUIC_SAME_ENUM(CIUIC_ERROR_DEADLINE_EXCEEDED, StatusCode::kDeadlineExceeded);
CIUIC_SAME_ENUM(CIUIC_ERROR_ABORTED, StatusCode::kAborted);
CIUIC_SAME_ENUM(CIUIC_ERROR_UNIMPLEMENTED, StatusCode::kUnimplemented);
CIUIC_SAME_ENUM(CIUIC_ERROR_DATA_LOSS, StatusCode::kDataLoss);
CIUIC_SAME_ENUM(CIUIC_ERROR_INTERNAL, StatusCode::kInternal);
#undef CIUIC_SAME_ENUM

// Records status.message() as this thread's last error (cleared when ok)
// and returns the matching C code.
ciuic_status_t ToCStatus(const Status& status);
}  // namespace ciuic

#endif  // CIUIC_COMMON_C_API_H_
