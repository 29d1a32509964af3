// Test helper: skip a test when a transport backend cannot run here, with
// the reason; where the hardware is meant to be present (the Soft-RoCE guest
// sets CIUIC_TEST_REQUIRE_VERBS=1) the same condition is a failure instead.
#ifndef CIUIC_TESTS_UTIL_BACKEND_SKIP_H_
#define CIUIC_TESTS_UTIL_BACKEND_SKIP_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "transport/transport.h"

namespace ciuic::testing {

// Whether CIUIC_TEST_REQUIRE_VERBS=1 asks for verbs to be usable.
inline bool VerbsRequired() {
  const char* v = std::getenv("CIUIC_TEST_REQUIRE_VERBS");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace ciuic::testing

// In a test body or SetUp(): returns from it (skipped, or failed when
// required) unless `kind` can be opened with `options`.
#define CIUIC_SKIP_UNLESS_BACKEND(kind, options)                                          \
  do {                                                                                  \
    std::string why_;                                                                   \
    if (!::ciuic::transport::BackendAvailable((kind), (options), &why_)) {              \
      if ((kind) == ::ciuic::transport::BackendKind::kVerbs &&                          \
          ::ciuic::testing::VerbsRequired()) {                                          \
        FAIL() << "CIUIC_TEST_REQUIRE_VERBS=1 but verbs is unusable: " << why_;         \
      }                                                                                 \
      GTEST_SKIP() << ::ciuic::transport::BackendName(kind) << " unavailable: " << why_; \
    }                                                                                   \
  } while (0)

#endif  // CIUIC_TESTS_UTIL_BACKEND_SKIP_H_
