// MakePlan: algorithm choice and in-place handling for one operation.
#include "collectives/plan.h"

#include <cstdint>

namespace ciuic::collectives {

namespace {

int SizeClass(size_t bytes) {
  int c = 0;
  while ((size_t{1} << c) < bytes && c < 63) ++c;
  return c;
}

}  // namespace

StatusOr<Plan> MakePlan(const OpDesc& op, int rank, int nranks, int nchannels, const std::string& algo,
                        const CostParams& params, SelectionCache* cache) {
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
  Algorithm chosen = Algorithm::kRing;
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
  if (!forced) {
    const auto key = std::make_pair(static_cast<int>(op.coll), SizeClass(bytes));
    auto it = cache->find(key);
    if (it == cache->end()) {
      CostParams p = params;
      p.elem_size = es;
      p.nchannels = nchannels;
      p.root = op.root;
      // One representative size per class (its upper bound), so every rank
      // makes the same choice for the same class.
      const size_t rep = bytes == 0 ? 0 : (size_t{1} << key.second);
      CIUIC_ASSIGN_OR_RETURN(Selection sel, Select(op.coll, rep, nranks, p, ""));
      it = cache->emplace(key, std::move(sel)).first;
    }
    chosen = it->second.algorithm;
    why = it->second.reason;
  }
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
