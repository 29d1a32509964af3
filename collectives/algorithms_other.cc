// Generators of the collectives other than all-reduce: broadcast, reduce,
// all-gather(v), reduce-scatter(v), all-to-all, barrier, send/recv.
#include <algorithm>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/schedule_builder.h"

namespace ciuic::collectives {
namespace {

using internal::Builder;
using internal::EffectiveChannels;
using internal::EvenPart;
using internal::In;
using internal::Mod;
using internal::Out;
using internal::Ring;
using internal::Scr;

constexpr DepMode kPerChunk = DepMode::kPerChunk;

// All-gather of blocks counts[0..n-1] packed at displs (shared by the
// regular and the v form).
StatusOr<Schedule> AllGatherBlocks(const char* fn, const char* name, int rank, int n,
                                   const std::vector<size_t>& counts, int nchannels) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs(fn, rank, n, nchannels));
  CIUIC_ASSIGN_OR_RETURN(const std::vector<size_t> displs, internal::CheckedDisplacements(fn, counts, n));
  Builder b(name, "ring", rank, n);
  if (displs.back() == 0) return b.Take();
  const size_t mine = counts[rank];
  b.Copy(In(0, mine), Out(displs[rank], mine));  // a no-op in-place
  if (n == 1) return b.Take();
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  const int nch = EffectiveChannels(largest, nchannels);
  b.Channels(nch);
  for (int c = 0; c < nch; ++c) {
    const Ring ring(n, c % 2 == 1);
    const int p = ring.Pos(rank);
    const int next = ring.RankAt(p + 1), prev = ring.RankAt(p - 1);
    auto part = [&](int blk) { return EvenPart(displs[blk], counts[blk], nch, c); };
    b.Send(next, c, In(EvenPart(0, mine, nch, c)));
    for (int j = 1; j < n; ++j) {
      const Range dst = Out(part(ring.RankAt(p - j)));
      if (j < n - 1) {
        b.RecvCopySend(prev, next, c, dst);
      } else {
        b.Recv(prev, c, dst);
      }
    }
  }
  return b.Take();
}

// Reduce-scatter of blocks counts[0..n-1] packed at displs.
StatusOr<Schedule> ReduceScatterBlocks(const char* fn, const char* name, int rank, int n,
                                       const std::vector<size_t>& counts, int nchannels) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs(fn, rank, n, nchannels));
  CIUIC_ASSIGN_OR_RETURN(const std::vector<size_t> displs, internal::CheckedDisplacements(fn, counts, n));
  Builder b(name, "ring", rank, n);
  if (displs.back() == 0) return b.Take();
  const size_t mine = counts[rank];
  if (n == 1) {
    b.Copy(In(0, mine), Out(0, mine));
    return b.Take();
  }
  const size_t largest = *std::max_element(counts.begin(), counts.end());
  const int nch = EffectiveChannels(largest, nchannels);
  b.Channels(nch);
  size_t scratch_base = 0;
  for (int c = 0; c < nch; ++c) {
    // Two scratch slots per channel, each as large as this channel's
    // largest part: a partial sum lives in one slot from the step that
    // makes it until it is sent; the step after next reuses the slot.
    size_t slot = 0;
    for (int blk = 0; blk < n; ++blk) slot = std::max(slot, EvenPart(0, counts[blk], nch, c).second);
    const Ring ring(n, c % 2 == 1);
    const int p = ring.Pos(rank);
    const int next = ring.RankAt(p + 1), prev = ring.RankAt(p - 1);
    auto part = [&](int blk) { return EvenPart(displs[blk], counts[blk], nch, c); };
    // Block b's chain starts at the rank after b and ends at b.
    b.Send(next, c, In(part(ring.RankAt(p - 1))));
    std::vector<int> step(n, -1);
    for (int j = 1; j < n; ++j) {
      const int blk = ring.RankAt(p - 1 - j);
      const Range src = In(part(blk));
      if (j < n - 1) {
        const Range tmp = Scr(scratch_base + static_cast<size_t>(j % 2) * slot, src.count);
        step[j] = b.RecvReduceSend(prev, next, c, src, tmp, {j >= 3 ? step[j - 2] : -1});
      } else {  // blk == rank: the reduced block, into the output
        b.RecvReduce(prev, c, src, Out(EvenPart(0, mine, nch, c)));
      }
    }
    scratch_base += 2 * slot;
  }
  b.Scratch(scratch_base);
  return b.Take();
}

}  // namespace

StatusOr<Schedule> BroadcastRing(int rank, int n, size_t count, int nchannels, int root) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("BroadcastRing", rank, n, nchannels));
  CIUIC_RETURN_IF_ERROR(internal::CheckRoot("BroadcastRing", "root", root, n));
  Builder b("broadcast", "ring", rank, n);
  if (count == 0) return b.Take();
  if (n == 1) {
    b.Copy(In(0, count), Out(0, count));
    return b.Take();
  }
  const int nch = EffectiveChannels(count, nchannels);
  b.Channels(nch);
  for (int c = 0; c < nch; ++c) {
    const auto oc = EvenPart(0, count, nch, c);
    const bool backward = c % 2 == 1;
    const int pos = backward ? Mod(root - rank, n) : Mod(rank - root, n);
    auto at = [&](int q) { return backward ? Mod(root - q, n) : Mod(root + q, n); };
    if (pos == 0) {
      b.Copy(In(oc), Out(oc));
      b.Send(at(1), c, In(oc));
    } else if (pos < n - 1) {
      b.RecvCopySend(at(pos - 1), at(pos + 1), c, Out(oc));
    } else {
      b.Recv(at(pos - 1), c, Out(oc));
    }
  }
  return b.Take();
}

StatusOr<Schedule> BroadcastBinomial(int rank, int n, size_t count, int nchannels, int root) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("BroadcastBinomial", rank, n, nchannels));
  CIUIC_RETURN_IF_ERROR(internal::CheckRoot("BroadcastBinomial", "root", root, n));
  Builder b("broadcast", "binomial", rank, n);
  if (count == 0) return b.Take();
  const int nch = EffectiveChannels(count, nchannels);
  b.Channels(nch);
  const int vr = Mod(rank - root, n);
  auto at = [&](int v) { return Mod(v + root, n); };
  for (int c = 0; c < nch; ++c) {
    const auto oc = EvenPart(0, count, nch, c);
    int rcv = -1;
    Range src = In(oc);
    if (vr == 0) b.Copy(In(oc), Out(oc));
    int mask = 1;
    for (; mask < n; mask <<= 1) {
      if (vr & mask) {  // parent: vr without its lowest set bit
        rcv = b.Recv(at(vr - mask), c, Out(oc));
        src = Out(oc);
        break;
      }
    }
    for (int m = mask >> 1; m > 0; m >>= 1) {
      if (vr + m < n) b.Send(at(vr + m), c, src, {rcv}, kPerChunk);
    }
  }
  return b.Take();
}

StatusOr<Schedule> ReduceBinomial(int rank, int n, size_t count, int nchannels, int root) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("ReduceBinomial", rank, n, nchannels));
  CIUIC_RETURN_IF_ERROR(internal::CheckRoot("ReduceBinomial", "root", root, n));
  Builder b("reduce", "binomial", rank, n);
  if (count == 0) return b.Take();
  if (n == 1) {
    b.Copy(In(0, count), Out(0, count));
    return b.Take();
  }
  const int nch = EffectiveChannels(count, nchannels);
  b.Channels(nch);
  const int vr = Mod(rank - root, n);
  auto at = [&](int v) { return Mod(v + root, n); };
  // Children vr + 2^k for the low zero bits of vr, then the parent.
  std::vector<int> kids;
  int parent = -1;
  for (int mask = 1; mask < n; mask <<= 1) {
    if (vr & mask) {
      parent = at(vr - mask);
      break;
    }
    if (vr + mask < n) kids.push_back(at(vr + mask));
  }
  const BufKind acc_buf = parent < 0 ? BufKind::kOutput : BufKind::kScratch;
  if (parent >= 0 && !kids.empty()) b.Scratch(count);
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, count, nch, c);
    const Range acc{acc_buf, off, len};
    if (kids.empty()) {
      b.Send(parent, c, In(off, len));
      continue;
    }
    Range src = In(off, len);
    int prev = -1;
    for (size_t i = 0; i < kids.size(); ++i) {
      if (i + 1 == kids.size() && parent >= 0) {
        prev = b.RecvReduceSend(kids[i], parent, c, src, acc, {prev}, kPerChunk);
      } else {
        prev = b.RecvReduce(kids[i], c, src, acc, {prev}, kPerChunk);
      }
      src = acc;
    }
  }
  return b.Take();
}

StatusOr<Schedule> ReduceRing(int rank, int n, size_t count, int nchannels, int root) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("ReduceRing", rank, n, nchannels));
  CIUIC_RETURN_IF_ERROR(internal::CheckRoot("ReduceRing", "root", root, n));
  Builder b("reduce", "ring", rank, n);
  if (count == 0) return b.Take();
  if (n == 1) {
    b.Copy(In(0, count), Out(0, count));
    return b.Take();
  }
  const int nch = EffectiveChannels(count, nchannels);
  b.Channels(nch);
  const bool is_root = rank == root;
  const BufKind acc_buf = is_root ? BufKind::kOutput : BufKind::kScratch;
  if (!is_root) b.Scratch(count);
  for (int c = 0; c < nch; ++c) {
    const auto [base, len] = EvenPart(0, count, nch, c);
    const Ring ring(n, c % 2 == 1);
    const int p = ring.Pos(rank);
    const int next = ring.RankAt(p + 1), prev = ring.RankAt(p - 1);
    auto seg = [&, base = base, len = len](int s) { return EvenPart(base, len, n, Mod(s, n)); };
    auto acc = [&](int s) { return Range{acc_buf, seg(s).first, seg(s).second}; };
    std::vector<int> writer(n, -1);
    writer[p] = b.Send(next, c, In(seg(p)));
    for (int j = 1; j < n; ++j) {
      const int s = Mod(p - j, n);
      if (j < n - 1) {
        writer[s] = b.RecvReduceSend(prev, next, c, In(seg(s)), acc(s));
      } else {
        writer[s] = b.RecvReduce(prev, c, In(seg(s)), acc(s));  // s == p+1: fully reduced here
      }
    }
    const int owned = Mod(p + 1, n);
    if (!is_root) {
      b.Send(root, c, acc(owned), {writer[owned]});
    } else {
      for (int q = 0; q < n; ++q) {
        if (q == rank) continue;
        const int s = Mod(ring.Pos(q) + 1, n);
        b.Recv(q, c, Out(seg(s)), {writer[s]});
      }
    }
  }
  return b.Take();
}

StatusOr<Schedule> AllGatherRing(int rank, int n, size_t count, int nchannels) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("AllGatherRing", rank, n, nchannels));
  CIUIC_RETURN_IF_ERROR(internal::CheckedTimes("AllGatherRing", count, n).status());
  return AllGatherBlocks("AllGatherRing", "allgather", rank, n, std::vector<size_t>(n, count), nchannels);
}

StatusOr<Schedule> AllGathervRing(int rank, int n, const std::vector<size_t>& counts, int nchannels) {
  return AllGatherBlocks("AllGathervRing", "allgatherv", rank, n, counts, nchannels);
}

StatusOr<Schedule> ReduceScatterRing(int rank, int n, size_t count, int nchannels) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("ReduceScatterRing", rank, n, nchannels));
  CIUIC_RETURN_IF_ERROR(internal::CheckedTimes("ReduceScatterRing", count, n).status());
  return ReduceScatterBlocks("ReduceScatterRing", "reducescatter", rank, n, std::vector<size_t>(n, count),
                             nchannels);
}

StatusOr<Schedule> ReduceScattervRing(int rank, int n, const std::vector<size_t>& counts, int nchannels) {
  return ReduceScatterBlocks("ReduceScattervRing", "reducescatterv", rank, n, counts, nchannels);
}

StatusOr<Schedule> AllToAllPairwise(int rank, int n, size_t count, int nchannels) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("AllToAllPairwise", rank, n, nchannels));
  CIUIC_RETURN_IF_ERROR(internal::CheckedTimes("AllToAllPairwise", count, n).status());
  Builder b("alltoall", "pairwise", rank, n);
  if (count == 0) return b.Take();
  const size_t self = static_cast<size_t>(rank) * count;
  b.Copy(In(self, count), Out(self, count));
  if (n == 1) return b.Take();
  const int nch = EffectiveChannels(count, nchannels);
  b.Channels(nch);
  // sent[peer][c]: the step sending our block `peer` (input) on channel c;
  // receiving block `peer` (output, the same memory in-place) follows it.
  std::vector<std::vector<int>> sent(n, std::vector<int>(nch, -1));
  for (int i = 1; i < n; ++i) {
    const int to = Mod(rank + i, n);
    for (int c = 0; c < nch; ++c) {
      sent[to][c] = b.Send(to, c, In(EvenPart(static_cast<size_t>(to) * count, count, nch, c)));
    }
  }
  for (int i = 1; i < n; ++i) {
    const int from = Mod(rank - i, n);
    for (int c = 0; c < nch; ++c) {
      b.Recv(from, c, Out(EvenPart(static_cast<size_t>(from) * count, count, nch, c)), {sent[from][c]}, kPerChunk);
    }
  }
  return b.Take();
}

StatusOr<Schedule> BarrierDissemination(int rank, int n) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("BarrierDissemination", rank, n, 1));
  Builder b("barrier", "dissemination", rank, n);
  int prev = -1;
  for (int d = 1; d < n; d <<= 1) {
    // Round k tells rank+2^k that we (and, transitively, the 2^k ranks
    // before us) arrived; it may start only after round k-1 was heard.
    b.Send(Mod(rank + d, n), 0, Scr(0, 0), {prev});
    prev = b.Recv(Mod(rank - d, n), 0, Scr(0, 0), {prev});
  }
  return b.Take();
}

StatusOr<Schedule> SendDirect(int rank, int n, size_t count, int peer) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("SendDirect", rank, n, 1));
  CIUIC_RETURN_IF_ERROR(internal::CheckRoot("SendDirect", "peer", peer, n));
  if (peer == rank) return InvalidArgumentError("SendDirect: peer " + std::to_string(peer) + " is this rank");
  Builder b("send", "direct", rank, n);
  b.Send(peer, 0, In(0, count));
  return b.Take();
}

StatusOr<Schedule> RecvDirect(int rank, int n, size_t count, int peer) {
  CIUIC_RETURN_IF_ERROR(internal::CheckRankArgs("RecvDirect", rank, n, 1));
  CIUIC_RETURN_IF_ERROR(internal::CheckRoot("RecvDirect", "peer", peer, n));
  if (peer == rank) return InvalidArgumentError("RecvDirect: peer " + std::to_string(peer) + " is this rank");
  Builder b("recv", "direct", rank, n);
  b.Recv(peer, 0, Out(0, count));
  return b.Take();
}

}  // namespace ciuic::collectives
