// Test helpers for the collectives: a scalar reference reduction (the
// simulator's callback), input generation, a reference result per
// collective, and one call that builds every rank's schedule, simulates it
// and compares with the reference.
#ifndef CIUIC_TESTS_UNIT_COLLECTIVES_REFERENCE_H_
#define CIUIC_TESTS_UNIT_COLLECTIVES_REFERENCE_H_

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/simulator.h"

namespace ciuic::collectives::testing {

enum class Op { kSum, kProd, kMin, kMax };

inline const char* OpName(Op op) {
  switch (op) {
    case Op::kSum: return "sum";
    case Op::kProd: return "prod";
    case Op::kMin: return "min";
    case Op::kMax: return "max";
  }
  return "?";
}

// a (+) b. Integer sum/prod wrap (through unsigned arithmetic, no UB), so
// every combining order gives the same bits.
template <typename T>
T Combine(Op op, T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<std::conditional_t<sizeof(T) < sizeof(int), int, T>>;
    switch (op) {
      case Op::kSum: return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
      case Op::kProd: return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
      case Op::kMin: return a < b ? a : b;
      case Op::kMax: return a < b ? b : a;
    }
  } else {
    switch (op) {
      case Op::kSum: return a + b;
      case Op::kProd: return a * b;
      case Op::kMin: return a < b ? a : b;
      case Op::kMax: return a < b ? b : a;
    }
  }
  return a;
}

// The scalar reference reduction as the simulator's callback.
template <typename T>
ReduceFn MakeReduce(Op op) {
  return [op](void* dst, const void* const* srcs, int nsrcs, size_t count) {
    for (size_t i = 0; i < count; ++i) {
      T acc;
      std::memcpy(&acc, static_cast<const uint8_t*>(srcs[0]) + i * sizeof(T), sizeof(T));
      for (int s = 1; s < nsrcs; ++s) {
        T v;
        std::memcpy(&v, static_cast<const uint8_t*>(srcs[s]) + i * sizeof(T), sizeof(T));
        acc = Combine(op, acc, v);
      }
      std::memcpy(static_cast<uint8_t*>(dst) + i * sizeof(T), &acc, sizeof(T));
    }
  };
}

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Small values whose sums and products over <= 16 ranks are exact in every
// type (and never zero, so products stay informative).
template <typename T>
std::vector<T> ExactValues(size_t n, uint32_t seed, Op op) {
  std::mt19937 rng(seed);
  std::vector<T> v(n);
  for (auto& x : v) {
    int k;
    if (op == Op::kProd) {
      k = static_cast<int>(rng() % 3) + 1;  // 1..3
    } else {
      k = static_cast<int>(rng() % 200);
      if (std::is_signed_v<T>) k -= 100;
    }
    x = static_cast<T>(k);
  }
  return v;
}

struct Case {
  Collective collective = Collective::kAllReduce;
  Algorithm algorithm = Algorithm::kRing;
  int nranks = 1;
  size_t count = 0;
  int nchannels = 1;
  size_t chunk_bytes = 4096;
  int slots = 2;
  bool in_place = false;
  int root = 0;
  std::vector<int> host_of;  // empty: every rank a host of its own
  int radix = 0;             // the k-nomial radix (0: the default)
  int aggregation = 0;       // PAT's aggregation (0: all)
  std::vector<int> torus_dims;  // Swing's torus (empty: one ring)

  std::string Name() const {
    return std::string(CollectiveName(collective)) + "/" + AlgorithmName(algorithm) + " n=" +
           std::to_string(nranks) + " count=" + std::to_string(count) + " ch=" + std::to_string(nchannels) +
           " chunk=" + std::to_string(chunk_bytes) + "B slots=" + std::to_string(slots) +
           (in_place ? " in-place" : " out-of-place") + " root=" + std::to_string(root) +
           (radix != 0 ? " radix=" + std::to_string(radix) : "") +
           (aggregation != 0 ? " aggregation=" + std::to_string(aggregation) : "") + HostsName() + TorusName();
  }
  std::string TorusName() const {
    std::string s;
    for (size_t d = 0; d < torus_dims.size(); ++d) s += (d ? "x" : " torus=") + std::to_string(torus_dims[d]);
    return s;
  }
  std::string HostsName() const {
    std::string s;
    for (size_t r = 0; r < host_of.size(); ++r) s += (r ? "," : " hosts=") + std::to_string(host_of[r]);
    return s;
  }
};

// Per-rank counts for the v-variants: uneven, with empty blocks.
inline std::vector<size_t> VCounts(size_t count, int n) {
  std::vector<size_t> c(n, 0);
  if (count == 0) return c;
  for (int r = 0; r < n; ++r) c[r] = (r % 3 == 2) ? 0 : (count >> (r % 2)) + static_cast<size_t>(r);
  return c;
}

// All-to-all-v: what rank r sends rank p (uneven, some 0), and the
// displacements of rank r's blocks: packed in reverse peer order, so they
// are not the prefix sums.
inline size_t AllToAllvCount(size_t count, int r, int p) {
  return count == 0 ? 0 : (count + 3 * static_cast<size_t>(r) + static_cast<size_t>(p)) % (count + 2);
}
inline std::vector<size_t> ReverseDispls(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size(), 0);
  size_t at = 0;
  for (size_t i = counts.size(); i-- > 0;) {
    d[i] = at;
    at += counts[i];
  }
  return d;
}
inline std::vector<size_t> AllToAllvCounts(size_t count, int rank, int n) {
  std::vector<size_t> sc(n), rc(n);
  for (int p = 0; p < n; ++p) {
    sc[p] = AllToAllvCount(count, rank, p);
    rc[p] = AllToAllvCount(count, p, rank);
  }
  std::vector<size_t> out = sc;
  for (size_t v : ReverseDispls(sc)) out.push_back(v);
  out.insert(out.end(), rc.begin(), rc.end());
  for (size_t v : ReverseDispls(rc)) out.push_back(v);
  return out;
}

inline CollectiveArgs ArgsFor(const Case& c, int rank) {
  CollectiveArgs a;
  a.collective = c.collective;
  a.rank = rank;
  a.nranks = c.nranks;
  a.count = c.count;
  a.nchannels = c.nchannels;
  a.root = c.root;
  a.host_of = c.host_of;
  a.radix = c.radix;
  a.aggregation = c.aggregation;
  a.torus_dims = c.torus_dims;
  if (c.collective == Collective::kAllGatherv || c.collective == Collective::kReduceScatterv) {
    a.counts = VCounts(c.count, c.nranks);
  }
  if (c.collective == Collective::kAllToAllv) a.counts = AllToAllvCounts(c.count, rank, c.nranks);
  return a;
}

// What every rank's output must be, from the (logical) inputs x[r].
template <typename T>
std::vector<std::vector<T>> Expected(const Case& c, Op op, const std::vector<std::vector<T>>& x) {
  const int n = c.nranks;
  std::vector<std::vector<T>> out(n);
  auto fold = [&](size_t offset_in_rank_input, size_t count) {
    std::vector<T> acc(x[0].begin() + offset_in_rank_input, x[0].begin() + offset_in_rank_input + count);
    for (int r = 1; r < n; ++r) {
      for (size_t i = 0; i < count; ++i) acc[i] = Combine(op, acc[i], x[r][offset_in_rank_input + i]);
    }
    return acc;
  };
  const std::vector<size_t> vc = VCounts(c.count, n);
  std::vector<size_t> displ(n + 1, 0);
  for (int r = 0; r < n; ++r) displ[r + 1] = displ[r] + vc[r];
  for (int rank = 0; rank < n; ++rank) {
    std::vector<T>& o = out[rank];
    switch (c.collective) {
      case Collective::kAllReduce: o = fold(0, c.count); break;
      case Collective::kBroadcast: o = x[c.root]; break;
      case Collective::kReduce:
        if (rank == c.root) o = fold(0, c.count);
        break;
      case Collective::kAllGather:
        for (int b = 0; b < n; ++b) o.insert(o.end(), x[b].begin(), x[b].end());
        break;
      case Collective::kAllGatherv:
        for (int b = 0; b < n; ++b) o.insert(o.end(), x[b].begin(), x[b].end());
        break;
      case Collective::kReduceScatter: o = fold(static_cast<size_t>(rank) * c.count, c.count); break;
      case Collective::kReduceScatterv: o = fold(displ[rank], vc[rank]); break;
      case Collective::kAllToAll:
        for (int b = 0; b < n; ++b) {
          o.insert(o.end(), x[b].begin() + static_cast<size_t>(rank) * c.count,
                   x[b].begin() + static_cast<size_t>(rank + 1) * c.count);
        }
        break;
      case Collective::kGather:
        if (rank == c.root) {
          for (int b = 0; b < n; ++b) o.insert(o.end(), x[b].begin(), x[b].end());
        }
        break;
      case Collective::kScatter:
        o.assign(x[c.root].begin() + static_cast<size_t>(rank) * c.count,
                 x[c.root].begin() + static_cast<size_t>(rank + 1) * c.count);
        break;
      case Collective::kAllToAllv: {
        // Block from b lands at this rank's receive displacement for b.
        const std::vector<size_t> mine = AllToAllvCounts(c.count, rank, n);
        size_t total = 0;
        for (int b = 0; b < n; ++b) total += mine[2 * n + b];
        o.assign(total, T{});
        for (int b = 0; b < n; ++b) {
          const std::vector<size_t> theirs = AllToAllvCounts(c.count, b, n);
          const size_t len = theirs[rank], from = theirs[n + rank], to = mine[3 * n + b];
          std::copy(x[b].begin() + from, x[b].begin() + from + len, o.begin() + to);
        }
        break;
      }
      default: break;
    }
  }
  return out;
}

// Builds all schedules of a case. Failures are reported as a Status.
inline StatusOr<std::vector<Schedule>> BuildAll(const Case& c) {
  std::vector<Schedule> s;
  for (int r = 0; r < c.nranks; ++r) {
    auto sch = MakeSchedule(c.algorithm, ArgsFor(c, r));
    if (!sch.ok()) return sch.status().WithContext(c.Name());
    s.push_back(std::move(*sch));
  }
  return s;
}

// Runs one case in the simulator with inputs `x` (x[r] = rank r's logical
// input: for broadcast only the root's matters). Returns the outputs.
template <typename T>
StatusOr<std::vector<std::vector<T>>> Run(const Case& c, Op op, const std::vector<std::vector<T>>& x) {
  CIUIC_ASSIGN_OR_RETURN(std::vector<Schedule> schedules, BuildAll(c));
  std::vector<SimRankInput> inputs(c.nranks);
  for (int r = 0; r < c.nranks; ++r) {
    CIUIC_ASSIGN_OR_RETURN(inputs[r].layout, LayoutFor(ArgsFor(c, r), c.in_place));
    std::vector<T> in(x[r].begin(), x[r].begin() + std::min(x[r].size(), inputs[r].layout.input_count));
    inputs[r].input = Bytes(in);
  }
  SimOptions opt;
  opt.chunk_bytes = c.chunk_bytes;
  opt.slots_per_link = c.slots;
  auto res = Simulate(schedules, inputs, sizeof(T), MakeReduce<T>(op), opt);
  if (!res.ok()) return res.status().WithContext(c.Name());
  std::vector<std::vector<T>> out(c.nranks);
  for (int r = 0; r < c.nranks; ++r) {
    out[r].resize(res->outputs[r].size() / sizeof(T));
    if (!out[r].empty()) std::memcpy(out[r].data(), res->outputs[r].data(), res->outputs[r].size());
  }
  return out;
}

// Logical inputs of a case: per rank, input_count elements.
template <typename T>
std::vector<std::vector<T>> MakeInputs(const Case& c, Op op, uint32_t seed) {
  std::vector<std::vector<T>> x(c.nranks);
  for (int r = 0; r < c.nranks; ++r) {
    const CollectiveArgs a = ArgsFor(c, r);
    auto l = LayoutFor(a, false);
    size_t n = l.ok() ? l->input_count : 0;
    if (c.collective == Collective::kBroadcast) n = c.count;  // every rank gets data; only the root's counts
    if (c.collective == Collective::kScatter) n = c.count * static_cast<size_t>(c.nranks);
    x[r] = ExactValues<T>(n, seed * 7919u + static_cast<uint32_t>(r), op);
  }
  return x;
}

// Runs a case with exact values and compares every rank's output with the
// reference. Returns "" on success, else a description of the first
// difference.
template <typename T>
std::string Check(const Case& c, Op op, uint32_t seed) {
  const auto x = MakeInputs<T>(c, op, seed);
  auto got = Run<T>(c, op, x);
  if (!got.ok()) return got.status().ToString();
  const auto want = Expected<T>(c, op, x);
  for (int r = 0; r < c.nranks; ++r) {
    if ((*got)[r].size() != want[r].size()) {
      return c.Name() + " " + OpName(op) + ": rank " + std::to_string(r) + " output has " +
             std::to_string((*got)[r].size()) + " elements, expected " + std::to_string(want[r].size());
    }
    if (!want[r].empty() && std::memcmp((*got)[r].data(), want[r].data(), want[r].size() * sizeof(T)) != 0) {
      size_t i = 0;
      while (std::memcmp(&(*got)[r][i], &want[r][i], sizeof(T)) == 0) ++i;
      return c.Name() + " " + OpName(op) + ": rank " + std::to_string(r) + " element " + std::to_string(i) +
             " is " + std::to_string(static_cast<double>((*got)[r][i])) + ", expected " +
             std::to_string(static_cast<double>(want[r][i]));
    }
  }
  return "";
}

}  // namespace ciuic::collectives::testing

#endif  // CIUIC_TESTS_UNIT_COLLECTIVES_REFERENCE_H_
