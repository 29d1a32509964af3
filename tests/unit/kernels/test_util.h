// Shared helpers for the kernel tests: deterministic data and a Reducer per
// compiled SIMD target.
#ifndef CIUIC_TESTS_UNIT_KERNELS_TEST_UTIL_H_
#define CIUIC_TESTS_UNIT_KERNELS_TEST_UTIL_H_

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <cstdlib>

#include "ciuic/kernels.h"
#include "kernels/reference.h"

namespace ciuic::kernels::testing {

// Names of the compiled targets this CPU can run (each test runs on all).
inline std::vector<std::string> RunnableTargets() {
  std::vector<std::string> out;
  for (const TargetInfo& t : CompiledTargets()) {
    if (t.supported) out.push_back(t.name);
  }
  return out;
}

inline Reducer MakeReducer(const std::string& target, int64_t nt_threshold = -1,
                           size_t tile = 0, size_t prefetch = 1024) {
  Config c;
  c.simd_target = target;
  c.kernel_nt_threshold = nt_threshold;
  c.kernel_tile_bytes = tile;
  c.kernel_prefetch_bytes = prefetch;
  StatusOr<Reducer> r = Reducer::Create(c, CacheSizes{});
  if (!r.ok()) std::abort();
  return *r;
}

// Fills `bytes` with values suited to dtype and op: small integers for
// float products (so they stay finite), anything for integers.
inline void Fill(void* p, size_t count, DataType dt, ReduceOp op, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> small(-4, 4);
  std::uniform_real_distribution<double> unit(-2.0, 2.0);
  const bool prod = op == ReduceOp::kProd;
  for (size_t i = 0; i < count; ++i) {
    double v = prod ? (small(rng) == 0 ? 1.0 : unit(rng) * 0.75 + 0.5) : unit(rng) * 100.0;
    if (!prod && (i % 7 == 3)) v = std::ldexp(unit(rng), -20);  // tiny values / subnormal halves
    switch (dt) {
      case DataType::kFloat32: { float f = static_cast<float>(v); std::memcpy(static_cast<float*>(p) + i, &f, 4); break; }
      case DataType::kFloat64: std::memcpy(static_cast<double*>(p) + i, &v, 8); break;
      case DataType::kFloat16:
      case DataType::kBFloat16: {
        const uint16_t h = dt == DataType::kFloat16 ? ref::F32ToF16(static_cast<float>(v))
                                                    : ref::F32ToBF16(static_cast<float>(v));
        std::memcpy(static_cast<uint16_t*>(p) + i, &h, 2);
        break;
      }
      case DataType::kFloat8E4M3:
      case DataType::kFloat8E5M2: {
        // Within e4m3's range (448), tiny values becoming subnormals.
        const float f = static_cast<float>(prod ? v : v * 2.0);
        static_cast<uint8_t*>(p)[i] = dt == DataType::kFloat8E4M3 ? ref::F32ToE4M3(f) : ref::F32ToE5M2(f);
        break;
      }
      case DataType::kBool: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(rng() & 1); break;
      default: {
        const uint64_t r = rng();
        std::memcpy(static_cast<char*>(p) + i * DataTypeSize(dt), &r, DataTypeSize(dt));
      }
    }
  }
}

}  // namespace ciuic::kernels::testing

#endif  // CIUIC_TESTS_UNIT_KERNELS_TEST_UTIL_H_
