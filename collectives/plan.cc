// MakePlan: algorithm choice and in-place handling for one operation.
#include "collectives/plan.h"

#include <cstdint>

namespace ciuic::collectives {

namespace {

// Interim size thresholds until the measured cost model selects (see
// cost_model.h): latency-bound sizes take few steps, bandwidth-bound sizes
// the ring.
Algorithm DefaultAlgorithm(Collective c, size_t bytes, int nranks, std::string* why) {
  switch (c) {
    case Collective::kAllReduce:
      if (nranks <= 2 || bytes <= (32u << 10)) {
        *why = "recursive doubling: few ranks or <= 32 KiB (latency-bound)";
        return Algorithm::kRecursiveDoubling;
      }
      if (bytes <= (512u << 10)) {
        *why = "rabenseifner: medium size";
        return Algorithm::kRabenseifner;
      }
      *why = "ring: bandwidth-bound";
      return Algorithm::kRing;
    case Collective::kBroadcast:
      if (bytes <= (64u << 10)) {
        *why = "binomial tree: small";
        return Algorithm::kBinomial;
      }
      *why = "pipelined ring: large";
      return Algorithm::kRing;
    case Collective::kReduce:
      if (bytes <= (64u << 10)) {
        *why = "binomial tree: small";
        return Algorithm::kBinomial;
      }
      *why = "ring reduce-scatter + gather: large";
      return Algorithm::kRing;
    case Collective::kAllGather:
    case Collective::kAllGatherv:
    case Collective::kReduceScatter:
    case Collective::kReduceScatterv:
      *why = "ring";
      return Algorithm::kRing;
    case Collective::kAllToAll:
      *why = "pairwise exchange";
      return Algorithm::kPairwise;
    case Collective::kBarrier:
      *why = "dissemination";
      return Algorithm::kDissemination;
    case Collective::kSend:
    case Collective::kRecv:
      *why = "direct";
      return Algorithm::kDirect;
  }
  return Algorithm::kRing;
}

}  // namespace

StatusOr<Plan> MakePlan(const OpDesc& op, int rank, int nranks, int nchannels, const std::string& algo,
                        size_t slot_bytes) {
  (void)slot_bytes;
  const size_t es = DataTypeSize(op.dtype);
  CollectiveArgs args;
  args.collective = op.coll;
  args.rank = rank;
  args.nranks = nranks;
  args.count = op.count;
  args.counts = op.counts;
  args.root = op.root;
  args.peer = op.root;
  args.nchannels = nchannels;
  size_t bytes = op.count * es;
  if (op.coll == Collective::kAllGather || op.coll == Collective::kReduceScatter || op.coll == Collective::kAllToAll) {
    bytes *= static_cast<size_t>(nranks);
  }

  Plan plan;
  Algorithm chosen;
  std::string why;
  bool forced = false;
  if (algo != "auto") {
    StatusOr<Algorithm> a = ParseAlgorithm(op.coll, algo);
    if (a.ok()) {
      chosen = *a;
      forced = true;
      why = "forced by CIUIC_ALGO";
    } else if (op.coll == Collective::kAllReduce) {
      return Status(a.status().code(), "CIUIC_ALGO: " + a.status().message());
    }
  }
  if (!forced) chosen = DefaultAlgorithm(op.coll, bytes, nranks, &why);
  CIUIC_ASSIGN_OR_RETURN(plan.schedule, MakeSchedule(chosen, args));
  plan.why = std::string(AlgorithmName(chosen)) + " (" + why + ")";

  // In place: run directly when the caller's overlap is the one the
  // schedule supports (LayoutFor, the NCCL conventions); any other overlap
  // copies the input aside first, so results are never silently wrong.
  CIUIC_ASSIGN_OR_RETURN(BufferLayout out_of_place, LayoutFor(args, false));
  plan.layout = out_of_place;
  const auto* in = static_cast<const char*>(op.send);
  const auto* out = static_cast<const char*>(op.recv);
  const size_t in_bytes = out_of_place.input_count * es, out_bytes = out_of_place.output_count * es;
  const bool overlap = in != nullptr && out != nullptr && in_bytes > 0 && out_bytes > 0 &&
                       in < out + out_bytes && out < in + in_bytes;
  if (overlap) {
    CIUIC_ASSIGN_OR_RETURN(BufferLayout inplace, LayoutFor(args, true));
    bool supported = false;
    if (inplace.alias == BufferLayout::Alias::kInputInOutput) {
      supported = in == out + inplace.alias_offset * es;
    } else if (inplace.alias == BufferLayout::Alias::kOutputInInput) {
      supported = out == in + inplace.alias_offset * es;
    }
    if (supported) {
      plan.layout = inplace;
    } else {
      plan.stage_input = true;
    }
  }
  return plan;
}

}  // namespace ciuic::collectives
