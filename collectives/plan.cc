// MakePlan: algorithm choice and in-place handling for one operation.
#include "collectives/plan.h"

#include <cstdint>
#include <cstdio>
#include <optional>

namespace ciuic::collectives {

namespace {

int SizeClass(size_t bytes) {
  int c = 0;
  while ((size_t{1} << c) < bytes && c < 63) ++c;
  return c;
}

std::string Micros(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g us", s * 1e6);
  return buf;
}

// The selection a tuning file's rule makes, or nullopt when no rule applies
// (or it names `direct`, which is not a schedule). `model` is the cost
// model's selection for the same call: its predictions go into the reason.
std::optional<Selection> TunedSelection(const Tuning& tuning, transport::BackendKind backend, Collective coll,
                                        int nranks, size_t bytes, const Selection& model) {
  const TuningRule* rule = FindRule(tuning, coll, backend, nranks, bytes);
  if (rule == nullptr) return std::nullopt;
  StatusOr<Algorithm> a = ParseAlgorithm(coll, rule->algorithm);
  if (!a.ok()) return std::nullopt;
  Selection sel = model;
  sel.algorithm = *a;
  sel.name = AlgorithmName(*a);
  sel.reason = "tuned: " + FormatRule(*rule) + " (" + tuning.origin + ":" + std::to_string(rule->line) + ")";
  for (const auto& [name, seconds] : model.predicted_s) {
    if (name == sel.name) sel.reason += "; model predicts " + Micros(seconds);
  }
  if (model.algorithm != *a) sel.reason += ", model's choice: " + model.reason;
  return sel;
}

}  // namespace

CollectiveArgs ArgsFor(const OpDesc& op, int rank, int nranks, int nchannels) {
  CollectiveArgs args;
  args.collective = op.coll;
  args.rank = rank;
  args.nranks = nranks;
  args.count = op.count;
  args.counts = op.counts;
  args.root = op.root;
  args.peer = op.root;
  args.nchannels = nchannels;
  return args;
}

StatusOr<Plan> MakePlan(const OpDesc& op, int rank, int nranks, int nchannels, const std::string& algo,
                        const CostParams& params, SelectionCache* cache, const Tuning* tuning,
                        transport::BackendKind backend) {
  const size_t es = DataTypeSize(op.dtype);
  const CollectiveArgs args = ArgsFor(op, rank, nranks, nchannels);
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
      if (tuning != nullptr) {
        // The measured gamma of this dtype and op (alpha, beta and copy are
        // the caller's: `params`).
        CostParams tuned = p;
        ApplyTuning(*tuning, backend, &tuned, op.dtype, op.op);
        p.gamma_s_per_byte = tuned.gamma_s_per_byte;
      }
      // One representative size per class (its upper bound), so every rank
      // makes the same choice for the same class.
      const size_t rep = bytes == 0 ? 0 : (size_t{1} << key.second);
      CIUIC_ASSIGN_OR_RETURN(Selection sel, Select(op.coll, rep, nranks, p, ""));
      it = cache->emplace(key, std::move(sel)).first;
    }
    chosen = it->second.algorithm;
    why = it->second.reason;
    // A rule of the tuning file covers the exact size ("from" is in bytes;
    // the model's choice above is per size class).
    if (tuning != nullptr) {
      if (std::optional<Selection> tuned = TunedSelection(*tuning, backend, op.coll, nranks, bytes, it->second)) {
        chosen = tuned->algorithm;
        why = tuned->reason;
      }
    }
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
