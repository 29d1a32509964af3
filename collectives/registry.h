// The registry: one table of every algorithm of every collective. Each
// entry says which collective it implements, its name, its kind, the
// transports it runs on, and either its schedule generator (kind
// kSchedule: costed by the cost model from the schedules themselves) or,
// for the shared-memory family, when it applies and what it costs.
// Selection (selection.h), the tools (ciuic-info, ciuic-tune, the perf
// tools' -a), the tests' matrices and the docs all take their lists from
// here; collectives/README.md says how to add an algorithm.
//
// Thread contract: the table is immutable; every function is pure.
#ifndef CIUIC_COLLECTIVES_REGISTRY_H_
#define CIUIC_COLLECTIVES_REGISTRY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ciuic/status.h"
#include "collectives/algorithms.h"
#include "collectives/cost_model.h"
#include "transport/backend_kind.h"

namespace ciuic::collectives {

namespace internal {
class Builder;
}

enum class AlgorithmKind : uint8_t {
  // A schedule per rank, run by the executor over links (any transport).
  kSchedule,
  // Ranks of one host read and reduce straight out of each other's shared
  // memory, chunk by chunk (shm_direct.h: all-reduce, broadcast).
  kShmDirect,
  // One exchange of every rank's whole input through the same shared slots
  // (shm_direct.h: small reduce, all-gather, reduce-scatter, all-to-all,
  // barrier).
  kExchange,
};
// "schedule", "shm-direct", "exchange".
const char* AlgorithmKindName(AlgorithmKind kind);

// A set of transports (bit 1 << BackendKind).
using TransportSet = uint8_t;
constexpr TransportSet TransportBit(transport::BackendKind k) { return static_cast<TransportSet>(1u << static_cast<int>(k)); }
inline constexpr TransportSet kAnyTransport = TransportBit(transport::BackendKind::kShm) |
                                              TransportBit(transport::BackendKind::kTcp) |
                                              TransportBit(transport::BackendKind::kVerbs);
inline constexpr TransportSet kShmOnly = TransportBit(transport::BackendKind::kShm);

// The limits of the shared-memory family (from ShmDirectOptions): what
// decides whether one of its entries applies to a call, and what it costs.
struct DirectLimits {
  size_t slot_bytes = 512u << 10;                // CIUIC_CHUNK_SIZE
  size_t one_shot_max_bytes = 16u << 10;         // all-reduce chunks reduced by every rank
  size_t exchange_reduce_max_bytes = 256u << 10; // reduce, reduce-scatter input per rank
  size_t exchange_move_max_bytes = 64u << 10;    // all-gather, all-to-all input per rank
};

// What selection knows of one call: the same on every rank (as the
// arguments of a collective must be), except partial_overlap.
struct CallShape {
  Collective collective = Collective::kAllReduce;
  size_t count = 0;        // elements, as the collective counts them (CollectiveArgs)
  size_t bytes = 0;        // the collective's size (the vector; n blocks; the v forms' total)
  size_t input_bytes = 0;  // one rank's input
  size_t elem_size = 4;
  int nranks = 1;
  int root = 0;
  transport::BackendKind backend = transport::BackendKind::kShm;
  // Input and output overlap without being the same buffer (all-reduce).
  bool partial_overlap = false;
};

struct AlgorithmInfo {
  Collective collective = Collective::kAllReduce;
  Algorithm id = Algorithm::kRing;
  AlgorithmKind kind = AlgorithmKind::kSchedule;
  TransportSet transports = kAnyTransport;
  // Left out of the model's choice where ranks outnumber their CPUs (every
  // message then costs a context switch, which the model does not count).
  bool avoid_when_ranks_outnumber_cpus = false;
  // A candidate for the model only when ranks span several hosts and some
  // host has several (the hierarchical schedules; elsewhere they are the
  // flat ones with extra steps). Forced, it runs anywhere.
  bool needs_hosts = false;
  // Its scratch holds every rank's vector (n times the call's, on every
  // rank alike): CIUIC_SCRATCH_MAX bounds it (ScratchLimitBytes).
  bool gathers = false;
  const char* summary = "";  // one line: what it does, when it wins
  // kSchedule: appends one rank's steps (algorithms/generators.h).
  Status (*generate)(const CollectiveArgs& args, internal::Builder& builder) = nullptr;
  // The shared-memory kinds: whether it can run `call` (else `why_not`
  // says why) and its predicted seconds.
  bool (*applies)(const CallShape& call, const DirectLimits& limits, std::string* why_not) = nullptr;
  double (*cost)(const CallShape& call, const CostParams& params, const DirectLimits& limits) = nullptr;

  const char* name() const { return AlgorithmName(id); }
  bool RunsOn(transport::BackendKind k) const { return (transports & TransportBit(k)) != 0; }
};

// The most scratch a gathering entry may take for a call whose buffer is
// `call_bytes`: max(CIUIC_SCRATCH_MAX, twice the buffer). Every rank
// computes the same, so a call over it fails alike everywhere.
inline size_t ScratchLimitBytes(size_t call_bytes, size_t scratch_max) {
  return std::max(scratch_max, 2 * call_bytes);
}

// Every entry: grouped by collective, each group's preferred first (the
// order near-ties are broken in).
const std::vector<AlgorithmInfo>& Registry();
// The entries for `c`, in registry order.
std::vector<const AlgorithmInfo*> EntriesFor(Collective c);
// The entry for (c, a), or null when `a` does not implement `c`.
const AlgorithmInfo* FindEntry(Collective c, Algorithm a);
// Every algorithm name, each once, in registry order.
std::vector<std::string> AlgorithmNames();
// The names of the entries for `c`, comma-separated ("ring, tree, ...").
std::string AlgorithmNamesFor(Collective c);
// Every collective, in enum order.
const std::vector<Collective>& AllCollectives();

// The shared-memory family's predictions (the entries' cost functions,
// exposed for tests and ciuic-sim). An n-input reduction of `bytes`
// costs (inputs + 1) / 3 two-input passes: it reads every input and
// writes the result once.
double NaryReduceSeconds(double bytes, int inputs, const CostParams& params);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_REGISTRY_H_
