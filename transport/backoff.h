// Internal: bounded exponential backoff for the stores' polling loops.
#ifndef CIUIC_TRANSPORT_BACKOFF_H_
#define CIUIC_TRANSPORT_BACKOFF_H_

#include <algorithm>
#include <chrono>
#include <thread>

namespace ciuic::transport {

// Sleeps for min(*step, time left), then doubles *step up to `max_step`.
// Returns false (without sleeping) once `deadline` has passed.
inline bool Backoff(std::chrono::milliseconds* step,
                    std::chrono::steady_clock::time_point deadline,
                    std::chrono::milliseconds max_step) {
  const auto now = std::chrono::steady_clock::now();
  if (now >= deadline) return false;
  std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(*step, deadline - now));
  *step = std::min(*step * 2, max_step);
  return true;
}

}  // namespace ciuic::transport

#endif  // CIUIC_TRANSPORT_BACKOFF_H_
