// Collectives and their algorithms: the names, the arguments a schedule
// generator takes, the buffer layouts, and MakeSchedule, which runs the
// generator the registry (registry.h) lists for an algorithm. The
// generators themselves live one per file in algorithms/.
//
// Every schedule is correct for every nranks >= 1 (powers of two or not),
// count 0, count < nranks and uneven splits. In place: how each generator
// stays correct when input and output alias (BufferLayout from LayoutFor)
// is stated in its file. Determinism: each element's final value is
// combined once in one fixed order and then copied to the other ranks,
// except recursive doubling, where every rank combines the same operands
// in the same order (lower rank group first).
//
// Thread contract: pure functions.
#ifndef CIUIC_COLLECTIVES_ALGORITHMS_H_
#define CIUIC_COLLECTIVES_ALGORITHMS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ciuic/status.h"
#include "collectives/schedule.h"

namespace ciuic::collectives {

inline constexpr int kMaxChannels = 64;

enum class Collective : uint8_t {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kAllGatherv,
  kReduceScatter,
  kReduceScatterv,
  kAllToAll,
  kBarrier,
  kSend,
  kRecv,
  kGather,
  kScatter,
  kAllToAllv,
};
inline constexpr int kNumCollectives = 14;

// An algorithm's identity; what it does for each collective it implements,
// its name and its kind are the registry's (registry.h).
enum class Algorithm : uint8_t {
  kRing,               // "ring"
  kTree,               // "tree": the double binary tree (all-reduce)
  kRecursiveDoubling,  // "recdoubling"
  kRabenseifner,       // "rabenseifner"
  kBinomial,           // "binomial" (broadcast, reduce)
  kPairwise,           // "pairwise" (all-to-all)
  kDissemination,      // "dissemination" (barrier)
  kShmDirect,          // "direct": ranks of one host through each other's memory
  kPointToPoint,       // "p2p" (send, recv)
  kBruck,              // "bruck" (all-gather)
  kLinear,             // "linear" (gather, scatter: the root and every other rank)
  kHierarchical,       // "hier": inside hosts, then across them per slice, then inside again
  kKnomial,            // "knomial": radix-k trees (broadcast, reduce) and recursive k-ing (all-reduce)
  kSwing,              // "swing": Swing all-reduce, bandwidth-optimal (reduce-scatter + all-gather)
  kPat,                // "pat": NCCL's Parallel Aggregated Trees (all-gather, reduce-scatter)
  kSwingLatency,       // "swinglat": Swing's latency-optimal all-reduce (log2 n whole-vector steps)
};
inline constexpr int kNumAlgorithms = 16;

// The k-nomial algorithms' radix when CollectiveArgs::radix is 0.
inline constexpr int kDefaultRadix = 4;
inline constexpr int kMaxRadix = 64;

// "allreduce", "broadcast", "reduce", "allgather", "allgatherv",
// "reducescatter", "reducescatterv", "alltoall", "barrier", "send", "recv",
// "gather", "scatter", "alltoallv".
const char* CollectiveName(Collective c);
// Parses a CollectiveName. Errors: kInvalidArgument listing the names.
StatusOr<Collective> ParseCollective(const std::string& name);
// The registry's name of `a` ("ring", "tree", ...).
const char* AlgorithmName(Algorithm a);
// The schedule algorithms the registry has for `c` (kind kSchedule), the
// preferred one first.
std::vector<Algorithm> AlgorithmsFor(Collective c);
// Parses the name of an algorithm the registry has for `c` (of any kind).
// Errors: kInvalidArgument listing the valid names for `c`.
StatusOr<Algorithm> ParseAlgorithm(Collective c, const std::string& name);

// Everything a generator needs. `count` is per rank where the collective
// says so: all-reduce, broadcast, reduce: elements of the vector;
// all-gather: elements each rank contributes; reduce-scatter: elements each
// rank receives; all-to-all: elements sent to each peer; send/recv: the
// message; gather: elements each rank contributes; scatter: elements each
// rank receives. The v-variants use `counts` (one per rank) instead; their
// buffers are the blocks packed rank after rank (displacements are the
// prefix sums). All-to-all-v's `counts` are this rank's 4 x nranks entries:
// send counts, send displacements, receive counts, receive displacements
// (elements, per peer). Barrier uses neither.
struct CollectiveArgs {
  Collective collective = Collective::kAllReduce;
  int rank = 0;
  int nranks = 1;
  size_t count = 0;
  std::vector<size_t> counts;  // all-gatherv, reduce-scatterv, all-to-all-v
  int root = 0;                // broadcast, reduce, gather, scatter
  int peer = -1;               // send, recv
  int tag = 0;                 // send, recv: messages of one tag match in order
  int nchannels = 1;
  // The k-nomial algorithms' radix, in [2, kMaxRadix]; 0 = kDefaultRadix.
  // Every rank must pass the same.
  int radix = 0;
  // PAT's aggregation: at most this many blocks per message and scratch for
  // about aggregation x log2(n / aggregation) blocks; a power of two. 0 =
  // all (ceil(log2 n) messages) while n blocks stay under 16 Mi elements,
  // else the largest whose scratch does. Every rank must pass the same.
  int aggregation = 0;
  // Each rank's host, numbered in order of first appearance (empty: every
  // rank a host of its own). Only the hierarchical algorithms read it.
  std::vector<int> host_of{};
  // The ranks as a torus of these sizes, row-major (the last dimension
  // fastest). Only Swing reads it: on even sizes (or 1) that multiply to
  // the ranks it runs on (the rank count, less one for an odd count) it
  // swings through the dimensions in turn; otherwise (or empty) it treats
  // the ranks as one ring.
  std::vector<int> torus_dims{};
};

// Tags of send/recv: [0, kMaxTag). Each tag in use between two ranks has a
// link of its own (the channel TagChannel(tag); tag 0 shares the
// collectives' channel 0), so messages match in order per (peer, tag).
inline constexpr int kMaxTag = 1 << 16;
inline constexpr int TagChannel(int tag) { return tag == 0 ? 0 : 2 * kMaxChannels + tag; }

// The input/output element counts of `args.rank` and, with in_place, how
// they overlap (the NCCL conventions): all-reduce, all-to-all: input ==
// output; broadcast, reduce: input == output on the root (broadcast's
// input has 0 elements elsewhere, reduce's output too); all-gather(v):
// input = output + displacement of the rank; reduce-scatter(v): output =
// input + displacement of the rank; gather (root): input = output +
// root x count; scatter (root): output = input + root x count; all-to-all-v:
// the extents its displacements and counts reach, never in place. Barrier:
// 0 and 0. Send/recv ignore in_place. Errors: those of CheckArgs.
StatusOr<BufferLayout> LayoutFor(const CollectiveArgs& args, bool in_place);

// The radix the k-nomial algorithms use for `args` (CollectiveArgs::radix,
// 0 meaning kDefaultRadix).
inline int RadixOf(const CollectiveArgs& args) { return args.radix == 0 ? kDefaultRadix : args.radix; }

// kInvalidArgument naming the problem unless: nranks >= 1, rank in [0,
// nranks), nchannels in [1, kMaxChannels], root (broadcast, reduce, gather,
// scatter) and peer (send, recv: another rank) in range, a tag in [0,
// kMaxTag), counts with one entry per rank (v forms; all-to-all-v 4 per
// rank, its own send and receive counts equal), and element totals that do
// not overflow.
Status CheckArgs(const CollectiveArgs& args);

// The schedule of `args.rank` for `algorithm`: the registry's generator
// for (args.collective, algorithm), after CheckArgs; one rank, or nothing
// to move (barrier and send/recv aside), is a copy or nothing.
// Errors: CheckArgs'; kInvalidArgument when `algorithm` has no schedule
// for args.collective (the message lists those that do).
StatusOr<Schedule> MakeSchedule(Algorithm algorithm, const CollectiveArgs& args);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_ALGORITHMS_H_
