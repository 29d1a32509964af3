// DefaultFpEnv: a scope in which floating-point arithmetic runs in the
// default SSE environment (round to nearest even, every exception masked,
// subnormals kept), whatever the calling thread set. Reductions need it: a
// rank whose program changed the rounding mode or set FTZ/DAZ (torch's
// set_flush_denormal) would otherwise compute other bits than its peers,
// and one that unmasked exceptions (feenableexcept) would take SIGFPE on
// an overflowing sum. On leaving, the caller's MXCSR is back as it was,
// exception flags included. Costs two stmxcsr in the default environment
// (and an ldmxcsr where the work raised flags). Other architectures: not
// handled yet (arm64 would save and set FPCR).
#ifndef CIUIC_COMMON_FP_ENV_H_
#define CIUIC_COMMON_FP_ENV_H_

#if defined(__x86_64__) && defined(__GNUC__)
#include <xmmintrin.h>
#endif

namespace ciuic {

class DefaultFpEnv {
 public:
#if defined(__x86_64__) && defined(__GNUC__)
  DefaultFpEnv() : saved_(_mm_getcsr()) {
    if ((saved_ & ~kFlags) != kDefault) _mm_setcsr(kDefault);
  }
  ~DefaultFpEnv() {
    if (_mm_getcsr() != saved_) _mm_setcsr(saved_);
  }
  DefaultFpEnv(const DefaultFpEnv&) = delete;
  DefaultFpEnv& operator=(const DefaultFpEnv&) = delete;

 private:
  static constexpr unsigned kFlags = 0x3F;      // sticky exception flags
  static constexpr unsigned kDefault = 0x1F80;  // all masked, RNE, no FTZ/DAZ
  const unsigned saved_;
#else
  DefaultFpEnv() {}
#endif
};

}  // namespace ciuic

#endif  // CIUIC_COMMON_FP_ENV_H_
