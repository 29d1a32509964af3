// Internal helpers for the C ABI: Status -> ciuic_status_t plus the
// thread-local last-error message.
#ifndef CIUIC_COMMON_C_API_H_
#define CIUIC_COMMON_C_API_H_

#include "ciuic/ciuic.h"
#include "ciuic/status.h"

namespace ciuic {
// Records status.message() as this thread's last error (cleared when ok)
// and returns the matching C code.
ciuic_status_t ToCStatus(const Status& status);
}  // namespace ciuic

#endif  // CIUIC_COMMON_C_API_H_
