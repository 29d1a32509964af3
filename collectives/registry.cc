// The registry's table (see registry.h and collectives/README.md).
#include "collectives/registry.h"

#include <algorithm>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives {
namespace {

namespace g = generators;
using A = Algorithm;
using C = Collective;
using K = AlgorithmKind;

// The name of every algorithm id, in Algorithm order.
constexpr const char* kNames[kNumAlgorithms] = {"ring",     "tree",          "recdoubling", "rabenseifner", "binomial",
                                                "pairwise", "dissemination", "direct",      "p2p",          "bruck",
                                                "linear",   "hier",          "knomial",     "swing",
                                                "pat",      "swinglat"};

// --- The shared-memory family: when it applies, what it costs -------------

bool Refuse(std::string* why, const std::string& what) {
  if (why != nullptr) *why = what;
  return false;
}

bool NeedsPeers(const CallShape& call, std::string* why) {
  return call.nranks >= 2 || Refuse(why, "one rank has nobody to share memory with");
}

bool AllReduceApplies(const CallShape& call, const DirectLimits&, std::string* why) {
  if (!NeedsPeers(call, why)) return false;
  // The schedules stage such input; the direct path reads the input while
  // it writes the output.
  return !call.partial_overlap || Refuse(why, "input and output overlap partly");
}

bool BroadcastApplies(const CallShape& call, const DirectLimits&, std::string* why) { return NeedsPeers(call, why); }

// An exchange copies each rank's whole input into one slot first.
bool ExchangeFits(const CallShape& call, size_t max_bytes, const DirectLimits& l, std::string* why) {
  if (!NeedsPeers(call, why)) return false;
  // Nothing to move returns at once on the schedule path (as in MPI); an
  // exchange would wait for every rank.
  if (call.count == 0) return Refuse(why, "nothing to move");
  const size_t limit = std::min(max_bytes, l.slot_bytes);
  return call.input_bytes <= limit ||
         Refuse(why, "an input of " + std::to_string(call.input_bytes) + " B is over the exchange's " +
                         std::to_string(limit) + " B");
}
bool ReducingExchangeApplies(const CallShape& call, const DirectLimits& l, std::string* why) {
  return ExchangeFits(call, l.exchange_reduce_max_bytes, l, why);
}
bool MovingExchangeApplies(const CallShape& call, const DirectLimits& l, std::string* why) {
  return ExchangeFits(call, l.exchange_move_max_bytes, l, why);
}
bool BarrierApplies(const CallShape& call, const DirectLimits&, std::string* why) { return NeedsPeers(call, why); }

double B(const CallShape& call) { return static_cast<double>(call.bytes); }
double In(const CallShape& call) { return static_cast<double>(call.input_bytes); }

// One-shot: copy in, one hand-off, every rank reduces all n inputs.
// Two-shot: copy in all but the own slice, a hand-off, reduce one slice of
// all n, a hand-off, copy the n reduced slices out.
double AllReduceCost(const CallShape& call, const CostParams& p, const DirectLimits& l) {
  const double b = B(call), n = call.nranks;
  if (std::min(call.bytes, l.slot_bytes) <= l.one_shot_max_bytes) {
    return p.alpha_s + b * p.copy_s_per_byte + NaryReduceSeconds(b, call.nranks, p);
  }
  return 2 * p.alpha_s + b * (n - 1) / n * p.copy_s_per_byte + NaryReduceSeconds(b / n, call.nranks, p) +
         b * p.copy_s_per_byte;
}
// The root copies chunks into its slots while the others copy them out:
// the copies overlap except for the first chunk.
double BroadcastCost(const CallShape& call, const CostParams& p, const DirectLimits& l) {
  const double b = B(call);
  return p.alpha_s + (b + std::min(b, static_cast<double>(l.slot_bytes))) * p.copy_s_per_byte;
}
double ReduceCost(const CallShape& call, const CostParams& p, const DirectLimits&) {
  return p.alpha_s + In(call) * p.copy_s_per_byte + NaryReduceSeconds(In(call), call.nranks, p);
}
double AllGatherCost(const CallShape& call, const CostParams& p, const DirectLimits&) {
  return p.alpha_s + In(call) * (1 + call.nranks) * p.copy_s_per_byte;
}
double ReduceScatterCost(const CallShape& call, const CostParams& p, const DirectLimits&) {
  return p.alpha_s + In(call) * p.copy_s_per_byte + NaryReduceSeconds(In(call) / call.nranks, call.nranks, p);
}
double AllToAllCost(const CallShape& call, const CostParams& p, const DirectLimits&) {
  return p.alpha_s + 2 * In(call) * p.copy_s_per_byte;
}
double BarrierCost(const CallShape&, const CostParams& p, const DirectLimits&) { return p.alpha_s; }

// --- The table --------------------------------------------------------------

AlgorithmInfo ScheduleEntry(C c, A a, const char* summary, Status (*generate)(const CollectiveArgs&, internal::Builder&),
                       bool avoid_oversubscribed = false) {
  AlgorithmInfo e;
  e.collective = c;
  e.id = a;
  e.kind = K::kSchedule;
  e.transports = kAnyTransport;
  e.avoid_when_ranks_outnumber_cpus = avoid_oversubscribed;
  e.summary = summary;
  e.generate = generate;
  return e;
}

AlgorithmInfo HostsEntry(AlgorithmInfo e) {
  e.needs_hosts = true;
  return e;
}

AlgorithmInfo GatherEntry(AlgorithmInfo e) {
  e.gathers = true;
  return e;
}

AlgorithmInfo SharedEntry(C c, K kind, const char* summary,
                     bool (*applies)(const CallShape&, const DirectLimits&, std::string*),
                     double (*cost)(const CallShape&, const CostParams&, const DirectLimits&)) {
  AlgorithmInfo e;
  e.collective = c;
  e.id = A::kShmDirect;
  e.kind = kind;
  e.transports = kShmOnly;
  e.summary = summary;
  e.applies = applies;
  e.cost = cost;
  return e;
}

// Within a collective, the established algorithms come before the research
// ones (k-nomial, Swing, PAT): near-ties keep the established choice, so a new
// entry is picked only where the model says it is clearly cheaper.
std::vector<AlgorithmInfo> MakeRegistry() {
  return {
      SharedEntry(C::kAllReduce, K::kShmDirect,
             "ranks of one host reduce out of each other's memory: one-shot for small chunks, two-shot slices "
             "otherwise",
             AllReduceApplies, AllReduceCost),
      ScheduleEntry(C::kAllReduce, A::kRing, "reduce-scatter + all-gather around a ring, pipelined: bandwidth-optimal",
               g::AllReduceRing),
      ScheduleEntry(C::kAllReduce, A::kTree, "double binary tree, pipelined: log-depth and full bandwidth",
               g::AllReduceDoubleBinaryTree),
      ScheduleEntry(C::kAllReduce, A::kRabenseifner, "recursive halving + recursive doubling",
               g::AllReduceRabenseifner),
      ScheduleEntry(C::kAllReduce, A::kRecursiveDoubling, "log2(n) whole-vector exchanges: latency-optimal",
               g::AllReduceRecursiveDoubling),
      HostsEntry(ScheduleEntry(C::kAllReduce, A::kHierarchical,
                          "reduce-scatter inside each host, a ring per slice across hosts (every local rank a "
                          "leader), all-gather inside: several ranks per host",
                          g::AllReduceHierarchical)),
      ScheduleEntry(C::kAllReduce, A::kKnomial,
                    "recursive k-ing: log_k(n) rounds exchanging the vector with k-1 peers (radix k, default 4)",
                    g::AllReduceKnomial),
      ScheduleEntry(C::kAllReduce, A::kSwing,
                    "Swing: reduce-scatter + all-gather with peers +-1, 3, 5, 11, ... away: bandwidth-optimal, "
                    "short hops on rings and tori, any even n without a fold",
                    g::AllReduceSwing),
      GatherEntry(ScheduleEntry(C::kAllReduce, A::kSwingLatency,
                                "Swing, latency-optimal: log2(n) steps with Swing's peers gathering the inputs, then "
                                "every rank reduces all n in rank order: small vectors on rings and tori",
                                g::AllReduceSwingLatency)),

      SharedEntry(C::kBroadcast, K::kShmDirect, "peers copy out of the root's shared slots", BroadcastApplies,
             BroadcastCost),
      ScheduleEntry(C::kBroadcast, A::kRing, "pipelined chain from the root: large messages", g::BroadcastRing),
      ScheduleEntry(C::kBroadcast, A::kBinomial, "binomial tree: small messages", g::BroadcastBinomial),
      HostsEntry(ScheduleEntry(C::kBroadcast, A::kHierarchical,
                               "a pipelined chain of host leaders, and one inside each host from its leader",
                               g::BroadcastHierarchical)),
      ScheduleEntry(C::kBroadcast, A::kKnomial, "k-nomial tree (radix k, default 4): fewer rounds than binomial",
                    g::BroadcastKnomial),

      SharedEntry(C::kReduce, K::kExchange, "one exchange of small inputs; the root reduces all n in one pass",
             ReducingExchangeApplies, ReduceCost),
      ScheduleEntry(C::kReduce, A::kRing, "ring reduce-scatter, then the segments to the root: large messages",
               g::ReduceRing, /*avoid_oversubscribed=*/true),
      ScheduleEntry(C::kReduce, A::kBinomial, "binomial tree, pipelined", g::ReduceBinomial),
      HostsEntry(ScheduleEntry(C::kReduce, A::kHierarchical,
                               "a pipelined chain inside each host to its leader, then one of the leaders to the root",
                               g::ReduceHierarchical)),
      ScheduleEntry(C::kReduce, A::kKnomial, "k-nomial tree (radix k, default 4), pipelined", g::ReduceKnomial),

      SharedEntry(C::kAllGather, K::kExchange, "one exchange of small inputs", MovingExchangeApplies, AllGatherCost),
      ScheduleEntry(C::kAllGather, A::kRing, "ring: each block forwarded n-1 times, pipelined", g::AllGatherRing),
      ScheduleEntry(C::kAllGather, A::kBruck, "Bruck: ceil(log2 n) rounds, then a local rotation: small blocks",
                    g::AllGatherBruck),
      ScheduleEntry(C::kAllGatherv, A::kRing, "ring over blocks of any size", g::AllGatherRing),
      HostsEntry(ScheduleEntry(C::kAllGather, A::kHierarchical,
                               "each block once to every other host (every local rank a sender), then a ring "
                               "inside each host",
                               g::AllGatherHierarchical)),
      HostsEntry(ScheduleEntry(C::kAllGatherv, A::kHierarchical, "hier over blocks of any size",
                               g::AllGatherHierarchical)),
      ScheduleEntry(C::kAllGather, A::kPat,
                    "PAT: ceil(log2 n) rounds of binomial trees, far peers first with the fewest blocks; blocks "
                    "unpacked as they land",
                    g::AllGatherPat),

      SharedEntry(C::kReduceScatter, K::kExchange, "one exchange of small inputs; each rank reduces its block of all n",
             ReducingExchangeApplies, ReduceScatterCost),
      ScheduleEntry(C::kReduceScatter, A::kRing, "ring of partial sums through scratch", g::ReduceScatterRing),
      ScheduleEntry(C::kReduceScatterv, A::kRing, "ring over blocks of any size", g::ReduceScatterRing),
      HostsEntry(ScheduleEntry(C::kReduceScatter, A::kHierarchical,
                               "a ring reduce-scatter inside each host, then each host's partial of a block to "
                               "its owner (every local rank a sender)",
                               g::ReduceScatterHierarchical)),
      HostsEntry(ScheduleEntry(C::kReduceScatterv, A::kHierarchical, "hier over blocks of any size",
                               g::ReduceScatterHierarchical)),
      ScheduleEntry(C::kReduceScatter, A::kPat,
                    "PAT: ceil(log2 n) rounds of binomial trees toward each owner, near peers first: log-depth",
                    g::ReduceScatterPat),

      SharedEntry(C::kAllToAll, K::kExchange, "one exchange of small inputs", MovingExchangeApplies, AllToAllCost),
      ScheduleEntry(C::kAllToAll, A::kPairwise, "every block straight to its rank", g::AllToAllPairwise),
      ScheduleEntry(C::kAllToAll, A::kBruck,
                    "Bruck: ceil(log2 n) rounds of packed blocks, then a local rotation: small blocks, many ranks",
                    g::AllToAllBruck),

      SharedEntry(C::kBarrier, K::kExchange, "one exchange of nothing through the shared slots", BarrierApplies,
             BarrierCost),
      ScheduleEntry(C::kBarrier, A::kDissemination, "ceil(log2 n) rounds of empty messages", g::BarrierDissemination),
      HostsEntry(ScheduleEntry(C::kBarrier, A::kHierarchical,
                               "arrivals to each host's first rank, dissemination among those, then release",
                               g::BarrierHierarchical)),

      ScheduleEntry(C::kGather, A::kLinear, "every rank's block straight to the root", g::GatherLinear),
      ScheduleEntry(C::kScatter, A::kLinear, "each rank's block straight from the root", g::ScatterLinear),
      ScheduleEntry(C::kAllToAllv, A::kPairwise, "each pair's blocks, of any size, in one message each way",
                    g::AllToAllvPairwise),

      ScheduleEntry(C::kSend, A::kPointToPoint, "one message", g::SendToPeer),
      ScheduleEntry(C::kRecv, A::kPointToPoint, "one message", g::RecvFromPeer),
  };
}

}  // namespace

const char* AlgorithmName(Algorithm a) {
  const auto i = static_cast<size_t>(a);
  return i < static_cast<size_t>(kNumAlgorithms) ? kNames[i] : "?";
}

const char* AlgorithmKindName(AlgorithmKind kind) {
  switch (kind) {
    case AlgorithmKind::kSchedule: return "schedule";
    case AlgorithmKind::kShmDirect: return "shm-direct";
    case AlgorithmKind::kExchange: return "exchange";
  }
  return "?";
}

double NaryReduceSeconds(double bytes, int inputs, const CostParams& p) {
  return bytes * p.gamma_s_per_byte * (inputs + 1) / 3.0;
}

const std::vector<AlgorithmInfo>& Registry() {
  static const std::vector<AlgorithmInfo> registry = MakeRegistry();
  return registry;
}

std::vector<const AlgorithmInfo*> EntriesFor(Collective c) {
  std::vector<const AlgorithmInfo*> out;
  for (const AlgorithmInfo& e : Registry()) {
    if (e.collective == c) out.push_back(&e);
  }
  return out;
}

const AlgorithmInfo* FindEntry(Collective c, Algorithm a) {
  for (const AlgorithmInfo& e : Registry()) {
    if (e.collective == c && e.id == a) return &e;
  }
  return nullptr;
}

std::vector<std::string> AlgorithmNames() {
  std::vector<std::string> out;
  for (const AlgorithmInfo& e : Registry()) {
    if (std::find(out.begin(), out.end(), e.name()) == out.end()) out.emplace_back(e.name());
  }
  return out;
}

std::string AlgorithmNamesFor(Collective c) {
  std::string list;
  for (const AlgorithmInfo* e : EntriesFor(c)) list += std::string(list.empty() ? "" : ", ") + e->name();
  return list;
}

const std::vector<Collective>& AllCollectives() {
  static const std::vector<Collective> all = {
      C::kAllReduce,     C::kBroadcast,      C::kReduce,   C::kAllGather, C::kAllGatherv, C::kReduceScatter,
      C::kReduceScatterv, C::kAllToAll,      C::kBarrier,  C::kSend,      C::kRecv,       C::kGather,
      C::kScatter,        C::kAllToAllv};
  return all;
}

std::vector<Algorithm> AlgorithmsFor(Collective c) {
  std::vector<Algorithm> out;
  for (const AlgorithmInfo* e : EntriesFor(c)) {
    if (e->kind == AlgorithmKind::kSchedule) out.push_back(e->id);
  }
  return out;
}

StatusOr<Algorithm> ParseAlgorithm(Collective c, const std::string& name) {
  for (const AlgorithmInfo* e : EntriesFor(c)) {
    if (name == e->name()) return e->id;
  }
  return InvalidArgumentError("unknown algorithm '" + name + "' for " + CollectiveName(c) +
                              "; valid: " + AlgorithmNamesFor(c));
}

}  // namespace ciuic::collectives
