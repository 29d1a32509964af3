// Names, buffer layouts and the dispatch from (collective, algorithm) to the
// generators in algorithms_allreduce.cc and algorithms_other.cc.
#include "collectives/algorithms.h"

#include <limits>

#include "collectives/schedule_builder.h"

namespace ciuic::collectives {
namespace internal {

Status CheckRankArgs(const char* fn, int rank, int nranks, int nchannels) {
  if (nranks < 1) return InvalidArgumentError(std::string(fn) + ": nranks must be >= 1, got " + std::to_string(nranks));
  if (rank < 0 || rank >= nranks) {
    return InvalidArgumentError(std::string(fn) + ": rank " + std::to_string(rank) + " not in [0, " +
                                std::to_string(nranks) + ")");
  }
  if (nchannels < 1 || nchannels > kMaxChannels) {
    return InvalidArgumentError(std::string(fn) + ": nchannels " + std::to_string(nchannels) + " not in [1, " +
                                std::to_string(kMaxChannels) + "]");
  }
  return Status::Ok();
}

Status CheckRoot(const char* fn, const char* what, int root, int nranks) {
  if (root < 0 || root >= nranks) {
    return InvalidArgumentError(std::string(fn) + ": " + what + " " + std::to_string(root) + " not in [0, " +
                                std::to_string(nranks) + ")");
  }
  return Status::Ok();
}

}  // namespace internal

namespace {

// count * n, or kInvalidArgument when it does not fit.
StatusOr<size_t> Times(const char* fn, size_t count, int n) {
  if (n > 0 && count > std::numeric_limits<size_t>::max() / static_cast<size_t>(n)) {
    return InvalidArgumentError(std::string(fn) + ": count " + std::to_string(count) + " x " + std::to_string(n) +
                                " ranks overflows");
  }
  return count * static_cast<size_t>(n);
}

// Prefix sums of counts (n+1 entries), or an error for a wrong length / overflow.
StatusOr<std::vector<size_t>> Displacements(const char* fn, const std::vector<size_t>& counts, int n) {
  if (counts.size() != static_cast<size_t>(n)) {
    return InvalidArgumentError(std::string(fn) + ": counts has " + std::to_string(counts.size()) +
                                " entries for " + std::to_string(n) + " ranks");
  }
  std::vector<size_t> d(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] > std::numeric_limits<size_t>::max() - d[i]) {
      return InvalidArgumentError(std::string(fn) + ": the sum of counts overflows");
    }
    d[i + 1] = d[i] + counts[i];
  }
  return d;
}

}  // namespace

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "allreduce";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllGather: return "allgather";
    case Collective::kAllGatherv: return "allgatherv";
    case Collective::kReduceScatter: return "reducescatter";
    case Collective::kReduceScatterv: return "reducescatterv";
    case Collective::kAllToAll: return "alltoall";
    case Collective::kBarrier: return "barrier";
    case Collective::kSend: return "send";
    case Collective::kRecv: return "recv";
  }
  return "?";
}

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kRing: return "ring";
    case Algorithm::kTree: return "tree";
    case Algorithm::kRecursiveDoubling: return "recdoubling";
    case Algorithm::kRabenseifner: return "rabenseifner";
    case Algorithm::kBinomial: return "binomial";
    case Algorithm::kPairwise: return "pairwise";
    case Algorithm::kDissemination: return "dissemination";
    case Algorithm::kDirect: return "direct";
  }
  return "?";
}

std::vector<Algorithm> AlgorithmsFor(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return {Algorithm::kRing, Algorithm::kTree, Algorithm::kRabenseifner, Algorithm::kRecursiveDoubling};
    case Collective::kBroadcast:
    case Collective::kReduce: return {Algorithm::kRing, Algorithm::kBinomial};
    case Collective::kAllGather:
    case Collective::kAllGatherv:
    case Collective::kReduceScatter:
    case Collective::kReduceScatterv: return {Algorithm::kRing};
    case Collective::kAllToAll: return {Algorithm::kPairwise};
    case Collective::kBarrier: return {Algorithm::kDissemination};
    case Collective::kSend:
    case Collective::kRecv: return {Algorithm::kDirect};
  }
  return {};
}

StatusOr<Algorithm> ParseAlgorithm(Collective c, const std::string& name) {
  const std::vector<Algorithm> valid = AlgorithmsFor(c);
  for (Algorithm a : valid) {
    if (name == AlgorithmName(a)) return a;
  }
  if (name == "tree" && (c == Collective::kBroadcast || c == Collective::kReduce)) return Algorithm::kBinomial;
  std::string list;
  for (Algorithm a : valid) list += std::string(list.empty() ? "" : ", ") + AlgorithmName(a);
  return InvalidArgumentError("unknown algorithm '" + name + "' for " + CollectiveName(c) + "; valid: " + list);
}

StatusOr<BufferLayout> LayoutFor(const CollectiveArgs& a, bool in_place) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("LayoutFor", a.rank, a.nranks, a.nchannels));
  BufferLayout l;
  using Alias = BufferLayout::Alias;
  switch (a.collective) {
    case Collective::kAllReduce:
      l.input_count = l.output_count = a.count;
      if (in_place) l.alias = Alias::kInputInOutput;
      break;
    case Collective::kBroadcast:
    case Collective::kReduce: {
      CIUIC_RETURN_IF_ERROR(internal::CheckRoot("LayoutFor", "root", a.root, a.nranks));
      const bool root = a.rank == a.root;
      const bool bcast = a.collective == Collective::kBroadcast;
      l.input_count = (bcast && !root) ? 0 : a.count;
      l.output_count = (!bcast && !root) ? 0 : a.count;
      if (in_place && root) l.alias = Alias::kInputInOutput;
      break;
    }
    case Collective::kAllGather:
    case Collective::kReduceScatter: {
      CIUIC_ASSIGN_OR_RETURN(const size_t total, Times("LayoutFor", a.count, a.nranks));
      const bool gather = a.collective == Collective::kAllGather;
      l.input_count = gather ? a.count : total;
      l.output_count = gather ? total : a.count;
      if (in_place) {
        l.alias = gather ? Alias::kInputInOutput : Alias::kOutputInInput;
        l.alias_offset = a.count * static_cast<size_t>(a.rank);
      }
      break;
    }
    case Collective::kAllGatherv:
    case Collective::kReduceScatterv: {
      CIUIC_ASSIGN_OR_RETURN(const std::vector<size_t> d, Displacements("LayoutFor", a.counts, a.nranks));
      const bool gather = a.collective == Collective::kAllGatherv;
      l.input_count = gather ? a.counts[a.rank] : d.back();
      l.output_count = gather ? d.back() : a.counts[a.rank];
      if (in_place) {
        l.alias = gather ? Alias::kInputInOutput : Alias::kOutputInInput;
        l.alias_offset = d[a.rank];
      }
      break;
    }
    case Collective::kAllToAll: {
      CIUIC_ASSIGN_OR_RETURN(const size_t total, Times("LayoutFor", a.count, a.nranks));
      l.input_count = l.output_count = total;
      if (in_place) l.alias = Alias::kInputInOutput;
      break;
    }
    case Collective::kBarrier: break;
    case Collective::kSend: l.input_count = a.count; break;
    case Collective::kRecv: l.output_count = a.count; break;
  }
  return l;
}

StatusOr<Schedule> MakeSchedule(Algorithm algorithm, const CollectiveArgs& a) {
  const Collective c = a.collective;
  auto unsupported = [&]() -> Status {
    std::string list;
    for (Algorithm x : AlgorithmsFor(c)) list += std::string(list.empty() ? "" : ", ") + AlgorithmName(x);
    return InvalidArgumentError(std::string("algorithm '") + AlgorithmName(algorithm) + "' does not implement " +
                                CollectiveName(c) + "; valid: " + list);
  };
  switch (c) {
    case Collective::kAllReduce:
      switch (algorithm) {
        case Algorithm::kRing: return AllReduceRing(a.rank, a.nranks, a.count, a.nchannels);
        case Algorithm::kTree: return AllReduceDoubleBinaryTree(a.rank, a.nranks, a.count, a.nchannels);
        case Algorithm::kRecursiveDoubling: return AllReduceRecursiveDoubling(a.rank, a.nranks, a.count, a.nchannels);
        case Algorithm::kRabenseifner: return AllReduceRabenseifner(a.rank, a.nranks, a.count, a.nchannels);
        default: return unsupported();
      }
    case Collective::kBroadcast:
      if (algorithm == Algorithm::kRing) return BroadcastRing(a.rank, a.nranks, a.count, a.nchannels, a.root);
      if (algorithm == Algorithm::kBinomial) return BroadcastBinomial(a.rank, a.nranks, a.count, a.nchannels, a.root);
      return unsupported();
    case Collective::kReduce:
      if (algorithm == Algorithm::kRing) return ReduceRing(a.rank, a.nranks, a.count, a.nchannels, a.root);
      if (algorithm == Algorithm::kBinomial) return ReduceBinomial(a.rank, a.nranks, a.count, a.nchannels, a.root);
      return unsupported();
    case Collective::kAllGather:
      if (algorithm == Algorithm::kRing) return AllGatherRing(a.rank, a.nranks, a.count, a.nchannels);
      return unsupported();
    case Collective::kAllGatherv:
      if (algorithm == Algorithm::kRing) return AllGathervRing(a.rank, a.nranks, a.counts, a.nchannels);
      return unsupported();
    case Collective::kReduceScatter:
      if (algorithm == Algorithm::kRing) return ReduceScatterRing(a.rank, a.nranks, a.count, a.nchannels);
      return unsupported();
    case Collective::kReduceScatterv:
      if (algorithm == Algorithm::kRing) return ReduceScattervRing(a.rank, a.nranks, a.counts, a.nchannels);
      return unsupported();
    case Collective::kAllToAll:
      if (algorithm == Algorithm::kPairwise) return AllToAllPairwise(a.rank, a.nranks, a.count, a.nchannels);
      return unsupported();
    case Collective::kBarrier:
      if (algorithm == Algorithm::kDissemination) return BarrierDissemination(a.rank, a.nranks);
      return unsupported();
    case Collective::kSend:
      if (algorithm == Algorithm::kDirect) return SendDirect(a.rank, a.nranks, a.count, a.peer);
      return unsupported();
    case Collective::kRecv:
      if (algorithm == Algorithm::kDirect) return RecvDirect(a.rank, a.nranks, a.count, a.peer);
      return unsupported();
  }
  return unsupported();
}

// Shared by the v / non-v generators in algorithms_other.cc.
namespace internal {
StatusOr<std::vector<size_t>> CheckedDisplacements(const char* fn, const std::vector<size_t>& counts, int n) {
  return Displacements(fn, counts, n);
}
StatusOr<size_t> CheckedTimes(const char* fn, size_t count, int n) { return Times(fn, count, n); }
}  // namespace internal

}  // namespace ciuic::collectives
