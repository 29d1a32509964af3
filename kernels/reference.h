// Scalar reference implementations of the kernels, written independently of
// the SIMD code: the oracle for tests and for the benchmarks' #wrong column.
// Rounding to f16/bf16 is done by search over the format's ordered values
// (decode is exact), not by bit tricks, so it checks them independently.
// Header-only; not part of the public API.
#ifndef CIUIC_KERNELS_REFERENCE_H_
#define CIUIC_KERNELS_REFERENCE_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "ciuic/kernels.h"

namespace ciuic::kernels::ref {

inline double DecodeF16(uint16_t h) {
  const int sign = h >> 15;
  const int exp = (h >> 10) & 0x1F;
  const int man = h & 0x3FF;
  double v;
  if (exp == 0) {
    v = std::ldexp(man, -24);
  } else if (exp == 31) {
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else {
    v = std::ldexp(1024 + man, exp - 25);
  }
  return sign ? -v : v;
}

inline double DecodeBF16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Decode through a table built once (the tests and benchmarks round
// millions of values).
template <double (*Decode)(uint16_t)>
inline double DecodeFast(uint16_t v) {
  static const std::vector<double> table = [] {
    std::vector<double> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = Decode(static_cast<uint16_t>(i));
    return t;
  }();
  return table[v];
}

// Nearest value of a 16-bit float format to x, ties to even. `decode` maps
// bits to value; `inf_bits` is the encoding of +Inf (0x7C00 or 0x7F80).
template <double (*Decode)(uint16_t)>
inline uint16_t RoundTo16(double x, uint16_t inf_bits) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | static_cast<uint16_t>(inf_bits | (inf_bits == 0x7C00 ? 0x200 : 0x40));
  const double a = std::fabs(x);
  // Largest b in [0, inf_bits] with Decode(b) <= a (Decode is increasing).
  uint32_t lo = 0, hi = inf_bits;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (Decode(static_cast<uint16_t>(mid)) <= a) lo = mid; else hi = mid - 1;
  }
  const uint16_t b = static_cast<uint16_t>(lo);
  if (b == inf_bits || Decode(b) == a) return sign | b;
  const uint16_t up = static_cast<uint16_t>(b + 1);
  // The value "after" the largest finite one is one ulp above it: Inf
  // starts where that value's halfway point is.
  const double vup = up == inf_bits ? 2 * Decode(b) - Decode(static_cast<uint16_t>(b - 1))
                                    : Decode(up);
  const double dlo = a - Decode(b), dup = vup - a;
  if (dlo < dup) return sign | b;
  if (dup < dlo) return sign | up;
  return sign | ((b & 1) ? up : b);
}

inline uint16_t F32ToF16(float f) { return RoundTo16<DecodeFast<DecodeF16>>(f, 0x7C00); }
inline uint16_t F32ToBF16(float f) { return RoundTo16<DecodeFast<DecodeBF16>>(f, 0x7F80); }
inline float F16ToF32(uint16_t h) { return static_cast<float>(DecodeF16(h)); }
inline float BF16ToF32(uint16_t b) { return static_cast<float>(DecodeBF16(b)); }

// OCP 8-bit floats, decoded from the spec's formulas.
// e4m3: bias 7, no Inf, S.1111.111 is NaN, largest finite 448.
inline double DecodeE4M3(uint8_t b) {
  const int exp = (b >> 3) & 0xF;
  const int man = b & 7;
  double v;
  if (exp == 15 && man == 7) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(man, -9);
  } else {
    v = std::ldexp(8 + man, exp - 10);
  }
  return (b & 0x80) ? -v : v;
}
// e5m2: bias 15, Inf and NaN as in IEEE, largest finite 57344.
inline double DecodeE5M2(uint8_t b) {
  const int exp = (b >> 2) & 0x1F;
  const int man = b & 3;
  double v;
  if (exp == 31) {
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  } else if (exp == 0) {
    v = std::ldexp(man, -16);
  } else {
    v = std::ldexp(4 + man, exp - 17);
  }
  return (b & 0x80) ? -v : v;
}

// Nearest fp8 value to x, ties to even, by search over the positive codes
// 0..max_code (increasing values). e4m3 (saturating): |x| >= 448 and Inf
// give +-448. e5m2: from halfway past the largest finite value, Inf.
inline uint8_t RoundTo8(double x, bool e4m3) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  if (std::isnan(x)) return sign | (e4m3 ? 0x7F : 0x7E);
  auto dec = [e4m3](uint32_t c) { return e4m3 ? DecodeE4M3(static_cast<uint8_t>(c)) : DecodeE5M2(static_cast<uint8_t>(c)); };
  const uint32_t max_finite = e4m3 ? 0x7E : 0x7B;
  const double a = std::fabs(x);
  if (a >= dec(max_finite)) {
    if (e4m3 || a == dec(max_finite)) return sign | static_cast<uint8_t>(max_finite);
    const double over = 2 * dec(max_finite) - dec(max_finite - 1);  // one ulp past the largest
    return sign | static_cast<uint8_t>(a >= (dec(max_finite) + over) / 2 ? 0x7C : max_finite);
  }
  uint32_t lo = 0, hi = max_finite;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (dec(mid) <= a) lo = mid; else hi = mid - 1;
  }
  if (dec(lo) == a) return sign | static_cast<uint8_t>(lo);
  const double dlo = a - dec(lo), dup = dec(lo + 1) - a;
  if (dlo < dup) return sign | static_cast<uint8_t>(lo);
  if (dup < dlo) return sign | static_cast<uint8_t>(lo + 1);
  return sign | static_cast<uint8_t>((lo & 1) ? lo + 1 : lo);
}

inline uint8_t F32ToE4M3(float f) { return RoundTo8(f, true); }
inline uint8_t F32ToE5M2(float f) { return RoundTo8(f, false); }
inline float E4M3ToF32(uint8_t b) { return static_cast<float>(DecodeE4M3(b)); }
inline float E5M2ToF32(uint8_t b) { return static_cast<float>(DecodeE5M2(b)); }

// Any narrow float type (f16, bf16, e4m3, e5m2) from and to f32.
inline float NarrowToF32(DataType dt, uint32_t bits) {
  switch (dt) {
    case DataType::kFloat16: return F16ToF32(static_cast<uint16_t>(bits));
    case DataType::kBFloat16: return BF16ToF32(static_cast<uint16_t>(bits));
    case DataType::kFloat8E4M3: return E4M3ToF32(static_cast<uint8_t>(bits));
    default: return E5M2ToF32(static_cast<uint8_t>(bits));
  }
}
inline uint32_t F32ToNarrow(DataType dt, float f) {
  switch (dt) {
    case DataType::kFloat16: return F32ToF16(f);
    case DataType::kBFloat16: return F32ToBF16(f);
    case DataType::kFloat8E4M3: return F32ToE4M3(f);
    default: return F32ToE5M2(f);
  }
}

template <typename T>
inline T Load(const void* p, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(p) + i * sizeof(T), sizeof(T));
  return v;
}
template <typename T>
inline void Store(void* p, size_t i, T v) {
  std::memcpy(static_cast<char*>(p) + i * sizeof(T), &v, sizeof(T));
}

// a op b in the compute type C (integers: unsigned wrap for sum/prod).
template <typename C>
inline C Apply(ReduceOp op, C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg: case ReduceOp::kPremulSum: return a + b;
      case ReduceOp::kProd: return a * b;
      case ReduceOp::kMin: return std::isnan(a) || std::isnan(b) ? a + b : (a < b ? a : b);
      case ReduceOp::kMax: return std::isnan(a) || std::isnan(b) ? a + b : (a > b ? a : b);
      default: break;
    }
  } else {
    using U = std::make_unsigned_t<C>;
    switch (op) {
      case ReduceOp::kSum: case ReduceOp::kAvg:
        return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case ReduceOp::kProd:
        // Promote through unsigned int/long long so that 8-bit lanes do not
        // turn into signed int multiplication.
        return static_cast<C>(static_cast<U>(static_cast<unsigned long long>(static_cast<U>(a)) *
                                             static_cast<unsigned long long>(static_cast<U>(b))));
      case ReduceOp::kMin: return a < b ? a : b;
      case ReduceOp::kMax: return a > b ? a : b;
      case ReduceOp::kBand: return static_cast<C>(a & b);
      case ReduceOp::kBor: return static_cast<C>(a | b);
      case ReduceOp::kBxor: return static_cast<C>(a ^ b);
      default: break;
    }
  }
  return a;
}

// Storage type S computed as C; the left fold s0 op s1 op ... in order
// (premul_sum: each input times `factor` in C first).
template <typename S, typename C, C (*In)(S), S (*Out)(C)>
inline void ReduceT(void* dst, const void* const* srcs, int n, size_t count, ReduceOp op,
                    double factor) {
  const bool pre = op == ReduceOp::kPremulSum;
  auto in = [&](int k, size_t i) {
    const C v = In(Load<S>(srcs[k], i));
    if constexpr (std::is_floating_point_v<C>) {
      return pre ? static_cast<C>(static_cast<C>(factor) * v) : v;
    } else {
      return v;
    }
  };
  for (size_t i = 0; i < count; ++i) {
    C acc = in(0, i);
    for (int k = 1; k < n; ++k) acc = Apply<C>(op, acc, in(k, i));
    if (op == ReduceOp::kAvg) acc = static_cast<C>(acc / static_cast<C>(n));
    Store<S>(dst, i, Out(acc));
  }
}

template <typename T> inline T Id(T v) { return v; }
inline float H2F(uint16_t h) { return F16ToF32(h); }
inline uint16_t F2H(float f) { return F32ToF16(f); }
inline float B2F(uint16_t h) { return BF16ToF32(h); }
inline uint16_t F2B(float f) { return F32ToBF16(f); }
inline float E4F(uint8_t b) { return E4M3ToF32(b); }
inline uint8_t FE4(float f) { return F32ToE4M3(f); }
inline float E5F(uint8_t b) { return E5M2ToF32(b); }
inline uint8_t FE5(float f) { return F32ToE5M2(f); }

// dst = op over srcs, elementwise, the way the kernels define it. dst may
// alias srcs[k] exactly (each element is read before it is written).
// bool is reduced as bytes; sum is max (or) and prod is min (and).
inline void Reduce(void* dst, const void* const* srcs, int n, size_t count, DataType dt,
                   ReduceOp op, double factor = 1.0) {
  const ReduceOp o = op;
  const double f = factor;
  switch (dt) {
    case DataType::kInt8: ReduceT<int8_t, int8_t, Id, Id>(dst, srcs, n, count, o, f); break;
    case DataType::kUint8: ReduceT<uint8_t, uint8_t, Id, Id>(dst, srcs, n, count, o, f); break;
    case DataType::kInt16: ReduceT<int16_t, int16_t, Id, Id>(dst, srcs, n, count, o, f); break;
    case DataType::kUint16: ReduceT<uint16_t, uint16_t, Id, Id>(dst, srcs, n, count, o, f); break;
    case DataType::kInt32: ReduceT<int32_t, int32_t, Id, Id>(dst, srcs, n, count, o, f); break;
    case DataType::kUint32: ReduceT<uint32_t, uint32_t, Id, Id>(dst, srcs, n, count, o, f); break;
    case DataType::kInt64: ReduceT<int64_t, int64_t, Id, Id>(dst, srcs, n, count, o, f); break;
    case DataType::kUint64: ReduceT<uint64_t, uint64_t, Id, Id>(dst, srcs, n, count, o, f); break;
    case DataType::kBool: {
      const ReduceOp b = o == ReduceOp::kSum ? ReduceOp::kMax : o == ReduceOp::kProd ? ReduceOp::kMin : o;
      ReduceT<uint8_t, uint8_t, Id, Id>(dst, srcs, n, count, b, f);
      break;
    }
    case DataType::kFloat16: ReduceT<uint16_t, float, H2F, F2H>(dst, srcs, n, count, o, f); break;
    case DataType::kBFloat16: ReduceT<uint16_t, float, B2F, F2B>(dst, srcs, n, count, o, f); break;
    case DataType::kFloat32: ReduceT<float, float, Id, Id>(dst, srcs, n, count, o, f); break;
    case DataType::kFloat64: ReduceT<double, double, Id, Id>(dst, srcs, n, count, o, f); break;
    case DataType::kFloat8E4M3: ReduceT<uint8_t, float, E4F, FE4>(dst, srcs, n, count, o, f); break;
    case DataType::kFloat8E5M2: ReduceT<uint8_t, float, E5F, FE5>(dst, srcs, n, count, o, f); break;
  }
}

// Whether fp8 code b is a NaN.
inline bool IsNaN8(uint8_t b, bool e4m3) {
  return e4m3 ? (b & 0x7F) == 0x7F : (b & 0x7C) == 0x7C && (b & 3);
}

// Whether element i of a and b are equal for dtype: bitwise, except that any
// two NaNs are equal and, for min/max, +0 equals -0.
inline bool SameElement(const void* a, const void* b, size_t i, DataType dt) {
  auto isnan16 = [](uint16_t v, bool bf) {
    return bf ? ((v & 0x7F80) == 0x7F80 && (v & 0x7F)) : ((v & 0x7C00) == 0x7C00 && (v & 0x3FF));
  };
  switch (dt) {
    case DataType::kFloat32: {
      const float x = Load<float>(a, i), y = Load<float>(b, i);
      if (std::isnan(x) && std::isnan(y)) return true;
      return std::memcmp(&x, &y, 4) == 0 || (x == 0 && y == 0);
    }
    case DataType::kFloat64: {
      const double x = Load<double>(a, i), y = Load<double>(b, i);
      if (std::isnan(x) && std::isnan(y)) return true;
      return std::memcmp(&x, &y, 8) == 0 || (x == 0 && y == 0);
    }
    case DataType::kFloat16:
    case DataType::kBFloat16: {
      const bool bf = dt == DataType::kBFloat16;
      const uint16_t x = Load<uint16_t>(a, i), y = Load<uint16_t>(b, i);
      if (isnan16(x, bf) && isnan16(y, bf)) return true;
      return x == y || ((x & 0x7FFF) == 0 && (y & 0x7FFF) == 0);
    }
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2: {
      const bool e4 = dt == DataType::kFloat8E4M3;
      const uint8_t x = Load<uint8_t>(a, i), y = Load<uint8_t>(b, i);
      if (IsNaN8(x, e4) && IsNaN8(y, e4)) return true;
      return x == y || ((x & 0x7F) == 0 && (y & 0x7F) == 0);
    }
    default: {
      const size_t s = DataTypeSize(dt);
      return std::memcmp(static_cast<const char*>(a) + i * s, static_cast<const char*>(b) + i * s,
                         s) == 0;
    }
  }
}

}  // namespace ciuic::kernels::ref

#endif  // CIUIC_KERNELS_REFERENCE_H_
