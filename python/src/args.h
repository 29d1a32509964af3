// The Python API's argument checks that need no Python: what an array's
// buffer format means, dtype names, split sizes. Shared by _ciuic
// (module.cc) and the torch backend (torch_backend.cc), and pure so that
// they are unit-tested and fuzzed (tests/fuzz/fuzz_pyargs.cc): a format or
// a split comes from the caller's objects, which may be anything.
// Thread contract: pure functions.
#ifndef CIUIC_PYTHON_SRC_ARGS_H_
#define CIUIC_PYTHON_SRC_ARGS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ciuic/kernels.h"
#include "ciuic/status.h"

namespace ciuic::pyargs {

// numpy's name of `t` ("float32", "bfloat16", ...).
const char* TypeName(DataType t);
// What the API takes, for error messages.
extern const char* const kTakes;

// A dtype by name: numpy's and torch's names, ciuic's, and the usual short
// ones (bf16, fp16, half, float, double, fp32, fp64, fp8_e4m3, fp8_e5m2).
std::optional<DataType> DataTypeByName(const std::string& name);

// The element type of a buffer-protocol view: its struct-module `format`
// (null: bytes) with native or little-endian byte order, and its
// `itemsize`, which must be the type's size (an exporter may claim any
// pair; a mismatch would read elements of another width).
std::optional<DataType> FromFormat(const char* format, int64_t itemsize);

// The elements (or rows) per rank of an all-to-all-v over `n` ranks:
// `*splits` as given (one per rank, each >= 0, summing to `total` without
// overflow), or, when `splits` is null, `total` split evenly. Errors: kInvalidArgument
// naming `what` (the argument) and `buffer`, which has `total` `unit`s
// ("elements", "rows").
StatusOr<std::vector<size_t>> SplitCounts(const std::vector<int64_t>* splits, uint64_t total, size_t n,
                                          const std::string& what, const std::string& buffer,
                                          const char* unit = "elements");

}  // namespace ciuic::pyargs

#endif  // CIUIC_PYTHON_SRC_ARGS_H_
