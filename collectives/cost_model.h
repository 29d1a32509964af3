// Alpha-beta-gamma cost model over schedules (selection.h chooses with it).
//
// A prediction comes from the schedules themselves, not from per-algorithm
// formulas, so a new generator is costed without new code:
// - Critical path: the steps of all ranks form one graph (deps, message
//   sender -> receiver, and the FIFO order of messages on a link). Each step
//   is a stream of N chunks (the executor's: PipelineChunkBytes, at most
//   chunk_bytes) with a per-chunk latency l (sum of its stages: reduce or
//   copy, then chunk * beta to send, the first chunk also the message's
//   alpha) and a period q (its slowest stage, as stages overlap across
//   chunks): first chunk done at start + l, last at max(input's last + l,
//   start + l + (N-1) q). kPerChunk deps pass the stream through (pipelining),
//   kWhole deps wait for the last chunk; a forwarding step stores ahead of
//   the earlier sends on its outgoing link, as the executor does.
// - Resource bound: per rank, bytes sent (plus an alpha a message), bytes
//   received and bytes reduced/copied, each at its rate; concurrent steps
//   share them (two trees or channels do not double a NIC).
// The prediction is the larger of the two. Up to kMaxExactRanks ranks every
// rank's schedule is generated. Beyond, a schedule whose ranks are images
// of rank 0's under a rank symmetry (FindSymmetry) is costed exactly from
// rank 0's steps alone, which is what lets ciuic-sim reach 65,536 ranks and
// more; any other is costed from every rank's schedule while the largest
// schedule of ranks 0, 1, n/2 and n-1 (its steps and the ranges its
// reductions name) x nranks stays under CostParams::max_exact_steps, and
// estimated beyond from the busiest of those four (its resource bound plus
// each message step's alpha at its level): cheaper, rougher.
//
// Thread contract: pure functions.
#ifndef CIUIC_COLLECTIVES_COST_MODEL_H_
#define CIUIC_COLLECTIVES_COST_MODEL_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "ciuic/status.h"
#include "transport/backend_kind.h"
#include "collectives/algorithms.h"
#include "collectives/schedule.h"

namespace ciuic::collectives {

inline constexpr int kMaxExactRanks = 128;

struct CostParams {
  double alpha_s = 3e-6;             // per message (its first chunk; the rest stream at beta)
  double beta_s_per_byte = 8e-11;    // link time per byte (1 / bandwidth)
  double gamma_s_per_byte = 5e-11;   // reduction time per byte of result
  double copy_s_per_byte = 3e-11;    // local copy per byte (slot -> buffer, kCopy)
  size_t chunk_bytes = 512u << 10;   // the largest pipelining unit, a slot (CIUIC_CHUNK_SIZE)
  size_t elem_size = 4;              // bytes per element (Predict converts bytes to a count)
  int nchannels = 1;                 // as passed to the generators
  int radix = 0;                     // the k-nomial radix passed to the generators (0 = default)
  int aggregation = 0;               // PAT's aggregation passed to the generators (0 = all)
  int root = 0;                      // broadcast / reduce
  // Some host runs more ranks than it has CPUs (rank 0 decides, so every
  // rank selects alike): selection leaves out the entries the registry
  // marks avoid_when_ranks_outnumber_cpus (the ring reduce).
  bool ranks_outnumber_cpus = false;
  // Above kMaxExactRanks, a schedule with no rank symmetry is still costed
  // from every rank's schedule when its largest sampled schedule x nranks is at most this
  // (0: never; ciuic-sim raises it, selection keeps it 0 to stay cheap).
  size_t max_exact_steps = 0;
  // One machine whose CPUs move the bytes (tcp over loopback, shm): > 0
  // says the ranks share this many cores, so a rank's sending, receiving
  // and reducing are serial work of its thread, and all ranks' work
  // together is bounded by the cores. 0: links move bytes on their own
  // (NICs), the default. ciuic-sim --cpu-cores sets it, and a communicator
  // whose ranks share one machine without outnumbering its CPUs.
  double cpu_cores = 0;
  // With cpu_cores and a host map: the CPU time a rank spends per byte it
  // sends or receives between hosts (a socket's copies), where the link,
  // not the CPU, sets the wire's rate (a NIC, a rate-limited link). 0: the
  // network's beta is CPU time too (tcp over loopback).
  double net_cpu_s_per_byte = 0;
  // With cpu_cores: the CPU time a rank spends per byte it sends or
  // receives, measured with both ranks of a pair sending at once (a ring's
  // step), where a one-way stream shows only its slower side (tcp's sender
  // runs more of the stack than its receiver). 0: the wire's beta is the
  // CPU's time too. intra_*: inside a host (two levels); dram_*: out of
  // DRAM (AtWorkingSet). Measured with the pair busy at once, so sharing
  // DRAM (SharingTheMachine) does not slow them further.
  double exchange_s_per_byte = 0;
  double intra_exchange_s_per_byte = 0;
  double dram_exchange_s_per_byte = 0;
  double dram_intra_exchange_s_per_byte = 0;
  // With cpu_cores: (a step's bytes, factor) by increasing bytes: a step of
  // B bytes costs exchange_s_per_byte x the factor at B (log-linear between
  // points, the end points' beyond), since a lone step that fits the
  // transport's buffers runs faster than the stream measured for
  // exchange_s_per_byte (tuning file: exchange_steps). Empty: 1 at every
  // size. intra_*: inside a host.
  std::vector<std::pair<double, double>> exchange_steps;
  std::vector<std::pair<double, double>> intra_exchange_steps;
  // The measured exchange includes the receiver's copy of each chunk out of
  // the peer's memory (ciuic-tune over shm), so a received chunk that is
  // only copied (kRecv, kRecvCopySend) costs no copy of its own, and one
  // that is reduced (kRecvReduce, kRecvReduceSend) gamma less a copy.
  // intra_*: inside a host.
  bool exchange_copies_received = false;
  bool intra_exchange_copies_received = false;
  // A torus network (dimensions multiplying to the rank count; ranks in
  // row-major order): each message crosses the links of its dimension-order
  // route, each hop adds hop_latency_s, and messages sent at the same index
  // of their ranks' sends share the links they cross (contention). Empty:
  // no topology (a link per rank). Costed from every rank's schedule only.
  std::vector<int> torus_dims;
  double hop_latency_s = 1e-7;
  // A fat tree (fattree_levels > 0): ranks fill leaf switches of
  // fattree_down ranks; each level groups fattree_down groups of the level
  // below; a group's links up and down carry its ranks' bandwidth divided
  // by fattree_oversub. Messages cross their ranks' links and the groups'
  // links up to the lowest common level, sharing them as on a torus. At
  // most one of torus and fat tree.
  int fattree_down = 0;
  int fattree_levels = 0;
  double fattree_oversub = 1;
  // A rail-optimised cluster (rail_leaf_hosts > 0; needs host_of): the
  // i-th rank of every host has a NIC of its own on rail i, and rail i's
  // leaf switches each join rail_leaf_hosts hosts; leaves meet at a spine
  // whose links carry a leaf's bandwidth / rail_oversub. A message between
  // hosts crosses its two NIC links, and also its leaves' links to the
  // spine when it changes rail or leaf; inside a host it costs the intra
  // figures and crosses no network link. No host link is shared (a NIC per
  // rank). At most one of torus, fat tree, rails and dragonfly.
  int rail_leaf_hosts = 0;
  double rail_oversub = 1;
  // A dragonfly (dragonfly_group > 0): ranks fill groups of dragonfly_group
  // in order; inside a group every pair is one hop apart (its routers fully
  // connected, local links not the bottleneck); each pair of groups has one
  // global link each way carrying dragonfly_global ranks' bandwidth.
  // Minimal routes: a message between groups crosses its two rank links
  // and its groups' global link (three hops: local, global, local), and
  // messages between the same two groups share that link.
  int dragonfly_group = 0;
  double dragonfly_global = 1;
  // Two levels: each rank's host (empty: one level, alpha/beta for every
  // message). With a map, a message between ranks of one host costs
  // intra_alpha_s/intra_beta_s_per_byte (shm) and one between hosts
  // alpha_s/beta_s_per_byte (the network), and the ranks of a host share
  // its link: their inter-host bytes (at beta; each message's alpha is its
  // rank's) add up in the resource bound. A map whose size is not the rank
  // count counts as none.
  std::vector<int> host_of;
  double intra_alpha_s = 1e-6;
  double intra_beta_s_per_byte = 1e-10;
  // Memory: the copy rate by working set, (bytes, seconds per byte) by
  // increasing bytes, from a cache's rate to DRAM's (ciuic-tune measures
  // it; tuning file: memory). A call's working set (a rank's input and
  // output) lands between two points, log-linear in bytes; how far its
  // copy rate has fallen from the first point toward the last moves the
  // rates above the same way toward the dram_* figures (for ranks sharing
  // a machine, beta and exchange only beyond shared_cache_bytes, below).
  // Fewer than two points (or a dram rate of 0): one rate at every size.
  // Predict applies it (AtWorkingSet).
  std::vector<std::pair<double, double>> memory_curve;
  double dram_beta_s_per_byte = 0;
  double dram_intra_beta_s_per_byte = 0;
  double dram_copy_s_per_byte = 0;
  double dram_gamma_s_per_byte = 0;
  // DRAM shared by the cores (tuning file: memory_shared): each of
  // dram_shared_cores cores copying out of DRAM at once takes
  // dram_shared_copy_s_per_byte, against dram_copy_s_per_byte alone. With
  // cpu_cores, ranks working at once on the machine's cores slow the dram_*
  // figures by that ratio (SharingTheMachine). 0: not measured, no slowdown.
  int dram_shared_cores = 0;
  double dram_shared_copy_s_per_byte = 0;
  // The last-level cache the cores share (tuning file: memory_shared ...
  // beyond), 0: unknown. For ranks sharing a machine (SharingTheMachine:
  // all their working sets together) only the part beyond it reaches
  // DRAM, so the sharing slowdown scales by max(0, 1 - this / working
  // set); and bytes that cross between cores (beta, exchange), never in
  // the receiver's private caches, move toward their dram figures only as
  // the copy rate falls beyond it (past the curve's end: all the way).
  // AtWorkingSet alone (one rank's working set) does not use it.
  double shared_cache_bytes = 0;
};

// `p` with its rates moved toward the dram_* figures for a working set of
// `bytes` (CostParams::memory_curve).
CostParams AtWorkingSet(const CostParams& p, double bytes);

// `p` for `nranks` ranks sharing one machine (p.cpu_cores > 0): the call's
// working set is all the ranks' together (they share the last-level
// cache), so it is `bytes` (one rank's) x nranks for AtWorkingSet; and the
// dram_* rates are slowed for min(cpu_cores, nranks) cores reading DRAM at
// once, by the ratio of dram_shared_copy_s_per_byte to
// dram_copy_s_per_byte: linearly from one core to dram_shared_cores, and
// in proportion beyond (DRAM's total rate reached), scaled by the share of
// the working set beyond shared_cache_bytes, where beta and exchange also
// follow the curve only beyond it; not the exchange
// figures (measured with the pair busy at once) nor, where
// net_cpu_s_per_byte is known, the network's beta (a link's own rate).
// Without cpu_cores: AtWorkingSet(p, bytes).
CostParams SharingTheMachine(const CostParams& p, double bytes, int nranks);

// `p`'s figures inside a host (intra_*) taken from `shm`, the parameters
// of the backend that runs there.
void TakeIntraFrom(const CostParams& shm, CostParams* p);

// The factor of `steps` (CostParams::exchange_steps) at a step of `bytes`:
// 1 where it is empty.
double ExchangeStepFactor(const std::vector<std::pair<double, double>>& steps, double bytes);

// Whether `p` names a network topology (a torus, a fat tree, rails or a
// dragonfly).
bool HasTopology(const CostParams& p);

// Rough defaults per backend, to be replaced by calibration (ciuic-tune):
// shm: alpha 1 us, 10 GB/s; tcp: alpha 20 us, 1.25 GB/s (10 GbE); verbs:
// alpha 3 us, 12.5 GB/s (100 Gb/s); gamma 20 GB/s, copy 33 GB/s for all.
CostParams DefaultCostParams(transport::BackendKind kind);

// How a prediction was made: from every rank's schedule; from rank 0's
// alone where every other rank's schedule is an image of it under a rank
// symmetry (the same times, so the same result as kExact); or estimated
// from rank 0's loads and message count (no symmetry, nranks >
// kMaxExactRanks).
enum class PredictionMethod : uint8_t { kExact, kSymmetric, kEstimate };

struct Prediction {
  double seconds = 0;             // max(critical_path_s, resource_bound_s)
  double critical_path_s = 0;
  // How the critical path splits: per-message alpha, bytes on the wire
  // (bytes x beta), local reductions and copies. With contention_s their
  // sum is critical_path_s; an estimate's is `seconds` (its latency, then its
  // busiest resource as bandwidth or compute).
  double latency_s = 0, bandwidth_s = 0, compute_s = 0;
  // The critical path's time waiting on links other messages share (a
  // torus), part of critical_path_s.
  double contention_s = 0;
  double resource_bound_s = 0;    // the busiest rank's (or host link's) busiest resource
  // What bounds `seconds`: "critical path", or the busiest resource
  // ("rank 3 egress", "host 1 link out", "rank 0 reductions and copies").
  std::string busiest;
  size_t max_messages_per_rank = 0;  // message steps of the busiest rank
  size_t max_bytes_sent_per_rank = 0;
  size_t total_bytes_sent = 0;    // over all ranks (symmetric and estimate: rank 0's x nranks)
  PredictionMethod method = PredictionMethod::kExact;
  bool exact() const { return method != PredictionMethod::kEstimate; }
};

// "exact", "symmetric", "estimate".
const char* PredictionMethodName(PredictionMethod m);

// Rank symmetries of schedules: rank q's schedule is rank 0's with every
// peer x replaced by g_q(x): translation x + q (rings, dissemination),
// xor x ^ q (recursive doubling, halving, on powers of two), swing x + q for
// even q and q - x for odd q (Swing; even n only), digits: x + q digit by
// digit in base `radix` without carries (recursive k-ing, on powers of k;
// xor is base 2).
struct Symmetry {
  enum class Kind : uint8_t { kTranslation, kXor, kSwing, kDigits };
  Kind kind = Kind::kTranslation;
  int radix = 2;  // kDigits: the base

  static const Symmetry kTranslation, kXor, kSwing;
  static constexpr Symmetry Digits(int radix) { return Symmetry{Kind::kDigits, radix}; }
  friend constexpr bool operator==(const Symmetry& a, const Symmetry& b) {
    return a.kind == b.kind && (a.kind != Kind::kDigits || a.radix == b.radix);
  }
  friend constexpr bool operator!=(const Symmetry& a, const Symmetry& b) { return !(a == b); }
};
inline constexpr Symmetry Symmetry::kTranslation{Symmetry::Kind::kTranslation, 2};
inline constexpr Symmetry Symmetry::kXor{Symmetry::Kind::kXor, 2};
inline constexpr Symmetry Symmetry::kSwing{Symmetry::Kind::kSwing, 2};
// "translation", "xor", "swing", "digits".
const char* SymmetryName(Symmetry sym);
// g_q(x) among n ranks (-1 for digits in a base below 2).
int SymmetryImage(Symmetry sym, int q, int x, int n);
// Whether `sq` is `s0`'s image (s0.rank == 0) under g_{sq.rank}: the same
// steps, ops, counts, channels and deps, with peers mapped.
bool IsSymmetryImage(const Schedule& s0, const Schedule& sq, Symmetry sym);
// The first symmetry under which the schedules of every rank up to 32
// ranks, and beyond of 16 sampled ranks (rank 0's neighbours, n/2's, the
// last, and a spread), are images of rank 0's. Errors: kNotFound when none
// holds; those of MakeSchedule.
StatusOr<Symmetry> FindSymmetry(Algorithm algorithm, const CollectiveArgs& args);
// The prediction from rank 0's schedule alone, the other ranks being its
// images under `sym`: its graph with each receive fed by the matching send
// of the sender's image in rank 0's own steps. Equal to PredictSchedules
// of all ranks when the symmetry holds for every rank. Errors:
// kInvalidArgument for a host map (two levels break the symmetry) or
// messages that do not pair up.
StatusOr<Prediction> PredictSymmetric(const Schedule& rank0, Symmetry sym, const CostParams& params);

// Costs the schedules of all ranks (schedules[r].rank == r) of elements of
// params.elem_size bytes. Errors: kInvalidArgument when the schedules do not
// match (CheckMessageMatching) or wait on each other in a cycle.
StatusOr<Prediction> PredictSchedules(const std::vector<Schedule>& schedules, const CostParams& params);

// The executor's pipelining chunk for a call (the communicator passes it to
// the executor, Predict costs steps with it): a step's block (an all-reduce's
// count / nranks, a v-variant's total / nranks, else the count) cut into at
// least 4 chunks where that keeps them at 64 KiB or more, so receiving,
// reducing and sending overlap even when the block is no larger than a slot.
// 0: the slot size (point to point, barrier, all-to-all-v). Links cap it at
// their slot size. A function of the call's arguments only (every rank's
// is the same). `counts`: the v-variants' per-rank counts.
size_t PipelineChunkBytes(Collective collective, size_t count, const std::vector<size_t>& counts, size_t elem_size,
                          int nranks);

// Generates the schedules of `algorithm` for `collective` with count =
// ceil(bytes / elem_size) (per rank where the collective says so, see
// CollectiveArgs; the v-variants use that count on every rank, all-to-all-v
// to every peer) and costs
// them, at the rates of the call's working set (AtWorkingSet), in chunks of
// min(chunk_bytes, PipelineChunkBytes) as the executor runs them. Errors:
// those of MakeSchedule and PredictSchedules.
StatusOr<Prediction> Predict(Collective collective, Algorithm algorithm, size_t bytes, int nranks,
                             const CostParams& params);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_COST_MODEL_H_
