// Schedule generators: one function per (collective, algorithm), each
// returning the schedule of one rank (schedule.h). All are correct for every
// nranks >= 1 (powers of two or not), count 0, count < nranks and uneven
// splits; segments come from EvenSplit (partition.h) so every rank computes
// the same split. With nchannels > 1 the data is cut into nchannels
// contiguous parts and each part runs as an independent instance of the
// algorithm on its own channel (rings alternate direction); a part never
// gets fewer than one element, so fewer channels are used for tiny counts
// (Schedule::nchannels says how many channel ids a schedule uses).
//
// In-place: how each generator stays correct when input and output alias
// (BufferLayout from LayoutFor) is stated per function. Determinism: each
// element's final value is combined once in one fixed order and then copied
// to the other ranks, except recursive doubling, where every rank combines
// the same operands in the same order (lower rank group first).
//
// Errors of every generator: kInvalidArgument for nranks < 1, rank or root
// or peer outside [0, nranks), nchannels outside [1, kMaxChannels], counts
// of the wrong length, element counts whose total overflows.
// Thread contract: pure functions.
#ifndef CIUIC_COLLECTIVES_ALGORITHMS_H_
#define CIUIC_COLLECTIVES_ALGORITHMS_H_

#include <cstddef>
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
};

enum class Algorithm : uint8_t {
  kRing,               // "ring"
  kTree,               // "tree": double binary tree (all-reduce)
  kRecursiveDoubling,  // "recdoubling"
  kRabenseifner,       // "rabenseifner"
  kBinomial,           // "binomial" (broadcast, reduce; "tree" is accepted for it there)
  kPairwise,           // "pairwise" (all-to-all)
  kDissemination,      // "dissemination" (barrier)
  kDirect,             // "direct" (send, recv)
};

// "allreduce", "broadcast", "reduce", "allgather", "allgatherv",
// "reducescatter", "reducescatterv", "alltoall", "barrier", "send", "recv".
const char* CollectiveName(Collective c);
// The names above ("ring", "tree", ...).
const char* AlgorithmName(Algorithm a);
// The algorithms implemented for `c`, the preferred one first.
std::vector<Algorithm> AlgorithmsFor(Collective c);
// Parses an algorithm name for `c` ("tree" means binomial for broadcast and
// reduce). Errors: kInvalidArgument listing the valid names for `c`.
StatusOr<Algorithm> ParseAlgorithm(Collective c, const std::string& name);

// Everything a generator needs. `count` is per rank where the collective
// says so: all-reduce, broadcast, reduce: elements of the vector;
// all-gather: elements each rank contributes; reduce-scatter: elements each
// rank receives; all-to-all: elements sent to each peer; send/recv: the
// message. The v-variants use `counts` (one per rank) instead; their
// buffers are the blocks packed rank after rank (displacements are the
// prefix sums). Barrier uses neither.
struct CollectiveArgs {
  Collective collective = Collective::kAllReduce;
  int rank = 0;
  int nranks = 1;
  size_t count = 0;
  std::vector<size_t> counts;  // all-gatherv, reduce-scatterv
  int root = 0;                // broadcast, reduce
  int peer = -1;               // send, recv
  int nchannels = 1;
};

// The input/output element counts of `args.rank` and, with in_place, how
// they overlap (the NCCL conventions): all-reduce, all-to-all: input ==
// output; broadcast, reduce: input == output on the root (broadcast's
// input has 0 elements elsewhere, reduce's output too); all-gather(v):
// input = output + displacement of the rank; reduce-scatter(v): output =
// input + displacement of the rank. Barrier: 0 and 0. Send/recv ignore
// in_place. Errors: those of the generators.
StatusOr<BufferLayout> LayoutFor(const CollectiveArgs& args, bool in_place);

// The schedule of `args.rank` for `algorithm`. Errors: those of the
// generator; kInvalidArgument when `algorithm` does not implement
// args.collective.
StatusOr<Schedule> MakeSchedule(Algorithm algorithm, const CollectiveArgs& args);

// --- All-reduce (count elements; input and output count elements) ---------

// Ring: reduce-scatter then all-gather around a ring, n segments per channel
// part, recv-reduce-send / recv-copy-send steps pipelined chunk by chunk; odd
// channels run the ring backwards. Works in the output buffer; every input
// element is read once before its output element is written (the same
// memory in-place), so in-place needs no copy. 2n-1 steps per channel.
StatusOr<Schedule> AllReduceRing(int rank, int nranks, size_t count, int nchannels);

// Double binary tree: two complementary in-order binary trees (a rank that
// is a leaf in one is interior in the other: tree 1 mirrors tree 0 for even
// nranks and shifts it by one for odd), each reducing half of the data up
// to its root and broadcasting it down, pipelined chunk by chunk (kPerChunk
// deps from reduce-up to broadcast-down). Each tree part runs on its own
// channel, so the schedule uses 2 x nchannels channel ids. Works in the
// output buffer; a rank's output part is written only after its input part
// was read (chunk by chunk, identical ranges in-place).
StatusOr<Schedule> AllReduceDoubleBinaryTree(int rank, int nranks, size_t count, int nchannels);

// Recursive doubling: log2(p) rounds exchanging the whole vector with rank
// ^ 2^k (p = largest power of two <= nranks; the first 2(n-p) ranks fold in
// pairs before and unfold after). Every rank reduces the full vector, lower
// rank group first, so the results are identical. Ping-pongs between output
// and scratch (count elements); the input is only read in the first round
// (in-place: the output is not written before that round's reads are done).
StatusOr<Schedule> AllReduceRecursiveDoubling(int rank, int nranks, size_t count, int nchannels);

// Rabenseifner: reduce-scatter by recursive halving, then all-gather by
// recursive doubling (non-powers of two folded as above). Works in the
// output buffer; each element is reduced once by its owner. In-place: an
// input element is read (first halving round) before its output element is
// written, and never after.
StatusOr<Schedule> AllReduceRabenseifner(int rank, int nranks, size_t count, int nchannels);

// --- Broadcast (count elements from root's input to every output) -------

// Pipelined chain root -> root+1 -> ... (backwards on odd channels) with
// recv-copy-send steps. The root copies input to output (a no-op in-place).
StatusOr<Schedule> BroadcastRing(int rank, int nranks, size_t count, int nchannels, int root);
// Binomial tree (ceil(log2 n) rounds), for small messages; forwards chunk by
// chunk (kPerChunk).
StatusOr<Schedule> BroadcastBinomial(int rank, int nranks, size_t count, int nchannels, int root);

// --- Reduce (count elements from every input to root's output) ----------

// Binomial tree; non-roots accumulate in scratch (they have no output), the
// root in its output. Pipelined chunk by chunk. In-place root: each chunk
// of input is read by the step that writes the same output chunk.
StatusOr<Schedule> ReduceBinomial(int rank, int nranks, size_t count, int nchannels, int root);
// Ring reduce-scatter into scratch (root: output) then every rank sends its
// reduced segment straight to the root. For large messages.
StatusOr<Schedule> ReduceRing(int rank, int nranks, size_t count, int nchannels, int root);

// --- All-gather / reduce-scatter (ring) ---------------------------------

// count elements per rank; output = nranks blocks, rank-major. The own block
// is copied (no-op in-place) and sent from the input; the n-1 other blocks
// are received into the output and forwarded.
StatusOr<Schedule> AllGatherRing(int rank, int nranks, size_t count, int nchannels);
// counts[r] elements from rank r, blocks packed at prefix-sum offsets.
StatusOr<Schedule> AllGathervRing(int rank, int nranks, const std::vector<size_t>& counts, int nchannels);
// count elements per rank; input = nranks blocks, rank-major; rank r ends
// with block r reduced. Partial sums travel through two scratch slots per
// channel (scratch = 2 x count); only the last step writes the output, and
// reads exactly the input block it aliases in-place.
StatusOr<Schedule> ReduceScatterRing(int rank, int nranks, size_t count, int nchannels);
// counts[r] elements for rank r (scratch = 2 x max count).
StatusOr<Schedule> ReduceScattervRing(int rank, int nranks, const std::vector<size_t>& counts, int nchannels);

// --- All-to-all, barrier, point to point ---------------------------------

// Pairwise exchange: block (r+i)%n of the input goes to rank (r+i)%n, block
// (r-i)%n of the output comes from rank (r-i)%n (rank-major blocks of count
// elements; Range offsets index that layout). Every send is issued at once;
// a block is received only chunk by chunk after the same block was sent,
// which makes in-place (input == output) safe without scratch.
StatusOr<Schedule> AllToAllPairwise(int rank, int nranks, size_t count, int nchannels);
// Dissemination: ceil(log2 n) rounds of count-0 messages to rank + 2^k.
StatusOr<Schedule> BarrierDissemination(int rank, int nranks);
// One kSend of input[0, count) to `peer` / one kRecv into output[0, count)
// from `peer`, on channel 0 (a count-0 message when count is 0).
StatusOr<Schedule> SendDirect(int rank, int nranks, size_t count, int peer);
StatusOr<Schedule> RecvDirect(int rank, int nranks, size_t count, int peer);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_ALGORITHMS_H_
