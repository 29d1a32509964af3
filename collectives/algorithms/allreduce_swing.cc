// All-reduce, Swing (Di Girolamo et al., NSDI 2024), bandwidth-optimal:
// a reduce-scatter then an all-gather of log2(p) steps each, where in step
// s rank r talks to r + rho(s) if r is even and r - rho(s) if odd (mod p),
// rho(s) = 1, -1, 3, -5, 11, ... = (1 - (-2)^(s+1)) / 3. The peers are
// at most about 2^s / 1.5 apart, not 2^s as in recursive halving, so on a
// ring or torus the bytes cross fewer links. On a torus (CollectiveArgs::
// torus_dims, even sizes) each step moves along one dimension, the
// dimensions in turn, by that dimension's own rho (SwingPeers), as the
// paper does: a step's peer is then a few hops away in one ring of the
// torus instead of crossing several.
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
// On up to kSwingRankOrderRanks ranks the blocks a step moves form at most
// two contiguous runs a step on average (SwingRuns), so there the rank works
// in its output buffer in rank order, like Rabenseifner, and sends each run
// as its own message: on average at most one more message a step, instead
// of the two permuting passes over the whole vector. On more ranks a reduce-scatter
// takes about 3p/4 messages that way (log2 p with the copies).
//
// The latency-optimal variant (AllReduceSwingLatency, "swinglat") takes the
// same log2(p) steps with the same peers, but gathers: in step s a rank
// sends the 2^s input vectors it holds and receives as many, then every
// rank reduces all p in rank order, so all ranks end with the same bits.
// The paper's variant reduces as it goes, which leaves each rank with its
// own order of the partial sums (its groups are not a partition as
// recursive doubling's are), so floating-point results would differ
// between ranks. The price is (p - 1) vectors sent instead of log2(p):
// for the small vectors where latency decides.
//
// Counts that are not powers of two are handled as the Swing authors' own
// library does, not with Rabenseifner's fold: with an even n the peers are
// taken mod n over ceil(log2 n) steps (still pairs: rho is odd, so parity
// is kept mod an even n). The tree of ranks a step's peer reaches through
// the later steps then meets some ranks twice; a rank sends each block only
// in the last step whose tree holds it (SwingSends), which leaves every
// block sent once along one tree to its owner: n - 1 blocks in all, the
// bandwidth optimum, with no fold. The blocks a step moves are scattered in
// rank order (AllReduceSwingAnyCount). An odd count folds its last rank
// into its neighbour first (n - 1 is even): one pair pays the two extra
// transfers, where Rabenseifner's fold has n - 2^k pairs do so. swinglat
// folds onto the largest power of two, as libswing's latency-optimal
// variant does too.
//
// In place, permuting layout: the input is read only by
// the first copies, and the output is written only by the last ones (the
// rank-order layout and swinglat say their own below).
#include <algorithm>
#include <iterator>
#include <utility>
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

// Appends order(x, s) (see the header comment).
void AppendOrder(int x, int s, const SwingPeers& peers, std::vector<int>& out) {
  if (s == peers.steps()) {
    out.push_back(x);
    return;
  }
  AppendOrder(x, s + 1, peers, out);
  AppendOrder(peers.Peer(x, s), s + 1, peers, out);
}

// Blocks [run.first, run.second) of the `blocks`-way split of [off, off + len).
Range RunSpan(BufKind k, size_t off, size_t len, int blocks, std::pair<int, int> run) {
  const size_t s = EvenSplitOffset(len, blocks, static_cast<size_t>(run.first));
  const size_t e = EvenSplitOffset(len, blocks, static_cast<size_t>(run.second));
  return Span(k, off + s, e - s);
}

// Sorts `blocks` and merges consecutive ones: [lo, hi) runs in rank order.
std::vector<std::pair<int, int>> Runs(std::vector<int> blocks) {
  if (!std::is_sorted(blocks.begin(), blocks.end())) std::sort(blocks.begin(), blocks.end());
  std::vector<std::pair<int, int>> out;
  for (int x : blocks) {
    if (!out.empty() && out.back().second == x) {
      ++out.back().second;
    } else {
      out.emplace_back(x, x + 1);
    }
  }
  return out;
}

// The rank-order layout (see the header comment): every rank keeps its
// vector in rank order, in its output buffer after the first step. In place
// as Rabenseifner: the first step reads each input element once, and an
// element sent there is overwritten only by the all-gather's receive that
// waits for that send.
Status AllReduceSwingRankOrder(const CollectiveArgs& a, Builder& b, int nch) {
  const int rank = a.rank, p = a.nranks;
  const SwingPeers peers(p, a.torus_dims);
  const int steps = peers.steps();
  const std::vector<int> order = SwingBlockOrder(rank, peers);
  // Order positions [lo, hi) as runs of blocks in rank order.
  auto runs = [&order](int lo, int hi) {
    return Runs(std::vector<int>(order.begin() + lo, order.begin() + hi));
  };
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, a.count, nch, c);
    auto W = [off = off, len = len, p](BufKind k, std::pair<int, int> run) { return RunSpan(k, off, len, p, run); };
    std::vector<int> last;
    BufKind cur = BufKind::kInput;
    // The peer keeps, in its own order, exactly the blocks this rank sends,
    // so both sides list the same runs in the same (rank) order.
    std::vector<std::vector<int>> rs_sends;
    for (int s = 0, w = p; s < steps; ++s, w /= 2) {
      const int peer = peers.Peer(rank, s);
      std::vector<int> next, sends;
      for (const auto& run : runs(w / 2, w)) sends.push_back(b.Send(peer, c, W(cur, run), last));
      for (const auto& run : runs(0, w / 2)) {
        next.push_back(b.RecvReduce(peer, c, W(cur, run), W(BufKind::kOutput, run), last));
      }
      next.insert(next.end(), sends.begin(), sends.end());
      rs_sends.push_back(std::move(sends));
      cur = BufKind::kOutput;
      last = std::move(next);
    }
    for (int s = steps - 1, h = 1; s >= 0; --s, h *= 2) {
      const int peer = peers.Peer(rank, s);
      std::vector<int> next;
      for (const auto& run : runs(0, h)) next.push_back(b.Send(peer, c, W(BufKind::kOutput, run), last));
      std::vector<int> deps = last;
      // Those sends read what these receives overwrite.
      deps.insert(deps.end(), rs_sends[static_cast<size_t>(s)].begin(), rs_sends[static_cast<size_t>(s)].end());
      for (const auto& run : runs(h, 2 * h)) next.push_back(b.Recv(peer, c, W(BufKind::kOutput, run), deps));
      last = std::move(next);
    }
  }
  return Status::Ok();
}

// Marks with `mark` every rank the tree of x through steps [s, steps)
// reaches, x included.
void MarkTree(int x, int s, int mark, const SwingPeers& peers, std::vector<int>& last) {
  last[static_cast<size_t>(x)] = mark;
  for (int t = s; t < peers.steps(); ++t) MarkTree(peers.Peer(x, t), t + 1, mark, peers, last);
}

// Swing on a count that is not a power of two (see the header comment):
// ranks 0..m-1 with m even run ceil(log2 m) steps in rank order; with an
// odd n, rank m = n - 1 folds into rank m - 1. A step moves the blocks
// SwingSends gives; both sides cut them into the same runs (empty runs
// are not sent). Up to 2 x kSwingRankOrderRanks ranks each run is its own
// message (two to three a step on average, up to five); beyond, a step's runs are packed
// into one message through scratch, as the authors' library packs them
// with an indexed datatype.
//
// Unpacked, out of place: the blocks step 0 neither sends nor receives are
// first copied to the output, beside step 0, so from then on every block a
// rank sends or reduces lies in its output and each run is one range.
// Packed, each run is copied or reduced where its blocks lie. In place as
// the rank-order layout: a receive overwrites a block only after this
// rank's send (or packing) of it.
Status AllReduceSwingAnyCount(const CollectiveArgs& a, Builder& b, int nch) {
  const int rank = a.rank, n = a.nranks;
  const int m = n % 2 == 0 ? n : n - 1;
  const bool packed = m > 2 * kSwingRankOrderRanks;
  const SwingPeers peers(m, a.torus_dims);
  const int steps = peers.steps();
  if (packed) b.Scratch(2 * a.count);  // a step's outgoing, then incoming, message
  std::vector<std::vector<int>> sends, recvs;  // per reduce-scatter step, in rank order
  if (rank < m) {
    sends = SwingSends(rank, peers);
    recvs = SwingRecvs(rank, sends, peers);
  }
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, a.count, nch, c);
    auto W = [off = off, len = len, m](BufKind k, std::pair<int, int> run) { return RunSpan(k, off, len, m, run); };
    if (rank == m) {  // odd n: contribute, then get the result
      const int s = b.Send(m - 1, c, W(BufKind::kInput, {0, m}));
      b.Recv(m - 1, c, W(BufKind::kOutput, {0, m}), {s}, DepMode::kPerChunk);
      continue;
    }
    // in_out[x]: block x's current value lies in the output buffer.
    std::vector<bool> in_out(static_cast<size_t>(m), false);
    // Runs of `blocks` that are not empty, cut where their buffer changes
    // when packed.
    auto runs = [&, len = len](const std::vector<int>& blocks) {
      std::vector<std::pair<int, int>> out;
      // Fewer elements than blocks: only blocks [0, len) hold one each.
      std::vector<int> held;
      if (len < static_cast<size_t>(m)) {
        std::copy_if(blocks.begin(), blocks.end(), std::back_inserter(held),
                     [len = len](int x) { return static_cast<size_t>(x) < len; });
      }
      for (const auto& run : Runs(len < static_cast<size_t>(m) ? held : blocks)) {
        for (int lo = run.first; lo < run.second;) {
          int hi = lo + 1;
          while (packed && hi < run.second && in_out[static_cast<size_t>(hi)] == in_out[static_cast<size_t>(lo)]) ++hi;
          if (!packed) hi = run.second;
          if (W(BufKind::kOutput, {lo, hi}).count > 0) out.emplace_back(lo, hi);
          lo = hi;
        }
      }
      return out;
    };
    auto at = [&](std::pair<int, int> run) {
      return W(in_out[static_cast<size_t>(run.first)] ? BufKind::kOutput : BufKind::kInput, run);
    };
    auto mark = [&](const std::vector<int>& blocks) {
      for (int x : blocks) in_out[static_cast<size_t>(x)] = true;
    };
    // Scratch for channel c: [2 off, 2 off + len) outgoing, then incoming.
    auto Stage = [off = off, len = len](bool incoming, size_t at_elem, size_t count) {
      return Scr(2 * off + (incoming ? len : 0) + at_elem, count);
    };
    std::vector<int> last, copies;  // unpacked: step 0 runs beside the copies, step 1 waits for them
    if (n != m && rank == m - 1) {
      last = {b.RecvReduce(m, c, W(BufKind::kInput, {0, m}), W(BufKind::kOutput, {0, m}))};
      in_out.assign(static_cast<size_t>(m), true);
    } else if (!packed) {
      std::vector<int> moved;
      for (int x = 0; x < m; ++x) {
        const auto& s0 = sends[0];
        const auto& r0 = recvs[0];
        if (std::find(s0.begin(), s0.end(), x) == s0.end() && std::find(r0.begin(), r0.end(), x) == r0.end()) {
          moved.push_back(x);
        }
      }
      for (const auto& run : runs(moved)) copies.push_back(b.Copy(at(run), W(BufKind::kOutput, run)));
    }
    // One direction of a step: the runs of `out_blocks` to the peer, the
    // runs of `in_blocks` from it, reduced (reduce-scatter) or stored.
    // Returns the step's operations; `readers` gets those that read this
    // rank's blocks for the peer.
    auto exchange = [&](int peer, const std::vector<int>& out_blocks, const std::vector<int>& in_blocks, bool reduce,
                        const std::vector<int>& deps, const std::vector<int>& in_deps, std::vector<int>* readers) {
      std::vector<int> ops;
      if (!packed) {
        for (const auto& run : runs(out_blocks)) readers->push_back(b.Send(peer, c, at(run), deps));
        for (const auto& run : runs(in_blocks)) {
          ops.push_back(reduce ? b.RecvReduce(peer, c, at(run), W(BufKind::kOutput, run), in_deps)
                               : b.Recv(peer, c, W(BufKind::kOutput, run), in_deps));
        }
        mark(in_blocks);
        ops.insert(ops.end(), readers->begin(), readers->end());
        return ops;
      }
      size_t packed_n = 0;
      for (const auto& run : runs(out_blocks)) {
        const Range src = at(run);
        readers->push_back(b.Copy(src, Stage(false, packed_n, src.count), deps));
        packed_n += src.count;
      }
      if (packed_n > 0) ops.push_back(b.Send(peer, c, Stage(false, 0, packed_n), *readers));
      size_t in_n = 0;
      for (const auto& run : runs(in_blocks)) in_n += W(BufKind::kOutput, run).count;
      if (in_n > 0) {
        const int rcv = b.Recv(peer, c, Stage(true, 0, in_n), in_deps);
        size_t pos = 0;
        for (const auto& run : runs(in_blocks)) {
          const Range dst = W(BufKind::kOutput, run);
          // After rcv, which waited for in_deps: naming them again would cost
          // each run all of a step's readers (quadratic in the ranks).
          if (reduce) {
            ops.push_back(b.Reduce({at(run), Stage(true, pos, dst.count)}, dst, {rcv}));
          } else {
            ops.push_back(b.Copy(Stage(true, pos, dst.count), dst, {rcv}));
          }
          pos += dst.count;
        }
      }
      mark(in_blocks);
      ops.insert(ops.end(), readers->begin(), readers->end());
      return ops;
    };
    std::vector<std::vector<int>> rs_readers(static_cast<size_t>(steps));
    for (int s = 0; s < steps; ++s) {
      std::vector<int> ops = exchange(peers.Peer(rank, s), sends[static_cast<size_t>(s)], recvs[static_cast<size_t>(s)],
                                      true, last, last, &rs_readers[static_cast<size_t>(s)]);
      if (s == 0) ops.insert(ops.end(), copies.begin(), copies.end());
      if (!packed) in_out.assign(static_cast<size_t>(m), true);  // after the copies beside step 0
      if (!ops.empty()) last = {b.Join(std::move(ops))};  // a step of empty runs moves nothing
    }
    // The all-gather retraces the reduce-scatter: a step's peer gets back,
    // reduced, the blocks it sent.
    for (int s = steps - 1; s >= 0; --s) {
      std::vector<int> in_deps = last;
      const auto& rd = rs_readers[static_cast<size_t>(s)];
      in_deps.insert(in_deps.end(), rd.begin(), rd.end());  // they read what these receives overwrite
      std::vector<int> readers;
      std::vector<int> ops = exchange(peers.Peer(rank, s), recvs[static_cast<size_t>(s)], sends[static_cast<size_t>(s)],
                                      false, last, in_deps, &readers);
      if (!ops.empty()) last = {b.Join(std::move(ops))};
    }
    if (n != m && rank == m - 1) b.Send(m, c, W(BufKind::kOutput, {0, m}), last);
  }
  return Status::Ok();
}

// The virtual ranks whose inputs x holds after `s` steps of the gathering
// variant, in the order they lie in its scratch: its own, then what each
// step's peer held.
void AppendGathered(int x, int s, const SwingPeers& peers, std::vector<int>& out) {
  if (s == 0) {
    out.push_back(x);
    return;
  }
  AppendGathered(x, s - 1, peers, out);
  AppendGathered(peers.Peer(x, s - 1), s - 1, peers, out);
}

}  // namespace

std::vector<int> SwingGatherOrder(int vr, const SwingPeers& peers) {
  std::vector<int> out;
  out.reserve(static_cast<size_t>(peers.p()));
  AppendGathered(vr, peers.steps(), peers, out);
  return out;
}

std::vector<int> SwingGatherOrder(int vr, int p) { return SwingGatherOrder(vr, SwingPeers(p, {})); }

Status AllReduceSwingLatency(const CollectiveArgs& a, Builder& b) {
  const int rank = a.rank, n = a.nranks;
  const int nch = b.UseChannels(a.count, a.nchannels);
  const int p = FloorPow2(n);
  const int extra = n - p;
  const SwingPeers peers(p, a.torus_dims);
  const int steps = peers.steps();
  // Every rank declares the same scratch, folded-out ones too, so the
  // communicator's scratch limit refuses a call alike on every rank.
  b.Scratch(a.count * static_cast<size_t>(p));
  const int vr = rank < 2 * extra ? rank / 2 : rank - extra;
  auto peer_of = [extra](int pvr) { return pvr < extra ? 2 * pvr + 1 : pvr + extra; };
  const std::vector<int> gathered = rank < 2 * extra && rank % 2 == 0 ? std::vector<int>{} : SwingGatherOrder(vr, peers);
  // where[k]: the scratch position of virtual rank k's vector.
  std::vector<int> where(static_cast<size_t>(p), 0);
  for (size_t i = 0; i < gathered.size(); ++i) where[static_cast<size_t>(gathered[i])] = static_cast<int>(i);
  for (int c = 0; c < nch; ++c) {
    const auto [off, len] = EvenPart(0, a.count, nch, c);
    // Channel c's p vectors lie at p * off in scratch, one after another.
    auto S = [off = off, len = len, p](int lo, int hi) {
      return Scr(static_cast<size_t>(p) * off + static_cast<size_t>(lo) * len, static_cast<size_t>(hi - lo) * len);
    };
    if (rank < 2 * extra && rank % 2 == 0) {  // folded out: contribute, then get the result
      const int s = b.Send(rank + 1, c, In(off, len));
      b.Recv(rank + 1, c, Out(off, len), {s}, DepMode::kPerChunk);
      continue;
    }
    std::vector<int> last;
    if (rank < 2 * extra) {  // the pair's sum, lower rank first
      const int rcv = b.Recv(rank - 1, c, S(0, 1));
      last = {b.Reduce({S(0, 1), In(off, len)}, S(0, 1), {rcv})};
    } else {
      last = {b.Copy(In(off, len), S(0, 1))};
    }
    for (int s = 0; s < steps; ++s) {
      const int peer = peer_of(peers.Peer(vr, s));
      const int snd = b.Send(peer, c, S(0, 1 << s), last);
      const int rcv = b.Recv(peer, c, S(1 << s, 2 << s), last);
      last = {snd, rcv};
    }
    // Every rank folds the same p vectors in virtual-rank (so rank) order,
    // at most 64 inputs a step (the executor's limit), each step's result
    // the next one's first input.
    for (int k = 0; k < p;) {
      std::vector<Range> inputs;
      if (k > 0) inputs.push_back(Out(off, len));
      for (; k < p && inputs.size() < 64; ++k) inputs.push_back(S(where[static_cast<size_t>(k)], where[static_cast<size_t>(k)] + 1));
      last = {b.Reduce(std::move(inputs), Out(off, len), last)};
    }
    if (rank < 2 * extra) b.Send(rank - 1, c, Out(off, len), last);
  }
  return Status::Ok();
}

int SwingRuns(int p) {
  int most = 0;
  for (int vr = 0; vr < p; ++vr) {
    const std::vector<int> order = SwingBlockOrder(vr, p);
    int total = 0;
    for (int w = p; w >= 2; w /= 2) {
      total += static_cast<int>(Runs(std::vector<int>(order.begin() + w / 2, order.begin() + w)).size());
    }
    most = std::max(most, total);
  }
  return most;
}

int SwingPeer(int vr, int step, int p) {
  const long long rho = SwingRho(step);
  return Mod(vr % 2 == 0 ? vr + rho : vr - rho, p);
}

std::vector<int> SwingBlockOrder(int vr, const SwingPeers& peers) {
  std::vector<int> out;
  out.reserve(static_cast<size_t>(peers.p()));
  AppendOrder(vr, 0, peers, out);
  return out;
}

std::vector<int> SwingBlockOrder(int vr, int p) { return SwingBlockOrder(vr, SwingPeers(p, {})); }

std::vector<std::vector<int>> SwingSends(int x, const SwingPeers& peers) {
  // last[i]: the last step whose tree holds i.
  std::vector<int> last(static_cast<size_t>(peers.p()), -1);
  for (int s = 0; s < peers.steps(); ++s) MarkTree(peers.Peer(x, s), s + 1, s, peers, last);
  std::vector<std::vector<int>> out(static_cast<size_t>(peers.steps()));
  for (int i = 0; i < peers.p(); ++i) {
    if (i != x && last[static_cast<size_t>(i)] >= 0) out[static_cast<size_t>(last[static_cast<size_t>(i)])].push_back(i);
  }
  return out;
}

std::vector<std::vector<int>> SwingRecvs(int x, const std::vector<std::vector<int>>& sends, const SwingPeers& peers) {
  std::vector<std::vector<int>> out(sends.size());
  for (size_t s = 0; s < sends.size(); ++s) {
    const int q = peers.Peer(x, static_cast<int>(s));
    out[s].reserve(sends[s].size());
    for (int y : sends[s]) out[s].push_back(peers.Mirror(y, x, q));
    // On one ring the mirror reverses the ascending sends, wrapping once:
    // reversed, they are two ascending runs.
    auto& v = out[s];
    std::reverse(v.begin(), v.end());
    const auto wrap = std::is_sorted_until(v.begin(), v.end());
    if (std::is_sorted(wrap, v.end()) && (wrap == v.end() || v.back() < v.front())) {
      std::rotate(v.begin(), wrap, v.end());
    } else {
      std::sort(v.begin(), v.end());
    }
  }
  return out;
}

int SwingPeers::Mirror(int y, int x, int q) const {
  if (dims_.size() == 1) {
    const int v = x + q - y;  // in (-p, 2p)
    return v >= p_ ? v - p_ : v < 0 ? v + p_ : v;
  }
  int stride = 1;
  for (size_t d = dims_.size(); d-- > 0;) {
    const int len = dims_[d];
    const int cx = x / stride % len, cq = q / stride % len;
    if (cx != cq) {
      const int cy = y / stride % len;
      return y + (Mod(static_cast<long long>(cx) + cq - cy, len) - cy) * stride;
    }
    stride *= len;
  }
  return y;
}

SwingPeers::SwingPeers(int p, const std::vector<int>& dims) : p_(p), dims_(dims) {
  // Each dimension even (or 1): Swing's pairs need an even ring.
  long long cells = 1;
  bool even = !dims_.empty();
  for (int d : dims_) {
    even = even && d >= 1 && (d == 1 || d % 2 == 0) && cells <= p;  // stops before it could overflow
    cells = even ? cells * d : 0;
  }
  if (!even || cells != p) dims_ = {p};
  // Round robin over the dimensions that still have steps: (dimension, its
  // step), so a step's peer differs from the rank in one coordinate.
  std::vector<int> left;
  for (int d : dims_) {
    int k = 0;
    while ((1 << k) < d) ++k;
    left.push_back(k);
  }
  for (int k = 0;; ++k) {
    bool any = false;
    for (size_t d = 0; d < dims_.size(); ++d) {
      if (k < left[d]) {
        plan_.emplace_back(static_cast<int>(d), k);
        if (dims_.size() == 1) rho_.push_back(Mod(SwingRho(k), p_));
        any = true;
      }
    }
    if (!any) break;
  }
}

int SwingPeers::Peer(int vr, int step) const {
  if (dims_.size() == 1) {
    // SwingPeer without its divisions: ciuic-sim asks this for every node
    // of every rank's trees.
    const int r = rho_[static_cast<size_t>(step)];
    const int v = vr % 2 == 0 ? vr + r : vr - r;
    return v >= p_ ? v - p_ : v < 0 ? v + p_ : v;
  }
  const auto [dim, k] = plan_[static_cast<size_t>(step)];
  // The stride of `dim` in row-major order (the last dimension fastest).
  int stride = 1;
  for (size_t d = dims_.size(); d-- > static_cast<size_t>(dim) + 1;) stride *= dims_[d];
  const int len = dims_[static_cast<size_t>(dim)];
  const int c = vr / stride % len;
  return vr + (SwingPeer(c, k, len) - c) * stride;
}

Status AllReduceSwing(const CollectiveArgs& a, Builder& b) {
  const int rank = a.rank, p = a.nranks;
  const int nch = b.UseChannels(a.count, a.nchannels);
  if (FloorPow2(p) != p) return AllReduceSwingAnyCount(a, b, nch);
  if (p <= kSwingRankOrderRanks) return AllReduceSwingRankOrder(a, b, nch);
  const SwingPeers peers(p, a.torus_dims);
  const int steps = peers.steps();
  b.Scratch(a.count);
  const std::vector<int> order = SwingBlockOrder(rank, peers);
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
    std::vector<int> rs_sends;
    for (int s = 0, w = p; s < steps; ++s, w /= 2) {
      const int peer = peers.Peer(rank, s);
      const int snd = b.Send(peer, c, S(w / 2, w), last);
      const int rr = b.RecvReduce(peer, c, S(0, w / 2), S(0, w / 2), last);
      rs_sends.push_back(snd);
      last = {snd, rr};
    }
    for (int s = steps - 1, h = 1; s >= 0; --s, h *= 2) {
      const int peer = peers.Peer(rank, s);
      const int snd = b.Send(peer, c, S(0, h), last);
      std::vector<int> deps = last;
      deps.push_back(rs_sends[static_cast<size_t>(s)]);  // it read what this receive overwrites
      const int rcv = b.Recv(peer, c, S(h, 2 * h), deps);
      last = {snd, rcv};
    }
    for (int i = 0; i < p; ++i) {
      const auto [boff, blen] = EvenPart(off, len, p, order[static_cast<size_t>(i)]);
      b.Copy(S(i, i + 1), Out(boff, blen), last);
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
