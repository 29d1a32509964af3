// The Python API's argument checks (python/src/args.h): what a caller's
// objects can hand them. The first byte picks the check. An accepted
// buffer format names a type of the buffer's item size; an accepted dtype
// name is one of ciuic's types; accepted splits, one per rank, sum exactly
// to the buffer (computed without wrapping), so no rank's share lies
// outside it.
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "python/src/args.h"

using namespace ciuic;
using namespace ciuic::pyargs;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = SeedDir();
  if (dir == nullptr) return 0;
  WriteSeed(dir, "format_f", std::string("\0\4<f", 4));
  WriteSeed(dir, "format_q", std::string("\0\10q", 3));
  WriteSeed(dir, "name", std::string("\1bfloat16"));
  std::string splits("\2\3", 2);
  const uint64_t total = 6;
  splits.append(reinterpret_cast<const char*>(&total), 8);
  for (int64_t v : {1, 2, 3}) splits.append(reinterpret_cast<const char*>(&v), 8);
  WriteSeed(dir, "splits", splits);
  WriteSeed(dir, "splits_even", std::string("\3\3", 2) + splits.substr(2, 8));
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const uint8_t mode = data[0] % 4;
  if (mode == 0) {
    // A format as C text (up to its first NUL; none at all: a null format,
    // which means bytes) with a signed item size.
    const std::string f = FuzzText(data + 2, size - 2);
    const int64_t itemsize = data[1] < 128 ? data[1] : int64_t{data[1]} - 256;
    if (auto t = FromFormat(size == 2 ? nullptr : f.c_str(), itemsize)) {
      FUZZ_CHECK(static_cast<int64_t>(DataTypeSize(*t)) == itemsize);
      FUZZ_CHECK(std::strlen(f.c_str()) <= 2);
      if (size == 2) FUZZ_CHECK(*t == DataType::kUint8);
    }
    return 0;
  }
  if (mode == 1) {
    const std::string name = FuzzText(data + 1, size - 1);
    if (auto t = DataTypeByName(name)) {
      FUZZ_CHECK(static_cast<int>(*t) >= 0 && static_cast<int>(*t) < kNumDataTypes);
      FUZZ_CHECK(DataTypeByName(TypeName(*t)) == t);
      FUZZ_CHECK(name.find('\0') == std::string::npos);
    }
    return 0;
  }
  // Splits: n ranks (1..32), the buffer's total, then the entries; mode 3
  // splits evenly.
  if (size < 10) return 0;
  const size_t n = data[1] % 32 + 1;
  uint64_t total = 0;
  std::memcpy(&total, data + 2, 8);
  std::vector<int64_t> splits((size - 10) / 8);
  if (!splits.empty()) std::memcpy(splits.data(), data + 10, splits.size() * 8);
  StatusOr<std::vector<size_t>> c = SplitCounts(mode == 3 ? nullptr : &splits, total, n, "in_splits", "x");
  if (!c.ok()) {
    FUZZ_CHECK(c.status().code() == StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(c->size() == n);
  unsigned __int128 sum = 0;
  for (size_t i = 0; i < n; ++i) {
    FUZZ_CHECK((*c)[i] <= total);
    if (mode == 2) FUZZ_CHECK(static_cast<int64_t>((*c)[i]) == splits[i]);
    sum += (*c)[i];
  }
  FUZZ_CHECK(sum == total);
  return 0;
}
