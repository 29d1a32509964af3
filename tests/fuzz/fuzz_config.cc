// CIUIC_* values: the first byte picks a knob, the rest is its text. A value
// the knob takes reads back (DescribeKnobs) as text it takes again, to the
// same value; a refused one is kInvalidArgument and leaves the knob alone.
// Also the parsers that take a knob's text further: byte sizes and
// CIUIC_ALGO.
#include <vector>

#include "ciuic/config.h"
#include "collectives/selection.h"
#include "fuzz_check.h"

namespace {

std::string ValueOf(const ciuic::Config& c, const std::string& name) {
  for (const auto& k : ciuic::DescribeKnobs(c)) {
    if (k.name == name) return k.value;
  }
  return "<missing>";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<ciuic::KnobDescription> knobs = ciuic::DescribeKnobs(ciuic::Config());
  if (size == 0) return 0;
  const std::string& name = knobs[data[0] % knobs.size()].name;
  const std::string value = FuzzText(data + 1, size - 1);
  ciuic::Config c;
  const std::string before = ValueOf(c, name);
  ciuic::Status s = c.Set(name, value);
  if (s.ok()) {
    const std::string shown = ValueOf(c, name);
    ciuic::Config d;
    FUZZ_CHECK(d.Set(name, shown).ok());
    FUZZ_CHECK(ValueOf(d, name) == shown);
  } else {
    FUZZ_CHECK(s.code() == ciuic::StatusCode::kInvalidArgument);
    FUZZ_CHECK(s.message().find(name) != std::string::npos);
    FUZZ_CHECK(ValueOf(c, name) == before);
  }
  if (auto b = ciuic::ParseByteSize(value); b.ok()) {
    FUZZ_CHECK(ciuic::ParseByteSize(std::to_string(*b)).ok());
  }
  if (auto a = ciuic::collectives::AlgoKnob::Parse(value); a.ok()) {
    auto again = ciuic::collectives::AlgoKnob::Parse(a->text);
    FUZZ_CHECK(again.ok() && again->forced == a->forced);
  }
  return 0;
}
