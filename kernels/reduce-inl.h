// Per-target reduction and conversion kernels (Highway). Included once per
// SIMD target by the kernel translation units (foreach_target.h); no include
// guard of the usual kind (Highway's per-target toggle idiom instead).
//
// Shape of a reduction (see DESIGN.md, kernels/):
//  - nsrcs <= 4: one streaming pass; each input vector is loaded once, the
//    sources are combined in registers, the result is stored once (regular or
//    non-temporal store). f16/bf16 are promoted to f32, combined in f32 and
//    rounded once (round-to-nearest-even) when stored.
//  - nsrcs > 4: the output is produced in L1-sized tiles. For each tile the
//    first four sources are combined into an f32/T scratch tile that stays in
//    L1, further groups of four are folded into it, and the last group writes
//    the output. Every input byte still crosses the memory bus once; only the
//    small tile is re-read, from L1.
//  - software prefetch ahead of every input stream when the working set is
//    larger than L2 (hardware prefetchers cover the smaller cases).
//  - tails shorter than a vector go through a stack buffer, so the same vector
//    code (and the same rounding) handles every element.
#if defined(CIUIC_KERNELS_REDUCE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CIUIC_KERNELS_REDUCE_INL_H_
#undef CIUIC_KERNELS_REDUCE_INL_H_
#else
#define CIUIC_KERNELS_REDUCE_INL_H_
#endif

#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/dispatch.h"

HWY_BEFORE_NAMESPACE();
namespace ciuic::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using internal::ReduceArgs;

// ---------------------------------------------------------------- rounding

// f32 -> bf16, round to nearest even: add 0x7FFF plus the lowest kept bit,
// then keep the top half. NaN keeps sign and payload and is made quiet.
// (Highway 1.0.3's DemoteTo truncates, hence our own.)
template <class DF>
HWY_INLINE hn::Vec<hn::Rebind<hwy::bfloat16_t, DF>> DemoteBF16(DF df, hn::Vec<DF> v) {
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> du16;
  const hn::Rebind<hwy::bfloat16_t, DF> dbf;
  const auto bits = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb));
  const auto quiet = hn::Or(bits, hn::Set(du, 0x00400000u));
  const auto r = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet, rounded);
  (void)df;
  return hn::BitCast(dbf, hn::DemoteTo(du16, hn::BitCast(di, hn::ShiftRight<16>(r))));
}

// f32 -> f16, round to nearest even, in integer arithmetic, for targets
// without F16C. Three cases on the magnitude a:
//  a >= 65536 (or Inf/NaN): Inf, or a quiet NaN;
//  a <  2^-14 (f16 subnormal or zero): add 0.5f so that the FPU rounds the
//     value to a multiple of 2^-24 (the f16 subnormal step) and read the
//     mantissa bits;
//  otherwise: rebias the exponent, add 0xFFF plus the lowest kept bit, and
//     shift; a carry out of the mantissa correctly bumps the exponent (and
//     65520..65535 become Inf).
template <class DF>
HWY_INLINE hn::Vec<hn::Rebind<hwy::float16_t, DF>> DemoteF16Soft(DF df, hn::Vec<DF> v) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> du16;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const auto bits = hn::BitCast(di, v);
  const auto sign_mask = hn::Set(di, static_cast<int32_t>(0x80000000u));
  const auto a = hn::AndNot(sign_mask, bits);
  const auto is_large = hn::Gt(a, hn::Set(di, 0x477FFFFF));
  const auto large = hn::IfThenElse(hn::Gt(a, hn::Set(di, 0x7F800000)), hn::Set(di, 0x7E00),
                                    hn::Set(di, 0x7C00));
  const auto is_small = hn::Lt(a, hn::Set(di, 0x38800000));
  const auto half = hn::Set(di, 0x3F000000);  // 0.5f
  const auto small =
      hn::Sub(hn::BitCast(di, hn::Add(hn::BitCast(df, a), hn::BitCast(df, half))), half);
  const auto odd = hn::And(hn::ShiftRight<13>(a), hn::Set(di, 1));
  // -112 << 23 rebiases the exponent (127 -> 15); 0xFFF + odd rounds.
  const auto normal = hn::ShiftRight<13>(
      hn::Add(hn::Add(a, hn::Set(di, static_cast<int32_t>(0xC8000FFFu))), odd));
  auto r = hn::IfThenElse(is_small, small, normal);
  r = hn::IfThenElse(is_large, large, r);
  r = hn::Or(r, hn::And(hn::ShiftRight<16>(bits), hn::Set(di, 0x8000)));
  return hn::BitCast(dh, hn::DemoteTo(du16, r));
}

// f16 -> f32 for targets without F16C (Highway 1.0.3's emulation turns
// Inf/NaN into finite numbers). Exact: normals rebias the exponent, Inf/NaN
// keep their payload, subnormals are m * 2^-24 computed in f32 (exact).
template <class DF>
HWY_INLINE hn::Vec<DF> PromoteF16Soft(DF df, hn::Vec<hn::Rebind<hwy::float16_t, DF>> h) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<uint16_t, DF> du16;
  const hn::RebindToUnsigned<DF> du;
  const auto x = hn::BitCast(di, hn::PromoteTo(du, hn::BitCast(du16, h)));
  const auto sign = hn::ShiftLeft<16>(hn::And(x, hn::Set(di, 0x8000)));
  const auto e = hn::And(hn::ShiftRight<10>(x), hn::Set(di, 0x1F));
  const auto m = hn::And(x, hn::Set(di, 0x3FF));
  const auto normal = hn::Or(hn::ShiftLeft<23>(hn::Add(e, hn::Set(di, 112))), hn::ShiftLeft<13>(m));
  const auto special = hn::Or(hn::Set(di, 0x7F800000), hn::ShiftLeft<13>(m));
  const auto sub = hn::BitCast(di, hn::Mul(hn::ConvertTo(df, m), hn::Set(df, 5.9604644775390625e-8f)));
  auto r = hn::IfThenElse(hn::Eq(e, hn::Set(di, 31)), special, normal);
  r = hn::IfThenElse(hn::Eq(e, hn::Zero(di)), sub, r);
  return hn::BitCast(df, hn::Or(r, sign));
}

template <class DF>
HWY_INLINE hn::Vec<DF> PromoteF16(DF df, hn::Vec<hn::Rebind<hwy::float16_t, DF>> h) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return hn::PromoteTo(df, h);  // F16C: exact
#else
  return PromoteF16Soft(df, h);
#endif
}

template <class DF>
HWY_INLINE hn::Vec<DF> PromoteHalf(DF df, hn::Vec<hn::Rebind<hwy::float16_t, DF>> h) {
  return PromoteF16(df, h);
}
template <class DF>
HWY_INLINE hn::Vec<DF> PromoteHalf(DF df, hn::Vec<hn::Rebind<hwy::bfloat16_t, DF>> h) {
  return hn::PromoteTo(df, h);  // exact everywhere: a shift
}

template <class DF>
HWY_INLINE hn::Vec<hn::Rebind<hwy::float16_t, DF>> DemoteF16(DF df, hn::Vec<DF> v) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  (void)df;
  return hn::DemoteTo(hn::Rebind<hwy::float16_t, DF>(), v);  // F16C: RNE
#else
  return DemoteF16Soft(df, v);
#endif
}

// ---------------------------------------------------------------- fp8 (OCP)

// e4m3 -> f32, exact: normals move the 4+3 bits under f32's exponent and
// rebias (7 -> 127); subnormals are m * 2^-9 in f32; S.1111.111 is NaN.
template <class DF>
HWY_INLINE hn::Vec<DF> PromoteE4M3(DF df, hn::Vec<hn::Rebind<uint8_t, DF>> b) {
  const hn::RebindToSigned<DF> di;
  const hn::RebindToUnsigned<DF> du;
  const auto x = hn::BitCast(di, hn::PromoteTo(du, b));
  const auto sign = hn::ShiftLeft<24>(hn::And(x, hn::Set(di, 0x80)));
  const auto mag = hn::And(x, hn::Set(di, 0x7F));
  const auto normal = hn::Add(hn::ShiftLeft<20>(mag), hn::Set(di, 120 << 23));
  const auto sub = hn::BitCast(
      di, hn::Mul(hn::ConvertTo(df, hn::And(x, hn::Set(di, 7))), hn::Set(df, 1.0f / 512)));
  auto r = hn::IfThenElse(hn::Lt(mag, hn::Set(di, 8)), sub, normal);
  r = hn::IfThenElse(hn::Eq(mag, hn::Set(di, 0x7F)), hn::Set(di, 0x7FC00000), r);
  return hn::BitCast(df, hn::Or(r, sign));
}

// e5m2 -> f32, exact: e5m2 is the high byte of an f16.
template <class DF>
HWY_INLINE hn::Vec<DF> PromoteE5M2(DF df, hn::Vec<hn::Rebind<uint8_t, DF>> b) {
  const hn::Rebind<uint16_t, DF> du16;
  const auto h = hn::ShiftLeft<8>(hn::PromoteTo(du16, b));
  return PromoteF16(df, hn::BitCast(hn::Rebind<hwy::float16_t, DF>(), h));
}

// f32 -> e4m3, round to nearest even, saturating: |v| is clamped to 448
// (the largest finite value; Inf too, e4m3 has none), NaN gives NaN. Below
// 2^-6 (subnormal) adding 2^14 makes the FPU round |v| to a multiple of
// 2^-9 (the subnormal step) and the low bits are the code; otherwise the
// exponent is rebiased (127 -> 7), 0x7FFFF plus the lowest kept bit added
// and 20 bits dropped (a carry correctly bumps the exponent).
template <class DF>
HWY_INLINE hn::Vec<hn::Rebind<uint8_t, DF>> DemoteE4M3(DF df, hn::Vec<DF> v) {
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(di, v);
  const auto sign = hn::And(hn::ShiftRight<24>(bits), hn::Set(di, 0x80));
  const auto absf = hn::Min(hn::Abs(v), hn::Set(df, 448.0f));
  const auto a = hn::BitCast(di, absf);
  const auto small = hn::Sub(hn::BitCast(di, hn::Add(absf, hn::Set(df, 16384.0f))),
                             hn::Set(di, 0x46800000));
  const auto odd = hn::And(hn::ShiftRight<20>(a), hn::Set(di, 1));
  const auto normal = hn::ShiftRight<20>(
      hn::Add(hn::Add(a, hn::Set(di, static_cast<int32_t>(0xC407FFFFu))), odd));
  auto r = hn::IfThenElse(hn::Lt(a, hn::Set(di, 0x3C800000)), small, normal);
  r = hn::IfThenElse(hn::RebindMask(di, hn::IsNaN(v)), hn::Set(di, 0x7F), r);
  return hn::DemoteTo(hn::Rebind<uint8_t, DF>(), hn::Or(r, sign));
}

// f32 -> e5m2, round to nearest even, IEEE-like: from 61440 (halfway past
// the largest finite, 57344) Inf, NaN stays NaN (quiet). Same steps as
// DemoteE4M3 with the subnormal step 2^-16 (add 2^7) and 21 bits dropped.
template <class DF>
HWY_INLINE hn::Vec<hn::Rebind<uint8_t, DF>> DemoteE5M2(DF df, hn::Vec<DF> v) {
  const hn::RebindToSigned<DF> di;
  const auto bits = hn::BitCast(di, v);
  const auto sign = hn::And(hn::ShiftRight<24>(bits), hn::Set(di, 0x80));
  const auto a = hn::AndNot(hn::Set(di, static_cast<int32_t>(0x80000000u)), bits);
  const auto small = hn::Sub(hn::BitCast(di, hn::Add(hn::BitCast(df, a), hn::Set(df, 128.0f))),
                             hn::Set(di, 0x43000000));
  const auto odd = hn::And(hn::ShiftRight<21>(a), hn::Set(di, 1));
  const auto normal = hn::ShiftRight<21>(
      hn::Add(hn::Add(a, hn::Set(di, static_cast<int32_t>(0xC80FFFFFu))), odd));
  auto r = hn::IfThenElse(hn::Lt(a, hn::Set(di, 0x38800000)), small, normal);
  r = hn::IfThenElse(hn::Gt(a, hn::Set(di, 0x477FFFFF)), hn::Set(di, 0x7C), r);
  r = hn::IfThenElse(hn::Gt(a, hn::Set(di, 0x7F800000)), hn::Set(di, 0x7E), r);
  return hn::DemoteTo(hn::Rebind<uint8_t, DF>(), hn::Or(r, sign));
}

// --------------------------------------------------------------------- I/O

// How a storage type is loaded into compute vectors and stored back.
template <typename T>
struct PlainIO {
  using TS = T;
  using TC = T;
  using D = hn::ScalableTag<T>;
  static constexpr bool kCanStream = true;
  static constexpr bool kHasPair = false;
  static HWY_INLINE hn::Vec<D> Load(D d, const T* HWY_RESTRICT p) { return hn::LoadU(d, p); }
  static HWY_INLINE void Store(D d, hn::Vec<D> v, T* p) { hn::StoreU(v, d, p); }
  static HWY_INLINE void Stream(D d, hn::Vec<D> v, T* p) { hn::Stream(v, d, p); }
};

// f16/bf16 stored, f32 computed; rounded once on the way out.
template <typename H>
struct HalfIO {
  using TS = H;
  using TC = float;
  using D = hn::ScalableTag<float>;
  using DH = hn::Rebind<H, D>;
  // Highway's x86 Stream writes a whole 16-byte register: only safe when the
  // half vector fills one.
  static constexpr bool kCanStream = HWY_TARGET != HWY_SCALAR && hn::MaxLanes(DH()) * sizeof(H) >= 16;
  static HWY_INLINE hn::Vec<DH> Demote(D d, hn::Vec<D> v) {
    if constexpr (std::is_same_v<H, hwy::bfloat16_t>) {
      return DemoteBF16(d, v);
    } else {
      return DemoteF16(d, v);
    }
  }
  static HWY_INLINE hn::Vec<D> Load(D d, const H* HWY_RESTRICT p) {
    return PromoteHalf(d, hn::LoadU(DH(), p));
  }
  static HWY_INLINE void Store(D d, hn::Vec<D> v, H* p) { hn::StoreU(Demote(d, v), DH(), p); }

  // bf16: two f32 vectors become one full vector of bf16 with a single
  // ConcatOdd of the rounded words (their high halves are the odd u16 lanes)
  // instead of two narrowing packs. f16 uses F16C / the soft path per vector.
#if HWY_TARGET == HWY_SCALAR
  static constexpr bool kHasPair = false;
  template <class V> static void StorePair(D, V, V, H*) {}
  template <class V> static void StreamPair(D, V, V, H*) {}
#else
  static constexpr bool kHasPair = std::is_same_v<H, hwy::bfloat16_t>;
  static HWY_INLINE hn::Vec<hn::Repartition<uint16_t, D>> RoundPair(D d, hn::Vec<D> v0,
                                                                   hn::Vec<D> v1) {
    const hn::RebindToUnsigned<D> du;
    const hn::Repartition<uint16_t, D> dw;
    auto round = [&](hn::Vec<D> v) HWY_ATTR {
      const auto bits = hn::BitCast(du, v);
      const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
      const auto rounded = hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb));
      return hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)),
                            hn::Or(bits, hn::Set(du, 0x00400000u)), rounded);
    };
    (void)d;
    return hn::ConcatOdd(dw, hn::BitCast(dw, round(v1)), hn::BitCast(dw, round(v0)));
  }
  static HWY_INLINE void StorePair(D d, hn::Vec<D> v0, hn::Vec<D> v1, H* p) {
    const hn::Repartition<uint16_t, D> dw;
    hn::StoreU(RoundPair(d, v0, v1), dw, reinterpret_cast<uint16_t*>(p));
  }
  static HWY_INLINE void StreamPair(D d, hn::Vec<D> v0, hn::Vec<D> v1, H* p) {
    const hn::Repartition<uint16_t, D> dw;
    hn::Stream(RoundPair(d, v0, v1), dw, reinterpret_cast<uint16_t*>(p));
  }
#endif
  static HWY_INLINE void Stream(D d, hn::Vec<D> v, H* p) {
    if constexpr (kCanStream) {
      hn::Stream(Demote(d, v), DH(), p);
    } else {
      Store(d, v, p);
    }
  }
};

// fp8 stored, f32 computed; rounded once on the way out.
template <bool kE4M3>
struct Fp8IO {
  using TS = uint8_t;
  using TC = float;
  using D = hn::ScalableTag<float>;
  using D8 = hn::Rebind<uint8_t, D>;
  // Stream writes a whole 16-byte register: only where a quarter vector is one.
  static constexpr bool kCanStream = HWY_TARGET != HWY_SCALAR && hn::MaxLanes(D8()) >= 16;
  static constexpr bool kHasPair = false;
  static HWY_INLINE hn::Vec<D8> Demote(D d, hn::Vec<D> v) {
    if constexpr (kE4M3) {
      return DemoteE4M3(d, v);
    } else {
      return DemoteE5M2(d, v);
    }
  }
  static HWY_INLINE hn::Vec<D> Load(D d, const uint8_t* HWY_RESTRICT p) {
    if constexpr (kE4M3) {
      return PromoteE4M3(d, hn::LoadU(D8(), p));
    } else {
      return PromoteE5M2(d, hn::LoadU(D8(), p));
    }
  }
  static HWY_INLINE void Store(D d, hn::Vec<D> v, uint8_t* p) { hn::StoreU(Demote(d, v), D8(), p); }
  static HWY_INLINE void Stream(D d, hn::Vec<D> v, uint8_t* p) {
    if constexpr (kCanStream) {
      hn::Stream(Demote(d, v), D8(), p);
    } else {
      Store(d, v, p);
    }
  }
};

// --------------------------------------------------------------------- ops

// Wrapping multiply; 8-bit lanes have no multiply instruction, so the even
// and odd bytes are multiplied in 16-bit lanes (the low byte of a 16-bit
// product only depends on the low bytes of its factors).
template <class D, class V>
HWY_INLINE V MulWrap(D d, V a, V b) {
  using T = hn::TFromD<D>;
  if constexpr (sizeof(T) == 1) {
#if HWY_TARGET == HWY_SCALAR
    const uint32_t p = static_cast<uint32_t>(static_cast<uint8_t>(hn::GetLane(a))) *
                       static_cast<uint32_t>(static_cast<uint8_t>(hn::GetLane(b)));
    return hn::Set(d, static_cast<T>(static_cast<uint8_t>(p)));
#else
    const hn::Repartition<uint16_t, D> d16;
    const auto a16 = hn::BitCast(d16, a);
    const auto b16 = hn::BitCast(d16, b);
    const auto lo = hn::And(hn::Mul(a16, b16), hn::Set(d16, 0x00FF));
    const auto hi = hn::Mul(hn::ShiftRight<8>(a16), hn::And(b16, hn::Set(d16, 0xFF00)));
    return hn::BitCast(d, hn::Or(lo, hi));
#endif
  } else {
    (void)d;
    return hn::Mul(a, b);
  }
}

// kDivide: AVG's division by n on the way out. kPre: each source is
// multiplied by the call's factor as it is loaded (premul_sum).
struct OpSum {
  static constexpr bool kDivide = false;
  static constexpr bool kPre = false;
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) { return hn::Add(a, b); }
};
// The derived ops hide their parent's flag on purpose: that is the trait.
struct OpAvg : OpSum {  // floats: sum, then one division by n on the way out
  static constexpr bool kDivide = true;  // cppcheck-suppress duplInheritedMember
};
struct OpPremulSum : OpSum {
  static constexpr bool kPre = true;  // cppcheck-suppress duplInheritedMember
};
struct OpBand {
  static constexpr bool kDivide = false;
  static constexpr bool kPre = false;
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) { return hn::And(a, b); }
};
struct OpBor {
  static constexpr bool kDivide = false;
  static constexpr bool kPre = false;
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) { return hn::Or(a, b); }
};
struct OpBxor {
  static constexpr bool kDivide = false;
  static constexpr bool kPre = false;
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) { return hn::Xor(a, b); }
};
struct OpProd {
  static constexpr bool kDivide = false;
  static constexpr bool kPre = false;
  template <class D, class V>
  static HWY_INLINE V Apply(D d, V a, V b) { return MulWrap(d, a, b); }
};
// IEEE-style min/max that propagate NaN (x86 min/max return the second
// operand when either is NaN; a + b is NaN exactly then).
struct OpMin {
  static constexpr bool kDivide = false;
  static constexpr bool kPre = false;
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) {
    if constexpr (hwy::IsFloat<hn::TFromD<D>>()) {
      return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Add(a, b), hn::Min(a, b));
    } else {
      return hn::Min(a, b);
    }
  }
};
struct OpMax {
  static constexpr bool kDivide = false;
  static constexpr bool kPre = false;
  template <class D, class V>
  static HWY_INLINE V Apply(D, V a, V b) {
    if constexpr (hwy::IsFloat<hn::TFromD<D>>()) {
      return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), hn::Add(a, b), hn::Max(a, b));
    } else {
      return hn::Max(a, b);
    }
  }
};

// ------------------------------------------------------------------ kernel

template <class IO, class Op>
struct Kernel {
  using TS = typename IO::TS;
  using TC = typename IO::TC;
  using D = typename IO::D;
  using V = hn::Vec<D>;
  static constexpr size_t kMaxN = HWY_MAX_BYTES / sizeof(TC);  // >= Lanes(D)
  static constexpr size_t kMaxTileBytes = 64 * 1024;

  // Source element i of p (times the factor for premul_sum).
  static HWY_INLINE V Src(D d, const TS* p, size_t i, V scale) {
    if constexpr (Op::kPre) {
      return hn::Mul(IO::Load(d, p + i), scale);
    } else {
      (void)scale;
      return IO::Load(d, p + i);
    }
  }

  // acc (if kAcc) combined with sources s[0..K) at element i.
  template <int K, bool kAcc>
  static HWY_INLINE V Combine(D d, const TS* const* s, const TC* acc, size_t i, V scale) {
    V v;
    if constexpr (kAcc) {
      v = hn::LoadU(d, acc + i);
      v = Op::Apply(d, v, Src(d, s[0], i, scale));
    } else {
      v = Src(d, s[0], i, scale);
    }
    if constexpr (K > 1) v = Op::Apply(d, v, Src(d, s[1], i, scale));
    if constexpr (K > 2) v = Op::Apply(d, v, Src(d, s[2], i, scale));
    if constexpr (K > 3) v = Op::Apply(d, v, Src(d, s[3], i, scale));
    return v;
  }

  // Output into the L1 scratch tile (aligned, padded by a vector).
  struct ScratchOut {
    TC* p;
    HWY_INLINE void Put(D d, V v, size_t i) { hn::Store(v, d, p + i); }
    HWY_INLINE void Put2(D d, V v0, V v1, size_t i) {
      hn::Store(v0, d, p + i);
      hn::Store(v1, d, p + i + hn::Lanes(d));
    }
    HWY_INLINE void PutTail(D d, V v, size_t i, size_t) { hn::Store(v, d, p + i); }
  };

  // Output into dst; AVG divides by n here, once, before rounding.
  template <bool kNT>
  struct DstOut {
    TS* p;
    TC divisor;
    HWY_INLINE V Finish(D d, V v) {
      if constexpr (Op::kDivide && hwy::IsFloat<TC>()) {
        return hn::Div(v, hn::Set(d, divisor));
      } else {
        (void)d;
        return v;
      }
    }
    HWY_INLINE void Put(D d, V v, size_t i) {
      if constexpr (kNT) {
        IO::Stream(d, Finish(d, v), p + i);
      } else {
        IO::Store(d, Finish(d, v), p + i);
      }
    }
    // Two consecutive vectors at i and i + Lanes(d).
    HWY_INLINE void Put2(D d, V v0, V v1, size_t i) {
      if constexpr (IO::kHasPair) {
        if constexpr (kNT) {
          IO::StreamPair(d, Finish(d, v0), Finish(d, v1), p + i);
        } else {
          IO::StorePair(d, Finish(d, v0), Finish(d, v1), p + i);
        }
      } else {
        Put(d, v0, i);
        Put(d, v1, i + hn::Lanes(d));
      }
    }
    HWY_INLINE void PutTail(D d, V v, size_t i, size_t rem) {
      HWY_ALIGN TS tmp[kMaxN];
      IO::Store(d, Finish(d, v), tmp);
      std::memcpy(p + i, tmp, rem * sizeof(TS));
    }
  };

  // out <- (acc op) s[0] op ... op s[K-1] over elements [0, n).
  template <int K, bool kAcc, class Out>
  static HWY_NOINLINE void Group(const void* const* s_in, size_t off, const TC* acc, size_t n,
                                 size_t pf, TC factor, Out& out_in) {
    const D d;
    const size_t N = hn::Lanes(d);
    const V scale = hn::Set(d, factor);
    // Vector stores are may_alias: keep the pointers in locals so that they
    // stay in registers instead of being reloaded after every store.
    const TS* s[K];
    for (int k = 0; k < K; ++k) s[k] = static_cast<const TS*>(s_in[k]) + off;
    Out out = out_in;
    size_t i = 0;
    if (pf != 0) {
      const bool two_lines = N * sizeof(TS) >= 64;
      for (; i + 2 * N <= n; i += 2 * N) {
        for (int k = 0; k < K; ++k) {
          hwy::Prefetch(s[k] + i + pf);
          if (two_lines) hwy::Prefetch(s[k] + i + pf + N);
        }
        const V a0 = Combine<K, kAcc>(d, s, acc, i, scale);
        const V a1 = Combine<K, kAcc>(d, s, acc, i + N, scale);
        out.Put2(d, a0, a1, i);
      }
    } else {
      for (; i + 2 * N <= n; i += 2 * N) {
        const V a0 = Combine<K, kAcc>(d, s, acc, i, scale);
        const V a1 = Combine<K, kAcc>(d, s, acc, i + N, scale);
        out.Put2(d, a0, a1, i);
      }
    }
    for (; i + N <= n; i += N) out.Put(d, Combine<K, kAcc>(d, s, acc, i, scale), i);
    if (i == n) return;
    // Tail: copy the last partial vector of each input into zeroed stack
    // buffers and run the same vector code on them.
    const size_t rem = n - i;
    HWY_ALIGN TS buf[4][kMaxN];
    HWY_ALIGN TC abuf[kMaxN];
    const TS* tp[4];
    std::memset(buf, 0, sizeof(buf));
    for (int k = 0; k < K; ++k) {
      std::memcpy(buf[k], s[k] + i, rem * sizeof(TS));
      tp[k] = buf[k];
    }
    if constexpr (kAcc) {
      std::memset(abuf, 0, sizeof(abuf));
      std::memcpy(abuf, acc + i, rem * sizeof(TC));
    }
    out.PutTail(d, Combine<K, kAcc>(d, tp, abuf, 0, scale), i, rem);
  }

  template <bool kAcc, class Out>
  static HWY_INLINE void GroupK(int k, const void* const* s, size_t off, const TC* acc, size_t n,
                                size_t pf, TC f, Out& out) {
    switch (k) {
      case 1: Group<1, kAcc>(s, off, acc, n, pf, f, out); break;
      case 2: Group<2, kAcc>(s, off, acc, n, pf, f, out); break;
      case 3: Group<3, kAcc>(s, off, acc, n, pf, f, out); break;
      default: Group<4, kAcc>(s, off, acc, n, pf, f, out); break;
    }
  }

  static TC Factor(const ReduceArgs& a) {
    if constexpr (Op::kPre) {
      return static_cast<TC>(a.factor);
    } else {
      return TC(1);
    }
  }

  template <bool kNT>
  static void RunRange(const ReduceArgs& a, size_t off, size_t n, size_t pf) {
    TS* dst = static_cast<TS*>(a.dst) + off;
    const TC divisor = static_cast<TC>(a.nsrcs);
    if (a.nsrcs <= 4) {
      DstOut<kNT> out{dst, divisor};
      GroupK<false>(a.nsrcs, a.srcs, off, nullptr, n, pf, Factor(a), out);
      return;
    }
    RunTiled<kNT>(a, off, dst, n, pf, divisor);
  }

  // nsrcs > 4. Not inlined into RunRange: its 64 KiB stack tile would
  // otherwise be set up (and probed) on every small 2-input call too.
  template <bool kNT>
  static HWY_NOINLINE void RunTiled(const ReduceArgs& a, size_t off, TS* dst, size_t n,
                                    size_t pf, TC divisor) {
    const D d;
    const size_t N = hn::Lanes(d);
    size_t tile = a.tile_bytes / sizeof(TC);
    tile = tile < 4 * N ? 4 * N : tile;
    if (tile * sizeof(TC) > kMaxTileBytes) tile = kMaxTileBytes / sizeof(TC);
    tile -= tile % N;
    HWY_ALIGN TC scratch[kMaxTileBytes / sizeof(TC) + kMaxN];
    const TC f = Factor(a);
    for (size_t t = 0; t < n; t += tile) {
      const size_t len = n - t < tile ? n - t : tile;
      ScratchOut so{scratch};
      Group<4, false>(a.srcs, off + t, nullptr, len, pf, f, so);
      int k = 4;
      while (a.nsrcs - k > 4) {
        Group<4, true>(a.srcs + k, off + t, scratch, len, pf, f, so);
        k += 4;
      }
      DstOut<kNT> out{dst + t, divisor};
      GroupK<true>(a.nsrcs - k, a.srcs + k, off + t, scratch, len, pf, f, out);
    }
  }

  static HWY_NOINLINE void Run(const ReduceArgs& a) {
    if (a.count == 0) return;
    const size_t pf = a.prefetch_bytes / sizeof(TS);
    const D d;
    // Align dst to a whole compute vector: pairs of f16/bf16 half vectors
    // stream as one full vector.
    const size_t align = hn::Lanes(d) * sizeof(TC);
    const uintptr_t addr = reinterpret_cast<uintptr_t>(a.dst);
    if (IO::kCanStream && a.nt && addr % sizeof(TS) == 0) {
      // Regular stores up to the first vector-aligned element, then streams.
      size_t head = ((align - addr % align) % align) / sizeof(TS);
      if (head > a.count) head = a.count;
      if (head != 0) RunRange<false>(a, 0, head, pf);
      if (a.count > head) RunRange<true>(a, head, a.count - head, pf);
      hwy::FlushStream();
      return;
    }
    RunRange<false>(a, 0, a.count, pf);
  }
};

template <class IO>
HWY_INLINE void RunFloatOp(const ReduceArgs& a) {
  switch (a.op) {
    case ReduceOp::kSum: Kernel<IO, OpSum>::Run(a); break;
    case ReduceOp::kProd: Kernel<IO, OpProd>::Run(a); break;
    case ReduceOp::kMin: Kernel<IO, OpMin>::Run(a); break;
    case ReduceOp::kMax: Kernel<IO, OpMax>::Run(a); break;
    case ReduceOp::kAvg: Kernel<IO, OpAvg>::Run(a); break;
    case ReduceOp::kPremulSum: Kernel<IO, OpPremulSum>::Run(a); break;
    default: break;  // bitwise: refused by Reducer::Reduce
  }
}

// Integers: SUM/PROD run on the unsigned type of the same width (wrapping,
// no signed-overflow UB anywhere); MIN/MAX on the real type; AVG is the
// wrapped sum divided by n (truncated toward zero) in a second pass.
template <typename T>
HWY_INLINE void RunIntOp(const ReduceArgs& a) {
  using U = std::make_unsigned_t<T>;
  switch (a.op) {
    case ReduceOp::kSum: Kernel<PlainIO<U>, OpSum>::Run(a); break;
    case ReduceOp::kProd: Kernel<PlainIO<U>, OpProd>::Run(a); break;
    case ReduceOp::kMin: Kernel<PlainIO<T>, OpMin>::Run(a); break;
    case ReduceOp::kMax: Kernel<PlainIO<T>, OpMax>::Run(a); break;
    case ReduceOp::kAvg: {
      Kernel<PlainIO<U>, OpSum>::Run(a);
      T* dst = static_cast<T*>(a.dst);
      const T n = static_cast<T>(a.nsrcs);
      for (size_t i = 0; i < a.count; ++i) dst[i] = static_cast<T>(dst[i] / n);
      break;
    }
    case ReduceOp::kBand: Kernel<PlainIO<U>, OpBand>::Run(a); break;
    case ReduceOp::kBor: Kernel<PlainIO<U>, OpBor>::Run(a); break;
    case ReduceOp::kBxor: Kernel<PlainIO<U>, OpBxor>::Run(a); break;
    case ReduceOp::kPremulSum: break;  // refused by Reducer::Reduce
  }
}

// bool as bytes: sum is max (or), prod is min (and), as torch maps them.
HWY_INLINE void RunBoolOp(const ReduceArgs& a) {
  switch (a.op) {
    case ReduceOp::kSum:
    case ReduceOp::kMax: Kernel<PlainIO<uint8_t>, OpMax>::Run(a); break;
    case ReduceOp::kProd:
    case ReduceOp::kMin: Kernel<PlainIO<uint8_t>, OpMin>::Run(a); break;
    case ReduceOp::kBand: Kernel<PlainIO<uint8_t>, OpBand>::Run(a); break;
    case ReduceOp::kBor: Kernel<PlainIO<uint8_t>, OpBor>::Run(a); break;
    case ReduceOp::kBxor: Kernel<PlainIO<uint8_t>, OpBxor>::Run(a); break;
    default: break;  // avg, premul_sum: refused by Reducer::Reduce
  }
}

// ------------------------------------------------------------- conversions

struct ToBF16 {
  using TI = float;
  using TO = hwy::bfloat16_t;
  template <class DF>
  static HWY_INLINE void Step(DF df, const TI* s, TO* o) {
    hn::StoreU(DemoteBF16(df, hn::LoadU(df, s)), hn::Rebind<TO, DF>(), o);
  }
};
struct ToF16 {
  using TI = float;
  using TO = hwy::float16_t;
  template <class DF>
  static HWY_INLINE void Step(DF df, const TI* s, TO* o) {
    hn::StoreU(DemoteF16(df, hn::LoadU(df, s)), hn::Rebind<TO, DF>(), o);
  }
};
template <typename H>
struct FromHalf {
  using TI = H;
  using TO = float;
  template <class DF>
  static HWY_INLINE void Step(DF df, const TI* s, TO* o) {
    hn::StoreU(PromoteHalf(df, hn::LoadU(hn::Rebind<H, DF>(), s)), df, o);
  }
};

template <bool kE4M3>
struct ToFp8 {
  using TI = float;
  using TO = uint8_t;
  template <class DF>
  static HWY_INLINE void Step(DF df, const TI* s, TO* o) {
    const hn::Vec<DF> v = hn::LoadU(df, s);
    if constexpr (kE4M3) {
      hn::StoreU(DemoteE4M3(df, v), hn::Rebind<TO, DF>(), o);
    } else {
      hn::StoreU(DemoteE5M2(df, v), hn::Rebind<TO, DF>(), o);
    }
  }
};
template <bool kE4M3>
struct FromFp8 {
  using TI = uint8_t;
  using TO = float;
  template <class DF>
  static HWY_INLINE void Step(DF df, const TI* s, TO* o) {
    const auto b = hn::LoadU(hn::Rebind<TI, DF>(), s);
    if constexpr (kE4M3) {
      hn::StoreU(PromoteE4M3(df, b), df, o);
    } else {
      hn::StoreU(PromoteE5M2(df, b), df, o);
    }
  }
};

template <class C>
HWY_INLINE void ConvertLoop(const void* src, void* dst, size_t n) {
  const hn::ScalableTag<float> df;
  const size_t N = hn::Lanes(df);
  const auto* s = static_cast<const typename C::TI*>(src);
  auto* o = static_cast<typename C::TO*>(dst);
  size_t i = 0;
  for (; i + N <= n; i += N) C::Step(df, s + i, o + i);
  if (i == n) return;
  constexpr size_t kMaxN = HWY_MAX_BYTES / sizeof(float);
  HWY_ALIGN typename C::TI ib[kMaxN];
  HWY_ALIGN typename C::TO ob[kMaxN];
  std::memset(ib, 0, sizeof(ib));
  std::memcpy(ib, s + i, (n - i) * sizeof(typename C::TI));
  C::Step(df, ib, ob);
  std::memcpy(o + i, ob, (n - i) * sizeof(typename C::TO));
}

}  // namespace ciuic::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
