// ciuic_partition's core: costs as raw doubles (NaN, infinities, negatives
// and denormals included), parts from the first byte. A success is a valid
// split, and for small inputs an optimal one (checked against every split).
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "collectives/partition.h"
#include "fuzz_check.h"

using namespace ciuic::collectives;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int parts = static_cast<int>(data[0] % 66) - 1;  // -1 .. 64
  std::vector<double> costs((size - 1) / sizeof(double));
  if (!costs.empty()) std::memcpy(costs.data(), data + 1, costs.size() * sizeof(double));
  auto b = PartitionMinMax(costs, parts);
  bool valid_input = parts >= 1;
  for (double c : costs) valid_input = valid_input && std::isfinite(c) && c >= 0;
  if (!b.ok()) {
    FUZZ_CHECK(!valid_input && b.status().code() == ciuic::StatusCode::kInvalidArgument);
    return 0;
  }
  FUZZ_CHECK(valid_input);
  const std::vector<size_t>& bounds = *b;
  FUZZ_CHECK(bounds.size() == static_cast<size_t>(parts) + 1);
  FUZZ_CHECK(bounds.front() == 0 && bounds.back() == costs.size());
  for (size_t i = 1; i < bounds.size(); ++i) FUZZ_CHECK(bounds[i - 1] <= bounds[i]);
  if (costs.size() <= 8 && parts <= 4) {
    // Every split of n items into `parts` ordered parts: the best max.
    const double got = MaxPartCost(costs, bounds);
    double best = INFINITY;
    std::vector<size_t> cut(static_cast<size_t>(parts) + 1, 0);
    cut.back() = costs.size();
    std::function<void(int)> walk = [&](int k) {
      if (k == parts) {
        best = std::min(best, MaxPartCost(costs, cut));
        return;
      }
      for (size_t at = cut[k - 1]; at <= costs.size(); ++at) {
        cut[k] = at;
        walk(k + 1);
      }
    };
    if (parts == 1) {
      best = MaxPartCost(costs, cut);
    } else {
      walk(1);
    }
    FUZZ_CHECK(got <= best);
  }
  return 0;
}
