// Bulk copies with vector loads and stores, once per SIMD target.
//
// Why not memcpy: glibc's memcpy switches to `rep movsb` above 2 KiB, which
// on some CPUs (AMD Zen among them) runs several times slower for some
// relative alignments of source and destination; which one a run gets
// depends on where malloc and mmap put the buffers. A plain vector loop has
// no such cliff.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/copy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"

#include <cstring>

#include "kernels/dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace ciuic::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whole blocks of four vectors from byte i (dst + i aligned) while they
// fit; returns where it stopped. kStream: non-temporal stores.
template <bool kStream, class D>
HWY_INLINE size_t CopyBlocks(D d, uint8_t* HWY_RESTRICT dst, const uint8_t* HWY_RESTRICT src, size_t i,
                             size_t bytes) {
  const size_t N = hn::Lanes(d);
  for (; i + 4 * N <= bytes; i += 4 * N) {
    const auto v0 = hn::LoadU(d, src + i);
    const auto v1 = hn::LoadU(d, src + i + N);
    const auto v2 = hn::LoadU(d, src + i + 2 * N);
    const auto v3 = hn::LoadU(d, src + i + 3 * N);
    if constexpr (kStream) {
      hn::Stream(v0, d, dst + i);
      hn::Stream(v1, d, dst + i + N);
      hn::Stream(v2, d, dst + i + 2 * N);
      hn::Stream(v3, d, dst + i + 3 * N);
    } else {
      hn::Store(v0, d, dst + i);
      hn::Store(v1, d, dst + i + N);
      hn::Store(v2, d, dst + i + 2 * N);
      hn::Store(v3, d, dst + i + 3 * N);
    }
  }
  return i;
}

// Copy of `bytes` between ranges that do not overlap.
// `nt`: non-temporal stores (the destination is not read again soon).
void CopyForward(void* dst_v, const void* src_v, size_t bytes, bool nt) {
  const hn::ScalableTag<uint8_t> d;
  const size_t N = hn::Lanes(d);
  auto* dst = static_cast<uint8_t*>(dst_v);
  const auto* src = static_cast<const uint8_t*>(src_v);
  if (bytes < 4 * N) {
    std::memmove(dst, src, bytes);
    return;
  }
  // One unaligned vector, then continue from the next aligned destination:
  // aligned stores (and Stream needs them).
  hn::StoreU(hn::LoadU(d, src), d, dst);
  size_t i = N - (reinterpret_cast<uintptr_t>(dst) & (N - 1));
  const bool stream = nt && HWY_TARGET != HWY_SCALAR;
  i = stream ? CopyBlocks<true>(d, dst, src, i, bytes) : CopyBlocks<false>(d, dst, src, i, bytes);
  for (; i + N <= bytes; i += N) hn::StoreU(hn::LoadU(d, src + i), d, dst + i);
  // The last (possibly partial) vector, re-copying a few bytes: the
  // ranges do not overlap (callers send overlaps to memmove).
  if (i < bytes) hn::StoreU(hn::LoadU(d, src + bytes - N), d, dst + bytes - N);
  if (stream) hwy::FlushStream();
}

}  // namespace ciuic::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace ciuic::kernels::internal {
const CopyFn kCopy[kNumSlots] = CIUIC_SLOT_TABLE(CopyForward);
}  // namespace ciuic::kernels::internal
#endif
