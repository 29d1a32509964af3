// Reducer::Copy and CopyBytes: every size around the vector widths, every
// source/destination misalignment, overlapping ranges both ways, and
// non-temporal stores, on every SIMD target this CPU runs; guard bytes
// around the destination catch any write outside it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "ciuic/kernels.h"
#include "test_util.h"

namespace ciuic::kernels {
namespace {

using testing::MakeReducer;
using testing::RunnableTargets;

constexpr size_t kGuard = 128;
constexpr uint8_t kGuardByte = 0xA5;

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return v;
}

// Copies `bytes` from a source at `soff` to a destination at `doff` (both
// within 64-byte-aligned allocations) with `copy` and checks every byte,
// including the guards. Returns a failure description or "".
template <class CopyFn>
std::string CheckOne(CopyFn copy, size_t bytes, size_t soff, size_t doff) {
  std::vector<uint8_t> src_store(bytes + 2 * kGuard + 64);
  std::vector<uint8_t> dst_store(bytes + 2 * kGuard + 64, kGuardByte);
  const std::vector<uint8_t> data = Pattern(bytes, static_cast<uint32_t>(bytes + soff * 7 + doff));
  uint8_t* src = src_store.data() + kGuard + soff;
  uint8_t* dst = dst_store.data() + kGuard + doff;
  if (bytes > 0) std::memcpy(src, data.data(), bytes);
  copy(dst, src, bytes);
  for (size_t i = 0; i < bytes; ++i) {
    if (dst[i] != data[i]) return "byte " + std::to_string(i) + " wrong";
  }
  for (size_t i = 0; i < kGuard + doff; ++i) {
    if (dst_store[i] != kGuardByte) return "wrote before the destination";
  }
  for (size_t i = kGuard + doff + bytes; i < dst_store.size(); ++i) {
    if (dst_store[i] != kGuardByte) return "wrote after the destination";
  }
  if (bytes > 0 && std::memcmp(src, data.data(), bytes) != 0) return "source modified";
  return "";
}

const size_t kSizes[] = {0, 1, 7, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129, 255, 256, 257,
                         1000, 4095, 4096, 4097, 65536 + 13, (1u << 20) + 3};

TEST(CopyTest, EverySizeAndAlignmentOnEveryTarget) {
  for (const std::string& target : RunnableTargets()) {
    for (int64_t nt : {int64_t{0}, int64_t{1}}) {  // 0: never non-temporal; 1: always
      const Reducer r = MakeReducer(target, nt);
      auto copy = [&](void* d, const void* s, size_t n) { r.Copy(d, s, n); };
      for (size_t bytes : kSizes) {
        for (size_t soff : {0, 1, 3, 32, 63}) {
          for (size_t doff : {0, 1, 5, 32, 60}) {
            const std::string err = CheckOne(copy, bytes, soff, doff);
            ASSERT_EQ(err, "") << target << " nt=" << nt << " bytes=" << bytes << " src+" << soff
                               << " dst+" << doff;
          }
        }
      }
    }
  }
}

TEST(CopyTest, CopyBytesUsesTheBestTarget) {
  for (bool streaming : {false, true}) {
    auto copy = [&](void* d, const void* s, size_t n) { CopyBytes(d, s, n, streaming); };
    for (size_t bytes : kSizes) {
      for (size_t off : {0, 3, 33}) {
        ASSERT_EQ(CheckOne(copy, bytes, off, (off * 5) % 64), "")
            << "bytes=" << bytes << " off=" << off << " streaming=" << streaming;
      }
    }
  }
}

// Overlapping ranges behave like memmove, in both directions and by any
// distance (an in-place step can hand the kernel such a pair).
TEST(CopyTest, OverlapsBehaveLikeMemmove) {
  const Reducer r = MakeReducer("auto");
  for (size_t bytes : {size_t{100}, size_t{5000}, size_t{1} << 16}) {
    for (ptrdiff_t shift : {-4097, -64, -1, 0, 1, 63, 4096}) {
      const std::vector<uint8_t> data = Pattern(bytes + 8400, static_cast<uint32_t>(bytes));
      std::vector<uint8_t> a = data, b = data;
      const size_t base = 4200;
      const size_t n = bytes;
      r.Copy(a.data() + base + shift, a.data() + base, n);
      std::memmove(b.data() + base + shift, b.data() + base, n);
      ASSERT_EQ(a, b) << "bytes=" << n << " shift=" << shift;
      std::vector<uint8_t> c = data, e = data;
      CopyBytes(c.data() + base + shift, c.data() + base, n);
      std::memmove(e.data() + base + shift, e.data() + base, n);
      ASSERT_EQ(c, e) << "CopyBytes bytes=" << n << " shift=" << shift;
    }
  }
}

}  // namespace
}  // namespace ciuic::kernels
