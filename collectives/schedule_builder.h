// Internal helpers for the schedule generators (algorithms/*.cc): a builder
// that appends steps and returns their indices, range makers, splits and
// ring orderings. Thread contract: a Builder is a local
// value of one generator call.
#ifndef CIUIC_COLLECTIVES_SCHEDULE_BUILDER_H_
#define CIUIC_COLLECTIVES_SCHEDULE_BUILDER_H_

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/partition.h"
#include "collectives/schedule.h"

namespace ciuic::collectives::internal {

inline Range In(size_t offset, size_t count) { return Range{BufKind::kInput, offset, count}; }
inline Range Out(size_t offset, size_t count) { return Range{BufKind::kOutput, offset, count}; }
inline Range Scr(size_t offset, size_t count) { return Range{BufKind::kScratch, offset, count}; }
inline Range In(std::pair<size_t, size_t> oc) { return In(oc.first, oc.second); }
inline Range Out(std::pair<size_t, size_t> oc) { return Out(oc.first, oc.second); }
inline Range Span(BufKind buf, size_t offset, size_t count) { return Range{buf, offset, count}; }

// a mod n in [0, n) for any sign of a.
inline int Mod(long long a, int n) {
  const long long m = a % n;
  return static_cast<int>(m < 0 ? m + n : m);
}

// Part i of `count` split evenly into `parts`, shifted by `base`: (offset, count).
inline std::pair<size_t, size_t> EvenPart(size_t base, size_t count, size_t parts, size_t i) {
  const size_t b = EvenSplitOffset(count, parts, i);
  return {base + b, EvenSplitOffset(count, parts, i + 1) - b};
}

// Largest power of two <= n (n >= 1).
inline int FloorPow2(int n) {
  int p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

// The per-rank block counts of a collective made of blocks (all-gather,
// reduce-scatter and their v forms): `counts`, or nranks x `count`.
inline std::vector<size_t> BlockCounts(const CollectiveArgs& a) {
  if (a.collective == Collective::kAllGatherv || a.collective == Collective::kReduceScatterv) return a.counts;
  return std::vector<size_t>(static_cast<size_t>(a.nranks), a.count);
}

// Prefix sums of `counts` (n + 1 entries; MakeSchedule checked they fit).
inline std::vector<size_t> PrefixSums(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) d[i + 1] = d[i] + counts[i];
  return d;
}

// How many channels a vector of `count` elements uses: each part gets at
// least one element when possible.
inline int EffectiveChannels(size_t count, int nchannels) {
  if (count == 0) return 1;
  return static_cast<int>(std::min<size_t>(static_cast<size_t>(nchannels), count));
}

// Ring order: forward visits ranks 0, 1, ..., n-1; backward 0, n-1, ..., 1.
class Ring {
 public:
  Ring(int n, bool backward) : n_(n), backward_(backward) {}
  int Pos(int rank) const { return backward_ ? Mod(-static_cast<long long>(rank), n_) : rank; }
  int RankAt(long long pos) const { return backward_ ? Mod(-pos, n_) : Mod(pos, n_); }

 private:
  int n_;
  bool backward_;
};

class Builder {
 public:
  Builder(const char* collective, const char* algorithm, int rank, int nranks) {
    s_.algorithm = std::string(collective) + "/" + algorithm;
    s_.rank = rank;
    s_.nranks = nranks;
    s_.nchannels = 1;
  }
  void Channels(int n) { s_.nchannels = std::max(s_.nchannels, n); }
  // The channels a vector of `count` elements uses (EffectiveChannels),
  // declared on the schedule.
  int UseChannels(size_t count, int nchannels) {
    const int n = EffectiveChannels(count, nchannels);
    Channels(n);
    return n;
  }
  void Scratch(size_t count) { s_.scratch_count = std::max(s_.scratch_count, count); }

  int Send(int peer, int ch, Range src, std::vector<int> deps = {}, DepMode mode = DepMode::kWhole) {
    Step st = Base(StepOp::kSend, ch, std::move(deps), mode);
    st.send_peer = peer;
    st.src = src;
    return Add(std::move(st));
  }
  int Recv(int peer, int ch, Range dst, std::vector<int> deps = {}, DepMode mode = DepMode::kWhole) {
    Step st = Base(StepOp::kRecv, ch, std::move(deps), mode);
    st.recv_peer = peer;
    st.dst = dst;
    return Add(std::move(st));
  }
  int RecvReduce(int peer, int ch, Range src, Range dst, std::vector<int> deps = {},
                 DepMode mode = DepMode::kWhole) {
    Step st = Base(StepOp::kRecvReduce, ch, std::move(deps), mode);
    st.recv_peer = peer;
    st.src = src;
    st.dst = dst;
    return Add(std::move(st));
  }
  int RecvReduceSend(int from, int to, int ch, Range src, Range dst, std::vector<int> deps = {},
                     DepMode mode = DepMode::kWhole) {
    Step st = Base(StepOp::kRecvReduceSend, ch, std::move(deps), mode);
    st.recv_peer = from;
    st.send_peer = to;
    st.src = src;
    st.dst = dst;
    return Add(std::move(st));
  }
  int RecvCopySend(int from, int to, int ch, Range dst, std::vector<int> deps = {},
                   DepMode mode = DepMode::kWhole) {
    Step st = Base(StepOp::kRecvCopySend, ch, std::move(deps), mode);
    st.recv_peer = from;
    st.send_peer = to;
    st.dst = dst;
    return Add(std::move(st));
  }
  int Copy(Range src, Range dst, std::vector<int> deps = {}, DepMode mode = DepMode::kWhole) {
    Step st = Base(StepOp::kCopy, 0, std::move(deps), mode);
    st.src = src;
    st.dst = dst;
    return Add(std::move(st));
  }
  int Reduce(std::vector<Range> inputs, Range dst, std::vector<int> deps = {}, DepMode mode = DepMode::kWhole) {
    Step st = Base(StepOp::kReduce, 0, std::move(deps), mode);
    st.inputs = std::move(inputs);
    st.dst = dst;
    return Add(std::move(st));
  }

  // One step that is done when all of `deps` are: an empty copy. Later
  // steps depend on it instead of on every one of `deps`, which keeps a
  // schedule with many parallel steps linear in size.
  int Join(std::vector<int> deps) {
    if (deps.size() == 1) return deps[0];
    return Copy(Scr(0, 0), Scr(0, 0), std::move(deps));
  }

  Schedule Take() { return std::move(s_); }

 private:
  static Step Base(StepOp op, int ch, std::vector<int> deps, DepMode mode) {
    Step st;
    st.op = op;
    st.channel = ch;
    st.deps = std::move(deps);
    st.dep_mode = mode;
    return st;
  }
  int Add(Step st) {
    // Drop "no dep" placeholders (-1) so callers can pass optional deps.
    st.deps.erase(std::remove(st.deps.begin(), st.deps.end(), -1), st.deps.end());
    s_.steps.push_back(std::move(st));
    return static_cast<int>(s_.steps.size()) - 1;
  }

  Schedule s_;
};

}  // namespace ciuic::collectives::internal

#endif  // CIUIC_COLLECTIVES_SCHEDULE_BUILDER_H_
