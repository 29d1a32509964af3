// PlanCall: the algorithm for one operation and, for a schedule, its
// in-place handling.
#include "collectives/plan.h"

#include <cstdint>

namespace ciuic::collectives {

CollectiveArgs ArgsFor(const OpDesc& op, int rank, int nranks, int nchannels) {
  CollectiveArgs args;
  args.collective = op.coll;
  args.rank = rank;
  args.nranks = nranks;
  args.count = op.count;
  args.counts = op.counts;
  args.root = op.root;
  args.peer = op.root;
  args.tag = op.tag;
  args.nchannels = nchannels;
  return args;
}

CallShape ShapeOf(const OpDesc& op, int nranks, transport::BackendKind backend) {
  CallShape s;
  s.collective = op.coll;
  s.elem_size = DataTypeSize(op.dtype);
  s.count = op.count;
  s.nranks = nranks;
  s.root = op.root;
  s.backend = backend;
  const size_t es = s.elem_size, n = static_cast<size_t>(nranks);
  switch (op.coll) {
    case Collective::kAllGather:
      s.input_bytes = op.count * es;
      s.bytes = s.input_bytes * n;
      break;
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      s.bytes = s.input_bytes = op.count * es * n;
      break;
    case Collective::kAllGatherv:
    case Collective::kReduceScatterv: {
      size_t total = 0;
      for (size_t c : op.counts) total += c;
      s.bytes = total * es;
      s.input_bytes = op.coll == Collective::kAllGatherv ? op.count * es : s.bytes;
      break;
    }
    case Collective::kGather:
    case Collective::kScatter:
      s.input_bytes = op.count * es;
      s.bytes = s.input_bytes * n;
      break;
    case Collective::kAllToAllv: {
      // This rank's sends (its peers' differ: the collective has one
      // algorithm, so every rank still picks alike).
      size_t total = 0;
      for (size_t i = 0; i < n && i < op.counts.size(); ++i) total += op.counts[i];
      s.bytes = s.input_bytes = total * es;
      break;
    }
    default: s.bytes = s.input_bytes = op.count * es; break;
  }
  if (op.coll == Collective::kAllReduce && op.send != op.recv && op.send != nullptr && op.recv != nullptr) {
    const auto in = reinterpret_cast<uintptr_t>(op.send), out = reinterpret_cast<uintptr_t>(op.recv);
    s.partial_overlap = in < out + s.bytes && out < in + s.bytes;
  }
  return s;
}

namespace {

// The shared-memory family's line: what ran, on what, and why.
std::string SharedWhy(const CallShape& call, const CallPlan& plan, const DirectLimits& limits) {
  std::string what = std::string(plan.algorithm->name());
  if (call.collective == Collective::kAllReduce) {
    what += std::min(call.bytes, limits.slot_bytes) <= limits.one_shot_max_bytes ? " (one-shot)" : " (two-shot)";
  }
  const std::string where = std::string(CollectiveName(call.collective)) + " " + std::to_string(call.bytes) +
                            " B on " + std::to_string(call.nranks) + " ranks";
  // The model's reason starts with the same "<name> for <where>: ".
  std::string reason = plan.selection.reason;
  const std::string same = std::string(plan.algorithm->name()) + " for " + where + ": ";
  if (reason.rfind(same, 0) == 0) reason = "cheapest: " + reason.substr(same.size());
  return what + " for " + where + ": " + reason;
}

}  // namespace

StatusOr<CallPlan> PlanCall(const OpDesc& op, int rank, int nranks, const SelectionContext& ctx,
                            SelectionCache* cache) {
  const CallShape call = ShapeOf(op, nranks, ctx.backend);
  CallPlan plan;
  CIUIC_ASSIGN_OR_RETURN(plan.selection, Select(call, op.dtype, op.op, ctx, cache));
  plan.algorithm = plan.selection.algorithm;
  if (plan.algorithm->kind != AlgorithmKind::kSchedule) {
    plan.why = SharedWhy(call, plan, ctx.limits);
    return plan;
  }
  CollectiveArgs args = ArgsFor(op, rank, nranks, ctx.params.nchannels);
  args.radix = ctx.params.radix;
  args.aggregation = ctx.params.aggregation;
  args.host_of = ctx.host_of;
  CIUIC_ASSIGN_OR_RETURN(plan.schedule, MakeSchedule(plan.algorithm->id, args));
  plan.why = std::string(plan.algorithm->name()) + " (" + plan.selection.reason + ")";

  const size_t es = call.elem_size;
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
