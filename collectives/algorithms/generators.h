// Private: the schedule generators, one per file of this folder, each
// listed in the registry (collectives/registry.cc). MakeSchedule checks the
// arguments (ranks, channels, root or peer, counts and their sums) and
// handles one rank and nothing to move before it calls a generator, so a
// generator only ever sees nranks >= 2 and something to move (except
// barrier and send/recv, which always run). A generator appends the steps
// of `a.rank` to `b` (the schedule's name, rank and size are set).
//
// What every generator guarantees (algorithms.h): correct for any nranks,
// count < nranks and uneven splits, with segments from EvenSplit so every
// rank computes the same split; with nchannels > 1 the data is cut into
// contiguous parts, each an independent instance on its own channel
// (rings alternate direction), never fewer than one element per part.
// Each file says how it stays correct in place (the layouts of LayoutFor).
#ifndef CIUIC_COLLECTIVES_ALGORITHMS_GENERATORS_H_
#define CIUIC_COLLECTIVES_ALGORITHMS_GENERATORS_H_

#include <utility>
#include <vector>

#include "ciuic/status.h"
#include "collectives/algorithms.h"
#include "collectives/schedule_builder.h"

namespace ciuic::collectives::generators {

// What every generator builds with (schedule_builder.h).
using internal::Builder;
using internal::EffectiveChannels;
using internal::EvenPart;
using internal::FloorPow2;
using internal::In;
using internal::Mod;
using internal::Out;
using internal::Ring;
using internal::Scr;
using internal::Span;

Status AllReduceRing(const CollectiveArgs& a, Builder& b);
Status AllReduceDoubleBinaryTree(const CollectiveArgs& a, Builder& b);
Status AllReduceRecursiveDoubling(const CollectiveArgs& a, Builder& b);
Status AllReduceRabenseifner(const CollectiveArgs& a, Builder& b);
Status AllReduceSwing(const CollectiveArgs& a, Builder& b);
Status AllReduceSwingLatency(const CollectiveArgs& a, Builder& b);
Status AllReduceKnomial(const CollectiveArgs& a, Builder& b);
Status BroadcastKnomial(const CollectiveArgs& a, Builder& b);
Status ReduceKnomial(const CollectiveArgs& a, Builder& b);
Status AllToAllBruck(const CollectiveArgs& a, Builder& b);
Status AllReduceHierarchical(const CollectiveArgs& a, Builder& b);
Status BroadcastHierarchical(const CollectiveArgs& a, Builder& b);
Status ReduceHierarchical(const CollectiveArgs& a, Builder& b);
Status AllGatherHierarchical(const CollectiveArgs& a, Builder& b);      // also all-gatherv
Status ReduceScatterHierarchical(const CollectiveArgs& a, Builder& b);  // also reduce-scatterv
Status BarrierHierarchical(const CollectiveArgs& a, Builder& b);
Status BroadcastRing(const CollectiveArgs& a, Builder& b);
Status BroadcastBinomial(const CollectiveArgs& a, Builder& b);
Status ReduceBinomial(const CollectiveArgs& a, Builder& b);
Status ReduceRing(const CollectiveArgs& a, Builder& b);
Status AllGatherRing(const CollectiveArgs& a, Builder& b);  // also all-gatherv
Status AllGatherBruck(const CollectiveArgs& a, Builder& b);
Status AllGatherPat(const CollectiveArgs& a, Builder& b);
Status ReduceScatterPat(const CollectiveArgs& a, Builder& b);
Status ReduceScatterRing(const CollectiveArgs& a, Builder& b);  // also reduce-scatterv
Status AllToAllPairwise(const CollectiveArgs& a, Builder& b);
Status BarrierDissemination(const CollectiveArgs& a, Builder& b);
Status GatherLinear(const CollectiveArgs& a, Builder& b);
Status ScatterLinear(const CollectiveArgs& a, Builder& b);
Status AllToAllvPairwise(const CollectiveArgs& a, Builder& b);
Status SendToPeer(const CollectiveArgs& a, Builder& b);
Status RecvFromPeer(const CollectiveArgs& a, Builder& b);

// Swing (allreduce_swing.cc): the peer of virtual rank `vr` in step `step`
// among an even p ranks on one ring, and the block order a rank keeps its
// vector in (p = 2^k).
int SwingPeer(int vr, int step, int p);
std::vector<int> SwingBlockOrder(int vr, int p);

// Swing's peers on an even p ranks laid out as a torus of `dims` (row-major,
// the last dimension fastest): each step moves along one dimension, the
// dimensions taken in turn while they have steps left (ceil(log2 d) for a
// dimension of d), by Swing's rho of that dimension's own step count.
// Dimensions that are not all even (or 1) multiplying to p (or none) give
// one ring of p.
class SwingPeers {
 public:
  SwingPeers(int p, const std::vector<int>& dims);
  int p() const { return p_; }
  int steps() const { return static_cast<int>(plan_.size()); }
  int Peer(int vr, int step) const;
  // The rank y becomes when x and q, peers of one step, trade places: the
  // coordinate they differ in reflected, which maps every step's pairs
  // onto pairs (the parity that sets a step's direction flips with it).
  int Mirror(int y, int x, int q) const;
  const std::vector<int>& dims() const { return dims_; }

 private:
  int p_;
  std::vector<int> dims_;                  // {p} for one ring
  std::vector<std::pair<int, int>> plan_;  // per step: (dimension, its own step)
  std::vector<int> rho_;                   // one ring: per step, rho mod p
};
std::vector<int> SwingBlockOrder(int vr, const SwingPeers& peers);
// The blocks (ranks, ascending) virtual rank x sends in each reduce-scatter
// step on any even p: those the step's tree reaches whose last such step it
// is (see allreduce_swing.cc). For p = 2^k, the halves of SwingBlockOrder.
std::vector<std::vector<int>> SwingSends(int x, const SwingPeers& peers);
// The blocks x receives in each reduce-scatter step, ascending: what the
// step's peer sends, the mirror of x's own `sends` (SwingSends(x)), so no
// peer's sends are computed (O(p) a rank instead of O(p log p)).
std::vector<std::vector<int>> SwingRecvs(int x, const std::vector<std::vector<int>>& sends, const SwingPeers& peers);
// The most messages any rank sends in Swing's reduce-scatter on p = 2^k
// ranks (one ring) when it keeps its vector in rank order (one per run of
// blocks), and the largest p that uses that layout (at most two messages a
// step on average: 1, 3, 6 for 2, 4, 8 ranks).
int SwingRuns(int p);
// The latency-optimal variant's scratch order: the virtual ranks whose
// input vectors `vr` holds after its log2(p) gathering steps.
std::vector<int> SwingGatherOrder(int vr, int p);
std::vector<int> SwingGatherOrder(int vr, const SwingPeers& peers);
inline constexpr int kSwingRankOrderRanks = 8;

// A rank's place in a tree: its parent (-1 at the root) and its children.
struct TreeLinks {
  int parent = -1;
  std::vector<int> children;
};

}  // namespace ciuic::collectives::generators

#endif  // CIUIC_COLLECTIVES_ALGORITHMS_GENERATORS_H_
