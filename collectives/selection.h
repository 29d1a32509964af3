// Selection: which algorithm of the registry runs one call. One function,
// Select, in this order:
//   1. the algorithm CIUIC_ALGO forces for the collective, when it can run
//      the call (one that does not implement the collective leaves it to
//      the rest, so CIUIC_ALGO=ring still lets a barrier run); the model
//      does not run then;
//   2. else the tuning file's rule covering the call's exact size, when its
//      algorithm can run the call;
//   3. else the cheapest prediction among the entries that can run it: the
//      cost model over the schedules themselves (cost_model.h) and the
//      shared-memory family's own cost functions (registry.h), compared at
//      the upper bound of the call's power-of-two size class, so every size
//      of a class picks alike. Within 3% of the cheapest, the entry that
//      moves the fewest bytes over links wins (the shared-memory family
//      moves none; on loopback tcp every byte is a kernel copy), then the
//      one listed first.
// Every rank selects the same for the same call: the inputs are the call's
// arguments and what rank 0 decided for the communicator.
//
// Thread contract: Select is a pure function of its arguments except for
// the cache, which must not be shared between threads.
#ifndef CIUIC_COLLECTIVES_SELECTION_H_
#define CIUIC_COLLECTIVES_SELECTION_H_

#include <array>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ciuic/kernels.h"
#include "ciuic/status.h"
#include "collectives/cost_model.h"
#include "collectives/registry.h"
#include "collectives/tuning.h"

namespace ciuic::collectives {

// CIUIC_ALGO, parsed: "auto", an algorithm name (forced for every
// collective that has it), or a comma-separated list of names and
// COLLECTIVE:NAME items (e.g. "ring,broadcast:binomial": ring where it
// exists, binomial for broadcast).
struct AlgoKnob {
  std::string text = "auto";
  std::array<const AlgorithmInfo*, kNumCollectives> forced{};  // null: auto

  // Errors: kInvalidArgument naming CIUIC_ALGO and what is wrong (an
  // unknown name or collective, a name the collective does not have).
  static StatusOr<AlgoKnob> Parse(const std::string& text);
  // cppcheck-suppress CastIntegerToAddressAtReturn ; forced holds pointers (cppcheck 2.10 misreads the array)
  const AlgorithmInfo* For(Collective c) const { return forced[static_cast<size_t>(c)]; }
  // What is forced, one spelling per meaning: "auto", or COLLECTIVE:NAME
  // items in collective order ("allreduce:ring,broadcast:ring").
  std::string Canonical() const;
  // kInvalidArgument when a forced algorithm cannot run on `backend` at all
  // (e.g. direct on tcp).
  Status CheckTransport(transport::BackendKind backend) const;
};

// What is fixed for a communicator.
struct SelectionContext {
  transport::BackendKind backend = transport::BackendKind::kShm;
  CostParams params;             // alpha, beta, gamma, copy; chunk, channels, oversubscription
  const Tuning* tuning = nullptr;  // CIUIC_TUNING_FILE (rules, gammas)
  AlgoKnob algo;
  DirectLimits limits;
  // Each rank's host (CommDecision::host_of; empty: one host): the
  // hierarchical schedules group by it.
  std::vector<int> host_of;
};

struct Selection {
  const AlgorithmInfo* algorithm = nullptr;
  // Predicted seconds of every entry that can run the call, registry order.
  std::vector<std::pair<std::string, double>> predicted_s;
  std::string reason;  // one line, for logs and ciuic-info
  const char* name() const { return algorithm == nullptr ? "?" : algorithm->name(); }
};

// The schedules' predictions per (collective, size class, root): the model
// runs once per class (with the first call's element type), not per call;
// per root, since a rooted schedule's cost depends on where the root is
// (uneven hosts). They hold for one communicator: a Select for another
// rank count, backend or host layout empties the cache first, but other
// parameters (CostParams' rates, chunk, channels, radix, aggregation; the
// tuning file) are not compared, so a cache must not outlive them.
struct SelectionCache {
  int nranks = 0;
  transport::BackendKind backend = transport::BackendKind::kShm;
  std::vector<int> host_of, level_host_of;  // SelectionContext's and its CostParams'
  std::map<std::tuple<int, int, int>, std::vector<std::pair<const AlgorithmInfo*, Prediction>>> entries;
};

// Errors: kInvalidArgument (nranks < 1, elem_size 0), those of the model.
StatusOr<Selection> Select(const CallShape& call, DataType dtype, ReduceOp op, const SelectionContext& ctx,
                           SelectionCache* cache);

// Select among the schedules alone (no tuning file, a link transport):
// the model's choice for `collective`, or `forced_algo` ("" or "auto" =
// choose). For tools and tests of the model. Errors: kInvalidArgument for
// an unknown or unsupported forced name (the message lists the valid
// ones), elem_size 0, nranks < 1; those of Predict.
StatusOr<Selection> Select(Collective collective, size_t bytes, int nranks, const CostParams& params,
                           const std::string& forced_algo);

// The predicted seconds of `entry` for exactly `call` (CIUIC_DEBUG=INFO
// prints it next to the measured time). Errors: those of Predict.
StatusOr<double> PredictCall(const AlgorithmInfo& entry, const CallShape& call, const CostParams& params,
                             const DirectLimits& limits);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_SELECTION_H_
