// Select: forced, tuned, or the cheapest prediction (selection.h).
#include "collectives/selection.h"

#include <algorithm>
#include <cstdio>
#include <optional>

namespace ciuic::collectives {
namespace {

// Ranks on at least two hosts, one of them with two ranks or more.
bool SeveralHostsWithPeers(const std::vector<int>& host_of) {
  std::vector<int> per_host;
  for (int h : host_of) {
    if (h < 0) return false;
    if (static_cast<size_t>(h) >= per_host.size()) per_host.resize(static_cast<size_t>(h) + 1, 0);
    ++per_host[static_cast<size_t>(h)];
  }
  return per_host.size() > 1 && std::any_of(per_host.begin(), per_host.end(), [](int m) { return m > 1; });
}

int SizeClass(size_t bytes) {
  int c = 0;
  while ((size_t{1} << c) < bytes && c < 63) ++c;
  return c;
}

std::string Seconds(double s) {
  char buf[32];
  if (s < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.3g us", s * 1e6);
  } else if (s < 1) {
    std::snprintf(buf, sizeof buf, "%.3g ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.3g s", s);
  }
  return buf;
}

// Collectives whose count is a per-rank block of an n-block whole.
bool BlockCollective(Collective c) {
  return c == Collective::kAllGather || c == Collective::kReduceScatter || c == Collective::kAllToAll ||
         c == Collective::kAllGatherv || c == Collective::kReduceScatterv || c == Collective::kGather ||
         c == Collective::kScatter || c == Collective::kAllToAllv;
}

// `call` scaled to `bytes` (its size class's representative).
CallShape Scaled(const CallShape& call, size_t bytes) {
  CallShape s = call;
  if (call.bytes > 0) {
    s.input_bytes = static_cast<size_t>(static_cast<double>(call.input_bytes) * static_cast<double>(bytes) /
                                        static_cast<double>(call.bytes));
  }
  s.bytes = bytes;
  return s;
}

// One candidate of the model.
struct Candidate {
  const AlgorithmInfo* entry;
  double seconds;
  size_t link_bytes;  // moved over links in all (the shared-memory family: none)
  bool exact;
};

}  // namespace

std::string AlgoKnob::Canonical() const {
  std::string out;
  for (Collective c : AllCollectives()) {
    if (const AlgorithmInfo* e = For(c); e != nullptr) {
      out += (out.empty() ? "" : ",") + std::string(CollectiveName(c)) + ":" + e->name();
    }
  }
  return out.empty() ? "auto" : out;
}

StatusOr<AlgoKnob> AlgoKnob::Parse(const std::string& text) {
  AlgoKnob k;
  k.text = text.empty() ? "auto" : text;
  if (k.text == "auto") return k;
  auto bad = [&](const std::string& why) { return InvalidArgumentError("CIUIC_ALGO='" + k.text + "': " + why); };
  std::array<const AlgorithmInfo*, kNumCollectives> by_name{};
  size_t at = 0;
  while (at <= k.text.size()) {
    const size_t comma = std::min(k.text.find(',', at), k.text.size());
    const std::string item = k.text.substr(at, comma - at);
    at = comma + 1;
    if (item.empty()) return bad("an empty item");
    const size_t colon = item.find(':');
    if (colon == std::string::npos) {
      // A name: every collective that has it.
      bool any = false;
      for (Collective c : AllCollectives()) {
        StatusOr<Algorithm> a = ParseAlgorithm(c, item);
        if (!a.ok()) continue;
        by_name[static_cast<size_t>(c)] = FindEntry(c, *a);
        any = true;
      }
      if (!any) {
        std::string names;
        for (const std::string& n : AlgorithmNames()) names += (names.empty() ? "" : ", ") + n;
        return bad("unknown algorithm '" + item + "'; known: " + names);
      }
      continue;
    }
    StatusOr<Collective> c = ParseCollective(item.substr(0, colon));
    if (!c.ok()) return bad(c.status().message());
    StatusOr<Algorithm> a = ParseAlgorithm(*c, item.substr(colon + 1));
    if (!a.ok()) return bad(a.status().message());
    k.forced[static_cast<size_t>(*c)] = FindEntry(*c, *a);
  }
  // COLLECTIVE:NAME items win over plain names.
  for (size_t i = 0; i < k.forced.size(); ++i) {
    if (k.forced[i] == nullptr) k.forced[i] = by_name[i];
  }
  return k;
}

Status AlgoKnob::CheckTransport(transport::BackendKind backend) const {
  for (const AlgorithmInfo* e : forced) {
    if (e != nullptr && !e->RunsOn(backend)) {
      return InvalidArgumentError("CIUIC_ALGO='" + text + "': " + e->name() + " for " + CollectiveName(e->collective) +
                                  " runs only through one host's shared memory (CIUIC_TRANSPORT=shm), not here");
    }
  }
  return Status::Ok();
}

namespace {

// The shared-memory family's cost at the rates of the call's working set
// (a rank's input and output), as Predict costs the schedules.
double SharedCost(const AlgorithmInfo& e, const CallShape& call, const CostParams& params, const DirectLimits& limits) {
  const bool scatter = call.collective == Collective::kReduceScatter || call.collective == Collective::kReduceScatterv;
  const size_t out = scatter ? call.bytes / static_cast<size_t>(std::max(1, call.nranks)) : call.bytes;
  return e.cost(call, AtWorkingSet(params, static_cast<double>(call.input_bytes + out)), limits);
}

}  // namespace

StatusOr<double> PredictCall(const AlgorithmInfo& e, const CallShape& call, const CostParams& params,
                             const DirectLimits& limits) {
  if (e.kind != AlgorithmKind::kSchedule) return SharedCost(e, call, params, limits);
  CostParams p = params;
  p.elem_size = call.elem_size;
  p.root = call.root;
  const size_t bytes = BlockCollective(call.collective) ? call.bytes / static_cast<size_t>(call.nranks) : call.bytes;
  CIUIC_ASSIGN_OR_RETURN(Prediction pred, Predict(call.collective, e.id, bytes, call.nranks, p));
  return pred.seconds;
}

StatusOr<Selection> Select(const CallShape& call, DataType dtype, ReduceOp op, const SelectionContext& ctx,
                           SelectionCache* cache) {
  if (call.elem_size == 0) return InvalidArgumentError("Select: elem_size must be > 0");
  if (call.nranks < 1) return InvalidArgumentError("Select: nranks must be >= 1");
  CostParams p = ctx.params;
  p.elem_size = call.elem_size;
  p.root = call.root;
  if (ctx.tuning != nullptr) {
    // The file's gamma for this dtype and op (alpha, beta and copy are the
    // communicator's already).
    CostParams tuned = p;
    ApplyTuning(*ctx.tuning, ctx.backend, &tuned, dtype, op);
    p.gamma_s_per_byte = tuned.gamma_s_per_byte;
    p.dram_gamma_s_per_byte = tuned.dram_gamma_s_per_byte;
  }

  // What can run this call, in registry order; why the others cannot.
  std::vector<const AlgorithmInfo*> runnable;
  std::string forced_why_not;
  const AlgorithmInfo* forced = ctx.algo.For(call.collective);
  const bool hosts = SeveralHostsWithPeers(ctx.host_of);
  for (const AlgorithmInfo* e : EntriesFor(call.collective)) {
    if (!e->RunsOn(ctx.backend)) continue;
    if (e->needs_hosts && !hosts && e != forced) continue;
    std::string why;
    if (e->kind != AlgorithmKind::kSchedule && !e->applies(call, ctx.limits, &why)) {
      if (e == forced) forced_why_not = why;
      continue;
    }
    runnable.push_back(e);
  }
  if (runnable.empty()) {
    return InvalidArgumentError(std::string("no algorithm can run ") + CollectiveName(call.collective) + " here");
  }
  Selection sel;
  // 1. Forced, when it can run the call: no model (it costs milliseconds at
  // many ranks, and the choice is made).
  const bool forced_runs = forced != nullptr && std::find(runnable.begin(), runnable.end(), forced) != runnable.end();
  if (forced_runs) {
    sel.algorithm = forced;
    sel.reason = "forced by CIUIC_ALGO";
    return sel;
  }

  // The model, at the size class's representative: schedules cached per
  // class, the shared-memory family's cost functions computed (cheap).
  const int klass = SizeClass(call.bytes);
  const size_t rep = call.bytes == 0 ? 0 : (size_t{1} << klass);
  const CallShape rep_call = Scaled(call, rep);
  const bool oversubscribed = p.ranks_outnumber_cpus && call.nranks > 2;
  if (cache->nranks != call.nranks || cache->backend != ctx.backend || cache->host_of != ctx.host_of ||
      cache->level_host_of != p.host_of) {
    *cache = SelectionCache{call.nranks, ctx.backend, ctx.host_of, p.host_of, {}};
  }
  const auto key = std::make_tuple(static_cast<int>(call.collective), klass, call.root);
  auto cached = cache->entries.find(key);
  if (cached == cache->entries.end()) {
    std::vector<std::pair<const AlgorithmInfo*, Prediction>> preds;
    for (const AlgorithmInfo* e : runnable) {
      if (e->kind != AlgorithmKind::kSchedule) continue;
      const size_t bytes = BlockCollective(call.collective) ? rep / static_cast<size_t>(call.nranks) : rep;
      CIUIC_ASSIGN_OR_RETURN(Prediction pred, Predict(call.collective, e->id, bytes, call.nranks, p));
      preds.emplace_back(e, pred);
    }
    cached = cache->entries.emplace(key, std::move(preds)).first;
  }
  std::vector<Candidate> cands;
  bool exact = true;
  for (const AlgorithmInfo* e : runnable) {
    Candidate c{e, 0, 0, true};
    if (e->kind == AlgorithmKind::kSchedule) {
      for (const auto& [entry, pred] : cached->second) {
        if (entry == e) c = Candidate{e, pred.seconds, pred.total_bytes_sent, pred.exact()};
      }
    } else {
      c.seconds = SharedCost(*e, rep_call, p, ctx.limits);
    }
    sel.predicted_s.emplace_back(e->name(), c.seconds);
    exact = exact && c.exact;
    if (oversubscribed && e->avoid_when_ranks_outnumber_cpus) continue;
    cands.push_back(c);
  }
  size_t best = 0;
  for (size_t i = 1; i < cands.size(); ++i) {
    if (cands[i].seconds < cands[best].seconds) best = i;
  }
  size_t pick = best;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (cands[i].seconds > cands[best].seconds * 1.03) continue;
    // (i < pick orders ties; i is in range: cppcheck takes it for a late bounds check.)
    // cppcheck-suppress arrayIndexThenCheck
    if (cands[i].link_bytes < cands[pick].link_bytes || (cands[i].link_bytes == cands[pick].link_bytes && i < pick)) {
      pick = i;
    }
  }
  const std::string where = std::string(CollectiveName(call.collective)) + " " + std::to_string(call.bytes) +
                            " B on " + std::to_string(call.nranks) + " ranks" + (exact ? "" : " (rank-0 estimate)");
  std::string model = std::string(cands[pick].entry->name()) + " for " + where + ": predicted " +
                      Seconds(cands[pick].seconds);
  if (oversubscribed && cands.size() < runnable.size()) {
    model += " (ranks outnumber their CPUs: a ring reduce's many messages each cost a context switch)";
  } else if (cands.size() == 1) {
    model += " (the only algorithm)";
  } else if (pick != best) {
    model += ", within 3% of " + std::string(cands[best].entry->name()) + " " + Seconds(cands[best].seconds) +
             (cands[pick].link_bytes < cands[best].link_bytes ? " and moving fewer bytes" : " and preferred on near-ties");
  } else {
    const size_t second = best == 0 ? 1 : 0;
    size_t next = second;
    for (size_t i = 0; i < cands.size(); ++i) {
      if (i != best && cands[i].seconds < cands[next].seconds) next = i;
    }
    model += ", next " + std::string(cands[next].entry->name()) + " " + Seconds(cands[next].seconds);
  }
  // The model's time for `e` ("" when the model left it out).
  auto predicted_of = [&](const AlgorithmInfo* e) {
    for (const Candidate& c : cands) {
      if (c.entry == e) return Seconds(c.seconds);
    }
    return std::string();
  };

  // A forced algorithm that cannot run the call: the rest decide.
  if (forced != nullptr) {
    model = "CIUIC_ALGO's " + std::string(forced->name()) + " cannot run it (" + forced_why_not + "); " + model;
  }
  // 2. A rule of the tuning file covering the exact size.
  if (ctx.tuning != nullptr) {
    int nhosts = 1;
    for (int h : ctx.host_of) nhosts = std::max(nhosts, h + 1);
    if (const TuningRule* rule =
            FindRule(*ctx.tuning, call.collective, ctx.backend, call.nranks, call.bytes, nhosts)) {
      for (const AlgorithmInfo* e : runnable) {
        if (rule->algorithm != e->name()) continue;
        sel.algorithm = e;
        sel.reason = "tuned: " + FormatRule(*rule) + " (" + ctx.tuning->origin + ":" + std::to_string(rule->line) + ")";
        const std::string pr = predicted_of(e);
        if (!pr.empty()) sel.reason += "; model predicts " + pr;
        if (e != cands[pick].entry) sel.reason += ", model's choice: " + model;
        return sel;
      }
    }
  }
  // 3. The model.
  sel.algorithm = cands[pick].entry;
  sel.reason = model;
  return sel;
}

StatusOr<Selection> Select(Collective collective, size_t bytes, int nranks, const CostParams& params,
                           const std::string& forced_algo) {
  if (params.elem_size == 0) return InvalidArgumentError("Select: elem_size must be > 0");
  SelectionContext ctx;
  ctx.backend = transport::BackendKind::kTcp;  // schedules only
  ctx.params = params;
  if (!forced_algo.empty() && forced_algo != "auto") {
    CIUIC_ASSIGN_OR_RETURN(Algorithm a, ParseAlgorithm(collective, forced_algo));
    const AlgorithmInfo* e = FindEntry(collective, a);
    if (e->kind != AlgorithmKind::kSchedule) {
      return InvalidArgumentError("algorithm '" + forced_algo + "' has no schedule for " + CollectiveName(collective));
    }
    ctx.algo.text = forced_algo;
    ctx.algo.forced[static_cast<size_t>(collective)] = e;
  }
  CallShape call;
  call.collective = collective;
  call.elem_size = params.elem_size;
  call.count = bytes / params.elem_size + (bytes % params.elem_size ? 1 : 0);
  call.bytes = bytes;
  call.input_bytes = bytes;
  call.nranks = nranks;
  call.root = params.root;
  call.backend = ctx.backend;
  SelectionCache cache;
  return Select(call, DataType::kFloat32, ReduceOp::kSum, ctx, &cache);
}

}  // namespace ciuic::collectives
