// Tuning files (CIUIC_TUNING_FILE): whatever parses satisfies the format's
// rules, and formatting it gives text that parses to the same text again.
#include "collectives/tuning.h"
#include "fuzz_check.h"

using namespace ciuic::collectives;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto t = ParseTuning(FuzzText(data, size), "fuzz");
  if (!t.ok()) {
    FUZZ_CHECK(t.status().code() == ciuic::StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(CheckTuning(*t).ok());
  const std::string once = FormatTuning(*t);
  auto again = ParseTuning(once, "fuzz (formatted)");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(FormatTuning(*again) == once);
  return 0;
}
