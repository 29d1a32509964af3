// All-reduce, hierarchical with a leader per slice ("hier"). Ranks are
// grouped into hosts by args.host_of; without a map every rank is a host
// of its own. The vector is cut into S = (most ranks on one host) slices;
// local rank j of a host of m ranks owns slices [ceil(j*S/m),
// ceil((j+1)*S/m)), a contiguous run, so its slices are one segment.
//   A. ring reduce-scatter inside each host: segment j ends at local rank j
//      holding the host's sum (shm links);
//   B. for every slice, a ring all-reduce among its owners, one per host:
//      every local rank carries a share of the traffic between hosts
//      (multi-leader: each rank's NIC share, not one leader's);
//   C. ring all-gather of the segments inside each host.
// One host degenerates to the ring all-reduce; one rank per host to a ring
// across hosts. Uneven hosts (3+1) work: a rank of a small host owns several
// slices and meets several rails. Rails of one pair of ranks share channel
// c and both sides emit them in ascending slice order, so messages match.
// In place: phase A reads input segment s before it writes output segment
// s, the rails work in the output, and phase C's receives follow the last
// step that read or wrote their segment (writer[]).
// Large vectors on several hosts of several ranks run as up to 4 pieces
// pipelined through A, B and C (C on a channel of its own), so the shm
// phases of one piece overlap the network phase of another. CIUIC_NCHANNELS
// = C splits the vector into C parts, each on channels of its own.
#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "collectives/algorithms/generators.h"

namespace ciuic::collectives::generators {

namespace {

// Pieces of at least this many elements: below it the phases' per-step
// latency costs more than their overlap saves.
constexpr size_t kPieceElems = size_t{1} << 18;
constexpr size_t kMaxPieces = 4;

}  // namespace

Status AllReduceHierarchical(const CollectiveArgs& a, Builder& b) {
  const int n = a.nranks;
  std::vector<int> host_of(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) host_of[static_cast<size_t>(r)] = r;
  if (a.host_of.size() == static_cast<size_t>(n)) host_of = a.host_of;
  int nh = 0;
  for (int h : host_of) nh = std::max(nh, h + 1);
  std::vector<std::vector<int>> members(static_cast<size_t>(nh));
  for (int r = 0; r < n; ++r) members[static_cast<size_t>(host_of[static_cast<size_t>(r)])].push_back(r);
  size_t S = 1;
  for (const auto& m : members) S = std::max(S, m.size());

  const int h = host_of[static_cast<size_t>(a.rank)];
  const std::vector<int>& mine = members[static_cast<size_t>(h)];
  const int m = static_cast<int>(mine.size());
  const int j = static_cast<int>(std::find(mine.begin(), mine.end(), a.rank) - mine.begin());
  const int next = mine[static_cast<size_t>(Mod(j + 1, m))], prev = mine[static_cast<size_t>(Mod(j - 1, m))];
  // First slice of local rank jj on a host of mm ranks: ceil(jj*S/mm).
  auto first_slice = [S](size_t jj, size_t mm) { return (jj * S + mm - 1) / mm; };

  // Channel c carries part c of the vector through all three phases (C on
  // channel nch + c where it is pipelined).
  const int nch = b.UseChannels(a.count, a.nchannels);
  for (int c = 0; c < nch; ++c) {
    const std::pair<size_t, size_t> part_c = EvenPart(0, a.count, static_cast<size_t>(nch), static_cast<size_t>(c));
    const size_t cbase = part_c.first, ccount = part_c.second;
    // Pipelined pieces: the vector is cut into P pieces, each run through
    // A, B and C on its own; A of every piece goes first on the host ring's
    // channel c, B follows each piece's A on the rails, and C runs on channel
    // nch + c, so piece k+1's shm reduce-scatter and piece k-1's all-gather overlap
    // piece k's network phase (each link keeps its steps in piece order).
    // Alike on every rank (the rails of uneven hosts must match): several
    // hosts, and some host with several ranks.
    const bool several = nh > 1 && S > 1;
    const size_t P = several ? std::clamp<size_t>(ccount / kPieceElems, 1, kMaxPieces) : 1;
    const int ch = c, c_channel = P > 1 ? nch + c : c;
    b.Channels(c_channel + 1);
    struct Piece {
      size_t base = 0, count = 0;
      std::vector<int> writer;  // phase A's last step per segment
      int a_done = -1;
      std::vector<int> rails;   // phase B's steps (C follows them)
    };
    std::vector<Piece> pieces(P);
    for (size_t k = 0; k < P; ++k) {
      std::tie(pieces[k].base, pieces[k].count) = EvenPart(cbase, ccount, P, k);
      pieces[k].writer.assign(static_cast<size_t>(m), -1);
    }
    auto slice_at = [&](const Piece& pc, size_t sl) { return pc.base + EvenSplitOffset(pc.count, S, sl); };
    auto seg = [&](const Piece& pc, int jj) {
      const size_t lo = slice_at(pc, first_slice(static_cast<size_t>(jj), static_cast<size_t>(m)));
      const size_t hi = slice_at(pc, first_slice(static_cast<size_t>(jj) + 1, static_cast<size_t>(m)));
      return std::make_pair(lo, hi - lo);
    };

    // A: reduce-scatter inside the host.
    for (Piece& pc : pieces) {
      if (m == 1) {
        pc.a_done = b.Copy(In(seg(pc, 0)), Out(seg(pc, 0)));
        continue;
      }
      pc.writer[static_cast<size_t>(Mod(j - 1, m))] = b.Send(next, ch, In(seg(pc, Mod(j - 1, m))));
      for (int t = 1; t < m; ++t) {
        const int sg = Mod(j - 1 - t, m);
        pc.writer[static_cast<size_t>(sg)] = t < m - 1
                                                 ? b.RecvReduceSend(prev, next, ch, In(seg(pc, sg)), Out(seg(pc, sg)))
                                                 : b.RecvReduce(prev, ch, In(seg(pc, sg)), Out(seg(pc, sg)));
      }
      pc.a_done = pc.writer[static_cast<size_t>(j)];
    }

    // B: one ring all-reduce per owned slice among its owners on every host.
    const size_t lo = first_slice(static_cast<size_t>(j), static_cast<size_t>(m));
    const size_t hi = first_slice(static_cast<size_t>(j) + 1, static_cast<size_t>(m));
    for (Piece& pc : pieces) {
      pc.rails = {pc.a_done};
      const int a_done = pc.a_done;
      for (size_t sl = lo; sl < hi && nh > 1; ++sl) {
        std::vector<int> rail(static_cast<size_t>(nh));
        for (int g = 0; g < nh; ++g) {
          const std::vector<int>& on = members[static_cast<size_t>(g)];
          rail[static_cast<size_t>(g)] = on[sl * on.size() / S];  // the jj with ceil(jj*S/mg) <= sl < ceil((jj+1)*S/mg)
        }
        const size_t base = slice_at(pc, sl), len = slice_at(pc, sl + 1) - base;
        auto part = [&](int x) { return EvenPart(base, len, static_cast<size_t>(nh), static_cast<size_t>(Mod(x, nh))); };
        const int p = h;
        const int rnext = rail[static_cast<size_t>(Mod(p + 1, nh))], rprev = rail[static_cast<size_t>(Mod(p - 1, nh))];
        std::vector<int> rw(static_cast<size_t>(nh), -1);
        rw[static_cast<size_t>(p)] = b.Send(rnext, ch, Out(part(p)), {a_done});
        pc.rails.push_back(rw[static_cast<size_t>(p)]);
        for (int t = 1; t < nh; ++t) {
          const int x = Mod(p - t, nh);
          rw[static_cast<size_t>(x)] = b.RecvReduceSend(rprev, rnext, ch, Out(part(x)), Out(part(x)), {a_done});
          pc.rails.push_back(rw[static_cast<size_t>(x)]);
        }
        for (int t = 1; t < nh; ++t) {
          const int x = Mod(p + 1 - t, nh);
          pc.rails.push_back(t < nh - 1 ? b.RecvCopySend(rprev, rnext, ch, Out(part(x)), {rw[static_cast<size_t>(x)]})
                                        : b.Recv(rprev, ch, Out(part(x)), {rw[static_cast<size_t>(x)]}));
        }
      }
    }

    // C: all-gather inside the host, once this rank's slices are final.
    for (Piece& pc : pieces) {
      if (m == 1) break;
      b.Send(next, c_channel, Out(seg(pc, j)), pc.rails);
      for (int t = 1; t < m; ++t) {
        const int sg = Mod(j - t, m);
        const std::vector<int> deps = {pc.writer[static_cast<size_t>(sg)]};
        if (t < m - 1) {
          b.RecvCopySend(prev, next, c_channel, Out(seg(pc, sg)), deps);
        } else {
          b.Recv(prev, c_channel, Out(seg(pc, sg)), deps);
        }
      }
    }
  }
  return Status::Ok();
}

}  // namespace ciuic::collectives::generators
