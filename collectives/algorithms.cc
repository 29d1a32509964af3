// Names, argument checks, buffer layouts, and MakeSchedule: the dispatch
// from (collective, algorithm) to the registry's generators (algorithms/).
#include "collectives/algorithms.h"

#include <algorithm>
#include <limits>

#include "collectives/registry.h"
#include "collectives/schedule_builder.h"

namespace ciuic::collectives {

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

bool UsesChannels(Collective c) {
  return c != Collective::kBarrier && c != Collective::kSend && c != Collective::kRecv && c != Collective::kAllToAllv;
}

// Runs even with nothing to move: a barrier synchronises, a message of 0
// elements is still a message, and an all-to-all-v rank with nothing of its
// own still takes its peers' empty messages.
bool AlwaysRuns(Collective c) {
  return c == Collective::kBarrier || c == Collective::kSend || c == Collective::kRecv || c == Collective::kAllToAllv;
}

// The extent (elements) that counts[i] elements at displs[i] reach.
size_t Extent(const size_t* counts, const size_t* displs, int n) {
  size_t e = 0;
  for (int i = 0; i < n; ++i) e = std::max(e, counts[i] == 0 ? 0 : displs[i] + counts[i]);
  return e;
}

// Elements of the whole collective (0: nothing to move).
size_t TotalCount(const CollectiveArgs& a) {
  switch (a.collective) {
    case Collective::kAllGatherv:
    case Collective::kReduceScatterv: {
      size_t t = 0;
      for (size_t c : a.counts) t += c;
      return t;
    }
    default: return a.count;
  }
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
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
    case Collective::kAllToAllv: return "alltoallv";
  }
  return "?";
}

StatusOr<Collective> ParseCollective(const std::string& name) {
  std::string list;
  for (Collective c : AllCollectives()) {
    if (name == CollectiveName(c)) return c;
    list += std::string(list.empty() ? "" : ", ") + CollectiveName(c);
  }
  return InvalidArgumentError("unknown collective '" + name + "'; valid: " + list);
}

Status CheckArgs(const CollectiveArgs& a) {
  const char* fn = CollectiveName(a.collective);
  if (a.nranks < 1) return InvalidArgumentError(std::string(fn) + ": nranks must be >= 1, got " + std::to_string(a.nranks));
  if (a.rank < 0 || a.rank >= a.nranks) {
    return InvalidArgumentError(std::string(fn) + ": rank " + std::to_string(a.rank) + " not in [0, " +
                                std::to_string(a.nranks) + ")");
  }
  const int nch = UsesChannels(a.collective) ? a.nchannels : 1;
  if (nch < 1 || nch > kMaxChannels) {
    return InvalidArgumentError(std::string(fn) + ": nchannels " + std::to_string(nch) + " not in [1, " +
                                std::to_string(kMaxChannels) + "]");
  }
  if (a.aggregation < 0 || (a.aggregation & (a.aggregation - 1)) != 0) {
    return InvalidArgumentError(std::string(fn) + ": aggregation " + std::to_string(a.aggregation) +
                                " is not a power of two (or 0: all)");
  }
  if (a.radix != 0 && (a.radix < 2 || a.radix > kMaxRadix)) {
    return InvalidArgumentError(std::string(fn) + ": radix " + std::to_string(a.radix) + " not in [2, " +
                                std::to_string(kMaxRadix) + "] (0 = the default, " + std::to_string(kDefaultRadix) +
                                ")");
  }
  if (!a.host_of.empty()) {
    // A host map as CommDecision writes it: one entry per rank, hosts
    // numbered in order of first appearance (so none is empty).
    if (a.host_of.size() != static_cast<size_t>(a.nranks)) {
      return InvalidArgumentError(std::string(fn) + ": host_of has " + std::to_string(a.host_of.size()) +
                                  " entries for " + std::to_string(a.nranks) + " ranks");
    }
    int next = 0;
    for (size_t r = 0; r < a.host_of.size(); ++r) {
      if (a.host_of[r] < 0 || a.host_of[r] > next) {
        return InvalidArgumentError(std::string(fn) + ": host_of[" + std::to_string(r) + "] = " +
                                    std::to_string(a.host_of[r]) + ": hosts must be numbered 0, 1, ... in order of "
                                    "first appearance");
      }
      if (a.host_of[r] == next) ++next;
    }
  }
  auto in_range = [&](const char* what, int r) -> Status {
    if (r < 0 || r >= a.nranks) {
      return InvalidArgumentError(std::string(fn) + ": " + what + " " + std::to_string(r) + " not in [0, " +
                                  std::to_string(a.nranks) + ")");
    }
    return Status::Ok();
  };
  switch (a.collective) {
    case Collective::kBroadcast:
    case Collective::kReduce: return in_range("root", a.root);
    case Collective::kGather:
    case Collective::kScatter:
      CIUIC_RETURN_IF_ERROR(in_range("root", a.root));
      return Times(fn, a.count, a.nranks).status();
    case Collective::kSend:
    case Collective::kRecv:
      CIUIC_RETURN_IF_ERROR(in_range("peer", a.peer));
      if (a.peer == a.rank) return InvalidArgumentError(std::string(fn) + ": peer " + std::to_string(a.peer) + " is this rank");
      if (a.tag < 0 || a.tag >= kMaxTag) {
        return InvalidArgumentError(std::string(fn) + ": tag " + std::to_string(a.tag) + " not in [0, " +
                                    std::to_string(kMaxTag) + ")");
      }
      return Status::Ok();
    case Collective::kAllToAllv: {
      const size_t n = static_cast<size_t>(a.nranks);
      if (a.counts.size() != 4 * n) {
        return InvalidArgumentError(std::string(fn) + ": counts has " + std::to_string(a.counts.size()) +
                                    " entries for " + std::to_string(n) + " ranks (want 4 per rank)");
      }
      for (size_t part : {size_t{0}, 2 * n}) {  // send, then receive: count + displacement fits
        for (size_t i = 0; i < n; ++i) {
          if (a.counts[part + i] > std::numeric_limits<size_t>::max() / 16 - a.counts[part + n + i]) {
            return InvalidArgumentError(std::string(fn) + ": a count plus its displacement overflows");
          }
        }
      }
      const size_t r = static_cast<size_t>(a.rank);
      if (a.counts[r] != a.counts[2 * n + r]) {
        return InvalidArgumentError(std::string(fn) + ": this rank sends itself " + std::to_string(a.counts[r]) +
                                    " elements but receives " + std::to_string(a.counts[2 * n + r]) + " from itself");
      }
      return Status::Ok();
    }
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return Times(fn, a.count, a.nranks).status();
    case Collective::kAllGatherv:
    case Collective::kReduceScatterv: return Displacements(fn, a.counts, a.nranks).status();
    default: return Status::Ok();
  }
}

StatusOr<BufferLayout> LayoutFor(const CollectiveArgs& a, bool in_place) {
  CIUIC_RETURN_IF_ERROR(CheckArgs(a));
  BufferLayout l;
  using Alias = BufferLayout::Alias;
  switch (a.collective) {
    case Collective::kAllReduce:
      l.input_count = l.output_count = a.count;
      if (in_place) l.alias = Alias::kInputInOutput;
      break;
    case Collective::kBroadcast:
    case Collective::kReduce: {
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
    case Collective::kGather:
    case Collective::kScatter: {
      CIUIC_ASSIGN_OR_RETURN(const size_t total, Times("LayoutFor", a.count, a.nranks));
      const bool root = a.rank == a.root;
      const bool gather = a.collective == Collective::kGather;
      l.input_count = gather ? a.count : root ? total : 0;
      l.output_count = gather ? (root ? total : 0) : a.count;
      if (in_place && root) {
        l.alias = gather ? Alias::kInputInOutput : Alias::kOutputInInput;
        l.alias_offset = a.count * static_cast<size_t>(a.root);
      }
      break;
    }
    case Collective::kAllToAllv: {
      const int n = a.nranks;
      l.input_count = Extent(&a.counts[0], &a.counts[n], n);
      l.output_count = Extent(&a.counts[2 * n], &a.counts[3 * n], n);
      break;
    }
    case Collective::kBarrier: break;
    case Collective::kSend: l.input_count = a.count; break;
    case Collective::kRecv: l.output_count = a.count; break;
  }
  return l;
}

StatusOr<Schedule> MakeSchedule(Algorithm algorithm, const CollectiveArgs& a) {
  const AlgorithmInfo* e = FindEntry(a.collective, algorithm);
  if (e == nullptr || e->kind != AlgorithmKind::kSchedule) {
    std::string list;
    for (Algorithm x : AlgorithmsFor(a.collective)) list += std::string(list.empty() ? "" : ", ") + AlgorithmName(x);
    return InvalidArgumentError(std::string("algorithm '") + AlgorithmName(algorithm) + "' has no schedule for " +
                                CollectiveName(a.collective) + "; valid: " + list);
  }
  CIUIC_RETURN_IF_ERROR(CheckArgs(a));
  internal::Builder b(CollectiveName(a.collective), e->name(), a.rank, a.nranks);
  if (!AlwaysRuns(a.collective)) {
    const size_t total = TotalCount(a);
    if (total == 0) return b.Take();
    if (a.nranks == 1) {
      b.Copy(internal::In(0, total), internal::Out(0, total));
      return b.Take();
    }
  }
  CIUIC_RETURN_IF_ERROR(e->generate(a, b));
  return b.Take();
}

}  // namespace ciuic::collectives
