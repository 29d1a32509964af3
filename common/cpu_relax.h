// CpuRelax(): the spin-wait hint (x86 `pause`, Arm `yield`), for loops that
// poll memory another core writes. On Zen a pause takes ~60 cycles, so a
// loop that waits for a ~100 ns hand-off should pause once per look.
#ifndef CIUIC_COMMON_CPU_RELAX_H_
#define CIUIC_COMMON_CPU_RELAX_H_

namespace ciuic {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace ciuic

#endif  // CIUIC_COMMON_CPU_RELAX_H_
