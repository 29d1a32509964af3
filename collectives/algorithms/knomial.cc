// k-nomial algorithms of radix k (CollectiveArgs::radix, default 4; the
// family UCC builds on): ceil(log_k n) rounds instead of log2 n, each rank
// talking to up to k-1 peers per round, so fewer rounds for more messages
// per round. Radix 2 is the binomial tree and recursive doubling.
//
// Broadcast and reduce: the tree of virtual ranks vr = rank - root (mod
// n) in which a rank's parent is vr with its lowest nonzero base-k digit
// cleared. Broadcast forwards chunk by chunk to the children with the
// largest subtrees first; reduce mirrors it (the smallest subtrees first),
// accumulating like the binomial reduce: non-roots in scratch, the root in
// its output, each partial computed once.
//
// All-reduce, recursive k-ing: p = the largest power of k <= n; ranks
// r >= p give their input to the proxy r mod p first and get the result
// back last. In round d = 1, k, k^2, ... the p ranks form groups of k
// (digits equal but the one of weight d); every member sends its vector to
// the k-1 others (the next digits first) and reduces the k vectors in
// member order, so every member of a group computes the same bytes and in
// the end every rank has the same result. Scratch: min(k, n) vectors
// (receive slots plus the running value). In place: the input is read by
// the first round (or the proxy's fold) before anything writes the output,
// as in recursive doubling.
#include <algorithm>
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

namespace {

constexpr DepMode kPerChunk = DepMode::kPerChunk;

// The tree's links of virtual rank vr among n: parent (-1 for the root) and
// children, the largest subtrees first.
TreeLinks Links(int vr, int n, int k) {
  TreeLinks l;
  long long d = 1;  // weight of the digit looked at
  while (d < n && (vr / d) % k == 0) d *= k;
  if (vr != 0) l.parent = static_cast<int>(vr - ((vr / d) % k) * d);
  // Children: vr + t * w for every weight w below vr's lowest nonzero digit.
  for (long long w = d / k; w >= 1; w /= k) {
    for (int t = 1; t < k; ++t) {
      if (vr + t * w < n) l.children.push_back(static_cast<int>(vr + t * w));
    }
  }
  return l;
}

}  // namespace

Status BroadcastKnomial(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks, root = a.root, k = RadixOf(a);
  const int nch = b.UseChannels(a.count, a.nchannels);
  const int vr = Mod(a.rank - root, n);
  auto at = [&](int v) { return Mod(v + root, n); };
  const TreeLinks l = Links(vr, n, k);
  for (int c = 0; c < nch; ++c) {
    const auto oc = EvenPart(0, a.count, nch, c);
    int rcv = -1;
    Range src = In(oc);
    if (l.parent < 0) {
      b.Copy(In(oc), Out(oc));
    } else {
      rcv = b.Recv(at(l.parent), c, Out(oc));
      src = Out(oc);
    }
    for (int child : l.children) b.Send(at(child), c, src, {rcv}, kPerChunk);
  }
  return Status::Ok();
}

Status ReduceKnomial(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks, root = a.root, k = RadixOf(a);
  const int nch = b.UseChannels(a.count, a.nchannels);
  const int vr = Mod(a.rank - root, n);
  auto at = [&](int v) { return Mod(v + root, n); };
  TreeLinks l = Links(vr, n, k);
  std::reverse(l.children.begin(), l.children.end());  // the first to finish first
  const BufKind acc_buf = l.parent < 0 ? BufKind::kOutput : BufKind::kScratch;
  if (l.parent >= 0 && !l.children.empty()) b.Scratch(a.count);
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, a.count, nch, c);
    const Range acc{acc_buf, off, len};
    if (l.children.empty()) {
      b.Send(at(l.parent), c, In(off, len));
      continue;
    }
    Range src = In(off, len);
    int prev = -1;
    for (size_t i = 0; i < l.children.size(); ++i) {
      const int kid = at(l.children[i]);
      if (i + 1 == l.children.size() && l.parent >= 0) {
        prev = b.RecvReduceSend(kid, at(l.parent), c, src, acc, {prev}, kPerChunk);
      } else {
        prev = b.RecvReduce(kid, c, src, acc, {prev}, kPerChunk);
      }
      src = acc;
    }
  }
  return Status::Ok();
}

Status AllReduceKnomial(const CollectiveArgs& a, Builder& b) {
  const int rank = a.rank, n = a.nranks, k = RadixOf(a);
  const int nch = b.UseChannels(a.count, a.nchannels);
  int p = 1;
  while (static_cast<long long>(p) * k <= n) p *= k;
  // Slots: a round's k-1 receives plus the running value, or a proxy's
  // extras (at most n - 1) plus its sum; extras need none.
  if (rank < p) b.Scratch(static_cast<size_t>(std::min(k, n)) * a.count);
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, a.count, nch, c);
    // A "place" is the input, the output or one of the scratch slots.
    constexpr int kIn = -2, kOut = -1;
    auto R = [&, off = off, len = len](int place) {
      if (place == kIn) return In(off, len);
      if (place == kOut) return Out(off, len);
      return Scr(static_cast<size_t>(place) * a.count + off, len);
    };
    if (rank >= p) {  // an extra: its proxy reduces for it
      const int s = b.Send(rank % p, c, R(kIn));
      b.Recv(rank % p, c, R(kOut), {s}, kPerChunk);
      continue;
    }
    std::vector<int> extras;
    for (int e = rank + p; e < n; e += p) extras.push_back(e);
    int cur = kIn;
    std::vector<int> last;
    if (!extras.empty()) {
      std::vector<Range> inputs = {R(kIn)};
      for (size_t j = 0; j < extras.size(); ++j) {
        const int slot = static_cast<int>(j) + 1;
        last.push_back(b.Recv(extras[j], c, R(slot)));
        inputs.push_back(R(slot));
      }
      last = {b.Reduce(inputs, R(0), last, kPerChunk)};
      cur = 0;
    }
    for (long long d = 1; d < p; d *= k) {
      const int my_t = static_cast<int>((rank / d) % k);
      const long long base = rank - my_t * d;
      // Receive slots: every slot but the one holding the running value.
      std::vector<int> free_slots;
      for (int s = 0; s < k; ++s) {
        if (s != cur) free_slots.push_back(s);
      }
      std::vector<int> place(static_cast<size_t>(k));
      place[static_cast<size_t>(my_t)] = cur;
      std::vector<int> round;
      // Peers by digit my_t + 1, + 2, ... (mod k): no member is every
      // member's first peer, and every rank's schedule is rank 0's with the
      // digits of its peers shifted (the cost model's digits symmetry).
      for (int o = 1, f = 0; o < k; ++o) {
        const int t = (my_t + o) % k;
        const int peer = static_cast<int>(base + t * d);
        place[static_cast<size_t>(t)] = free_slots[static_cast<size_t>(f++)];
        round.push_back(b.Send(peer, c, R(cur), last, kPerChunk));
        round.push_back(b.Recv(peer, c, R(place[static_cast<size_t>(t)]), last, kPerChunk));
      }
      std::vector<Range> inputs;
      inputs.reserve(static_cast<size_t>(k));
      for (int t = 0; t < k; ++t) inputs.push_back(R(place[static_cast<size_t>(t)]));
      // Reduce into member 0's vector (the form kReduce allows), never into
      // the caller's input.
      const int dst = my_t != 0 ? place[0] : (cur == kIn ? kOut : cur);
      round.push_back(b.Reduce(inputs, R(dst), round, kPerChunk));
      last = round;
      cur = dst;
    }
    for (int e : extras) b.Send(e, c, R(cur), last, kPerChunk);
    // A no-op where the result is already in the output: every rank's
    // schedule has one shape (the cost model's symmetric path).
    b.Copy(R(cur), R(kOut), last, kPerChunk);
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
