// All-reduce, Swing (Di Girolamo et al., NSDI 2024), bandwidth-optimal:
// a reduce-scatter then an all-gather of log2(p) steps each, where in step
// s rank r talks to r + rho(s) if r is even and r - rho(s) if odd (mod p),
// rho(s) = 1, -1, 3, -5, 11, ... = (1 - (-2)^(s+1)) / 3. The peers are
// at most about 2^s / 1.5 apart, not 2^s as in recursive halving, so on a
// ring or torus the bytes cross fewer links.
//
// The blocks a rank sends in a step are not contiguous in rank order. Each
// rank keeps its working vector in scratch in its own block order
// order(r, 0), where order(x, log2 p) = [x] and order(x, s) = order(x, s+1)
// followed by order(peer of x in step s, s+1): in step s the blocks kept are
// the first half of the current range and those sent the second half, which
// is the peer's first half in the peer's own order, so every step moves one
// contiguous message. That costs a permuting copy in and out (local copies).
// Each block is reduced once along its tree and then copied, so every rank
// ends with the same bytes.
//
// Non-powers of two fold as in Rabenseifner (the first 2(n-p) ranks in
// pairs; the even one permutes its input into its partner's order, sends
// it, and gets the result back), not with the paper's own scheme.
// In place: the input is read only by the first copies, and the output is
// written only by the last ones.
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

using internal::FloorPow2;

namespace {

long long SwingRho(int s) {
  long long m2 = 1;  // (-2)^(s+1)
  for (int i = 0; i <= s; ++i) m2 *= -2;
  return (1 - m2) / 3;
}

// Appends order(x, s) (see the header comment) for p = 2^steps ranks.
void AppendOrder(int x, int s, int steps, int p, std::vector<int>& out) {
  if (s == steps) {
    out.push_back(x);
    return;
  }
  AppendOrder(x, s + 1, steps, p, out);
  AppendOrder(SwingPeer(x, s, p), s + 1, steps, p, out);
}

}  // namespace

int SwingPeer(int vr, int step, int p) {
  const long long rho = SwingRho(step);
  return Mod(vr % 2 == 0 ? vr + rho : vr - rho, p);
}

std::vector<int> SwingBlockOrder(int vr, int p) {
  int steps = 0;
  while ((1 << steps) < p) ++steps;
  std::vector<int> out;
  out.reserve(static_cast<size_t>(p));
  AppendOrder(vr, 0, steps, p, out);
  return out;
}

Status AllReduceSwing(const CollectiveArgs& a, Builder& b) {
  const int rank = a.rank, n = a.nranks;
  const int nch = b.UseChannels(a.count, a.nchannels);
  const int p = FloorPow2(n);
  const int extra = n - p;
  int steps = 0;
  while ((1 << steps) < p) ++steps;
  b.Scratch(a.count);
  const bool folded_out = rank < 2 * extra && rank % 2 == 0;
  const int vr = rank < 2 * extra ? rank / 2 : rank - extra;
  auto peer_of = [extra](int pvr) { return pvr < extra ? 2 * pvr + 1 : pvr + extra; };
  // A folded-out rank lays its input out in its partner's order.
  const std::vector<int> order = SwingBlockOrder(folded_out ? (rank + 1) / 2 : vr, p);
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, a.count, nch, c);
    // pos[i]: where (from off) the i-th block of `order` starts in scratch.
    std::vector<size_t> pos(static_cast<size_t>(p) + 1, 0);
    for (size_t i = 0; i < order.size(); ++i) pos[i + 1] = pos[i] + EvenPart(0, len, p, order[i]).second;
    auto S = [off = off, &pos](int lo, int hi) {
      return Scr(off + pos[static_cast<size_t>(lo)], pos[static_cast<size_t>(hi)] - pos[static_cast<size_t>(lo)]);
    };
    std::vector<int> last;
    for (int i = 0; i < p; ++i) {
      const auto [boff, blen] = EvenPart(off, len, p, order[static_cast<size_t>(i)]);
      last.push_back(b.Copy(In(boff, blen), S(i, i + 1)));
    }
    if (folded_out) {
      const int s = b.Send(rank + 1, c, S(0, p), last);
      b.Recv(rank + 1, c, Out(off, len), {s});
      continue;
    }
    if (rank < 2 * extra) last = {b.RecvReduce(rank - 1, c, S(0, p), S(0, p), last)};
    std::vector<int> rs_sends;
    for (int s = 0, w = p; s < steps; ++s, w /= 2) {
      const int peer = peer_of(SwingPeer(vr, s, p));
      const int snd = b.Send(peer, c, S(w / 2, w), last);
      const int rr = b.RecvReduce(peer, c, S(0, w / 2), S(0, w / 2), last);
      rs_sends.push_back(snd);
      last = {snd, rr};
    }
    for (int s = steps - 1, h = 1; s >= 0; --s, h *= 2) {
      const int peer = peer_of(SwingPeer(vr, s, p));
      const int snd = b.Send(peer, c, S(0, h), last);
      std::vector<int> deps = last;
      deps.push_back(rs_sends[static_cast<size_t>(s)]);  // it read what this receive overwrites
      const int rcv = b.Recv(peer, c, S(h, 2 * h), deps);
      last = {snd, rcv};
    }
    std::vector<int> copies;
    for (int i = 0; i < p; ++i) {
      const auto [boff, blen] = EvenPart(off, len, p, order[static_cast<size_t>(i)]);
      copies.push_back(b.Copy(S(i, i + 1), Out(boff, blen), last));
    }
    if (rank < 2 * extra) b.Send(rank - 1, c, Out(off, len), copies);
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
