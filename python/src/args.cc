#include "python/src/args.h"

namespace ciuic::pyargs {

namespace {
// numpy's names, as Python users write them.
constexpr const char* kTypeNames[kNumDataTypes] = {
    "int8",    "uint8",   "int32", "uint32", "int64", "uint64",        "float16",    "bfloat16",
    "float32", "float64", "int16", "uint16", "bool",  "float8_e4m3fn", "float8_e5m2"};
}  // namespace

const char* const kTakes =
    "ciuic takes float32 float64 float16 bfloat16 float8_e4m3fn float8_e5m2 int8 uint8 int16 uint16 int32 uint32 "
    "int64 uint64 bool";

const char* TypeName(DataType t) { return kTypeNames[static_cast<int>(t)]; }

std::optional<DataType> DataTypeByName(const std::string& name) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto t = static_cast<DataType>(i);
    if (name == kTypeNames[i] || name == DataTypeName(t)) return t;
  }
  if (name == "bf16") return DataType::kBFloat16;
  if (name == "fp16" || name == "half") return DataType::kFloat16;
  if (name == "float" || name == "fp32") return DataType::kFloat32;
  if (name == "double" || name == "fp64") return DataType::kFloat64;
  if (name == "fp8_e4m3" || name == "float8_e4m3") return DataType::kFloat8E4M3;
  if (name == "fp8_e5m2") return DataType::kFloat8E5M2;
  return std::nullopt;
}

std::optional<DataType> FromFormat(const char* format, int64_t itemsize) {
  if (format == nullptr) return itemsize == 1 ? std::optional<DataType>(DataType::kUint8) : std::nullopt;
  const char* f = format;
  if (*f == '@' || *f == '=' || *f == '<') ++f;
  if (*f == '\0' || f[1] != '\0') return std::nullopt;
  std::optional<DataType> t;
  switch (*f) {
    case 'b': t = DataType::kInt8; break;
    case 'B': t = DataType::kUint8; break;
    case '?': t = DataType::kBool; break;
    case 'h': t = DataType::kInt16; break;
    case 'H': t = DataType::kUint16; break;
    case 'e': t = DataType::kFloat16; break;
    case 'f': t = DataType::kFloat32; break;
    case 'd': t = DataType::kFloat64; break;
    // C's int, long and long long: their width is the item size.
    case 'i': case 'l': case 'q':
      t = itemsize == 4 ? DataType::kInt32 : DataType::kInt64;
      break;
    case 'I': case 'L': case 'Q':
      t = itemsize == 4 ? DataType::kUint32 : DataType::kUint64;
      break;
    default: return std::nullopt;
  }
  if (static_cast<int64_t>(DataTypeSize(*t)) != itemsize) return std::nullopt;
  return t;
}

StatusOr<std::vector<size_t>> SplitCounts(const std::vector<int64_t>* given, uint64_t total, size_t n,
                                          const std::string& what, const std::string& buffer, const char* unit) {
  if (n == 0) return InvalidArgumentError(what + ": no ranks to split " + buffer + " over");
  if (given == nullptr) {
    if (total % n != 0) {
      return InvalidArgumentError(buffer + " has " + std::to_string(total) + " " + unit + ", not a multiple of world_size (" +
                                  std::to_string(n) + "); give " + what);
    }
    return std::vector<size_t>(n, static_cast<size_t>(total / n));
  }
  const std::vector<int64_t>& splits = *given;
  if (splits.size() != n) {
    return InvalidArgumentError(what + " has " + std::to_string(splits.size()) + " entries, expected world_size (" +
                                std::to_string(n) + ")");
  }
  std::vector<size_t> out(n);
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) {
    if (splits[i] < 0) return InvalidArgumentError(what + "[" + std::to_string(i) + "] is negative");
    const auto v = static_cast<uint64_t>(splits[i]);
    // Each entry against what is left, so the sum never wraps.
    if (v > total - sum) {
      return InvalidArgumentError(what + " sum to more than the " + std::to_string(total) + " " + unit + " of " + buffer +
                                  " (at entry " + std::to_string(i) + ")");
    }
    sum += v;
    out[i] = static_cast<size_t>(v);
  }
  if (sum != total) {
    return InvalidArgumentError(what + " sum to " + std::to_string(sum) + ", " + buffer + " has " +
                                std::to_string(total) + " " + unit);
  }
  return out;
}

}  // namespace ciuic::pyargs
