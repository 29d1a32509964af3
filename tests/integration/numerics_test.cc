// Numerics of reductions across ranks: f16/bf16/e4m3/e5m2 on inputs that
// are not exactly representable sums (random normals, mixed magnitudes,
// cancellations) against an f64 reference, under CIUIC_ACCUMULATE=f32 (one
// final rounding) and =wire (a rounding per hop, within the bound the
// README gives), for every all-reduce algorithm, reduce and reduce-scatter;
// the results bitwise identical on every rank. Also the integer, bool and
// bitwise additions and premul_sum, exactly, through the collectives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <xmmintrin.h>
#endif

#include "ciuic/collectives.h"
#include "ciuic/kernels.h"
#include "collectives/algorithms.h"
#include "kernels/reference.h"
#include "tests/util/multiproc.h"

namespace ciuic {
namespace {

using collectives::Collective;
using std::chrono::milliseconds;
using testing::RankResult;
using testing::RunRanks;

#define CHECK_OR_FAIL(cond, what)                                                                \
  do {                                                                                           \
    if (!(cond)) return InternalError(std::string("rank ") + std::to_string(c.rank()) + ": " + (what)); \
  } while (0)

std::string ResultsText(const std::vector<RankResult>& results) {
  std::string s;
  for (const auto& r : results) s += r.Describe() + "\n";
  return s;
}

StatusOr<std::unique_ptr<Communicator>> MakeComm(int rank, int n, transport::Store& store, const std::string& transport,
                                                 const std::string& algo, const std::string& accumulate) {
  CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
  config.transport = transport;
  config.algo = algo;
  config.accumulate = accumulate;
  config.timeout_ms = 60000;
  config.chunk_size = 16 << 10;  // many chunks per message
  config.buffer_size = 64 << 10;
  std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
  return Communicator::CreateWithStore(rank, n, s, config);
}

// Mantissa bits and smallest normal exponent of a narrow float.
void Format(DataType dt, int* mant, int* emin) {
  switch (dt) {
    case DataType::kFloat16: *mant = 10; *emin = -14; return;
    case DataType::kBFloat16: *mant = 7; *emin = -126; return;
    case DataType::kFloat8E4M3: *mant = 3; *emin = -6; return;
    default: *mant = 2; *emin = -14; return;
  }
}
// The spacing of dt's values at |v| (the subnormal step below the normals).
double Ulp(DataType dt, double v) {
  int mant = 0, emin = 0;
  Format(dt, &mant, &emin);
  int e = v != 0 ? std::ilogb(v) : emin;
  if (e < emin) e = emin;
  return std::ldexp(1.0, e - mant);
}
double UnitRoundoff(DataType dt) {
  int mant = 0, emin = 0;
  Format(dt, &mant, &emin);
  return std::ldexp(1.0, -(mant + 1));
}

double Decode(DataType dt, const std::vector<uint8_t>& bytes, size_t i) {
  const size_t es = DataTypeSize(dt);
  uint32_t bits = 0;
  std::memcpy(&bits, bytes.data() + i * es, es);
  return kernels::ref::NarrowToF32(dt, bits);
}

// Rank r's input values (each exactly a value of dt): normals at
// magnitudes 10^-2..10^1.5, and every 5th element a cancellation (even
// ranks +B, odd ranks -B, plus a small part). e4m3 is kept where n of them
// cannot saturate (448).
std::vector<double> Inputs(DataType dt, int r, int n, size_t count, int salt) {
  std::mt19937_64 rng(static_cast<uint64_t>(salt) * 7919 + static_cast<uint64_t>(r));
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> expo(-2.0, 1.5);
  const double limit = dt == DataType::kFloat8E4M3 ? 150.0 / n : 1e4;
  std::vector<double> v(count);
  for (size_t i = 0; i < count; ++i) {
    double x = normal(rng) * std::pow(10.0, expo(rng));
    if (i % 5 == 0) x = (r % 2 == 0 ? 1 : -1) * std::min(50.0, limit * 0.8) + normal(rng) * 0.01;
    x = std::max(-limit, std::min(limit, x));
    v[i] = kernels::ref::NarrowToF32(dt, kernels::ref::F32ToNarrow(dt, static_cast<float>(x)));
  }
  return v;
}

uint64_t Hash(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  return h;
}

// One reduction of a narrow float type; checks every element of this
// rank's result against the exact value and the mode's bound, and (all-reduce)
// that every rank holds the same bytes. Returns the largest error seen as a
// multiple of the f32 mode's bound (> 1: that mode's promise would be broken).
StatusOr<double> CheckNarrow(Communicator& c, Collective coll, DataType dt, ReduceOp op, double factor, size_t count,
                             bool f32_mode, int salt) {
  const int n = c.size(), rank = c.rank(), root = n - 1;
  const size_t es = DataTypeSize(dt);
  const size_t in_count = coll == Collective::kReduceScatter ? count * n : count;
  std::vector<std::vector<double>> all(n);
  for (int r = 0; r < n; ++r) all[r] = Inputs(dt, r, n, in_count, salt);
  std::vector<uint8_t> in(in_count * es), out(count * es + 1, 0xEE);
  for (size_t i = 0; i < in_count; ++i) {
    const uint32_t bits = kernels::ref::F32ToNarrow(dt, static_cast<float>(all[rank][i]));
    std::memcpy(in.data() + i * es, &bits, es);
  }
  ReduceOp call_op = op;
  if (op == ReduceOp::kPremulSum) {
    CIUIC_ASSIGN_OR_RETURN(call_op, c.CreatePremulSum(factor));
  }
  switch (coll) {
    case Collective::kAllReduce: CIUIC_RETURN_IF_ERROR(c.AllReduce(in.data(), out.data(), count, dt, call_op)); break;
    case Collective::kReduce: CIUIC_RETURN_IF_ERROR(c.Reduce(in.data(), out.data(), count, dt, call_op, root)); break;
    default: CIUIC_RETURN_IF_ERROR(c.ReduceScatter(in.data(), out.data(), count, dt, call_op)); break;
  }
  if (op == ReduceOp::kPremulSum) CIUIC_RETURN_IF_ERROR(c.DestroyReduceOp(call_op));
  const std::string what = std::string(collectives::CollectiveName(coll)) + " " + DataTypeName(dt) + " " +
                           ReduceOpName(op) + " count " + std::to_string(count) + (f32_mode ? " f32" : " wire");
  CHECK_OR_FAIL(out[count * es] == 0xEE, what + ": wrote past the output");
  double worst = 0;
  if (coll == Collective::kReduce && rank != root) return worst;
  const size_t base = coll == Collective::kReduceScatter ? count * static_cast<size_t>(rank) : 0;
  const double f = op == ReduceOp::kPremulSum ? factor : 1.0;
  const double u32 = std::ldexp(1.0, -24), uw = UnitRoundoff(dt);
  const double tiny = Ulp(dt, 0);  // underflow: the subnormal step per rounding
  for (size_t i = 0; i < count; ++i) {
    double exact = 0, abs_sum = 0;
    for (int r = 0; r < n; ++r) {
      exact += f * all[r][base + i];
      abs_sum += std::fabs(f * all[r][base + i]);
    }
    if (op == ReduceOp::kAvg) {
      exact /= n;
      abs_sum /= n;
    }
    const double got = Decode(dt, out, i);
    const double err = std::fabs(got - exact);
    const double final_rounding = 0.5 * std::max(Ulp(dt, exact), Ulp(dt, got));
    // f32: the f32 sum's own error, then one rounding to dt.
    const double f32_bound = final_rounding + (n + 1) * u32 * abs_sum + tiny;
    // wire: a rounding per hop (at most n - 1 of them on any path), the
    // premul factor's and avg's roundings, and the final one.
    const double wire_bound = final_rounding + (n + 1) * uw * abs_sum + n * tiny;
    const double bound = f32_mode ? f32_bound : wire_bound;
    CHECK_OR_FAIL(std::isfinite(got) && err <= bound,
                  what + ": element " + std::to_string(i) + " = " + std::to_string(got) + ", exact " +
                      std::to_string(exact) + ", error " + std::to_string(err) + " > bound " + std::to_string(bound));
    worst = std::max(worst, err / f32_bound);
  }
  if (coll == Collective::kAllReduce && count > 0) {
    // The same bytes on every rank.
    const uint64_t mine = Hash(out.data(), count * es);
    std::vector<uint64_t> hashes(n);
    CIUIC_RETURN_IF_ERROR(c.AllGather(&mine, hashes.data(), 1, DataType::kUint64));
    for (int r = 0; r < n; ++r) CHECK_OR_FAIL(hashes[r] == mine, what + ": rank " + std::to_string(r) + " holds other bytes");
  }
  return worst;
}

struct Param {
  std::string transport;
  std::string algo;  // an all-reduce algorithm, or auto
  int nranks;
  std::string accumulate;
};
std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return info.param.transport + "_" + info.param.algo + "_" + std::to_string(info.param.nranks) + "_" +
         info.param.accumulate;
}

class NumericsTest : public ::testing::TestWithParam<Param> {};

constexpr DataType kNarrow[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat8E4M3,
                                DataType::kFloat8E5M2};

TEST_P(NumericsTest, NarrowFloatsWithinTheModesBound) {
  const Param p = GetParam();
  const bool f32_mode = p.accumulate == "f32";
  auto results = RunRanks(p.nranks, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, p.nranks, store, p.transport, p.algo, p.accumulate));
    Communicator& c = *comm;
    int salt = 0;
    for (DataType dt : kNarrow) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kPremulSum}) {
        for (size_t count : {size_t{1}, size_t{1000}, size_t{(1u << 16) + 3}}) {
          CIUIC_RETURN_IF_ERROR(CheckNarrow(c, Collective::kAllReduce, dt, op, 0.375, count, f32_mode, ++salt).status());
        }
        CIUIC_RETURN_IF_ERROR(CheckNarrow(c, Collective::kReduceScatter, dt, op, 0.375, 1000, f32_mode, ++salt).status());
        CIUIC_RETURN_IF_ERROR(CheckNarrow(c, Collective::kReduce, dt, op, 0.375, 1000, f32_mode, ++salt).status());
      }
    }
    return Status::Ok();
  }, milliseconds(240000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

std::vector<Param> Params() {
  std::vector<Param> out;
  for (const char* mode : {"f32", "wire"}) {
    // Every all-reduce schedule over links, at a power of two and not; the
    // knob forces the all-reduce's algorithm (reduce and reduce-scatter
    // take their selection's).
    for (collectives::Algorithm a : collectives::AlgorithmsFor(Collective::kAllReduce)) {
      for (int n : {3, 4, 7}) out.push_back({"tcp", collectives::AlgorithmName(a), n, mode});
    }
    // Shared memory as users get it (the direct family rounds once in
    // either mode), and a ring over its links.
    for (int n : {2, 4, 5}) out.push_back({"shm", "auto", n, mode});
    out.push_back({"shm", "ring", 4, mode});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Matrix, NumericsTest, ::testing::ValuesIn(Params()), ParamName);

// The reason for the f32 mode: a ring rounding bf16 at each of its hops
// breaks the one-rounding bound that f32 accumulation keeps, on the same
// inputs; reduce and reduce-scatter under each of their algorithms too.
TEST(Numerics, WireRoundingPerHopExceedsTheF32Bound) {
  const int n = 8;
  auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
    double worst[2] = {0, 0};
    for (int m = 0; m < 2; ++m) {
      const std::string mode = m == 0 ? "f32" : "wire";
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, n, store, "tcp", "ring", mode));
      CIUIC_ASSIGN_OR_RETURN(worst[m], CheckNarrow(*comm, Collective::kAllReduce, DataType::kBFloat16, ReduceOp::kSum,
                                                   1.0, 20000, m == 0, 99));
      for (Collective coll : {Collective::kReduce, Collective::kReduceScatter}) {
        for (collectives::Algorithm a : collectives::AlgorithmsFor(coll)) {
          const std::string knob = std::string(collectives::CollectiveName(coll)) + ":" + collectives::AlgorithmName(a);
          CIUIC_ASSIGN_OR_RETURN(auto forced, MakeComm(rank, n, store, "tcp", knob, mode));
          CIUIC_RETURN_IF_ERROR(
              CheckNarrow(*forced, coll, DataType::kBFloat16, ReduceOp::kSum, 1.0, 3000, m == 0, 100).status());
        }
      }
    }
    if (rank == 0 && !(worst[0] <= 1.0 && worst[1] > 1.0)) {
      return InternalError("largest error / f32 bound: f32 mode " + std::to_string(worst[0]) + ", wire mode " +
                           std::to_string(worst[1]) + " (want <= 1 and > 1)");
    }
    return Status::Ok();
  }, milliseconds(240000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

#if defined(__x86_64__) && defined(__GNUC__)
// Ranks whose programs round upward and flush subnormals (MXCSR, which
// the progress thread inherits; ranks 0 and 2 here, rank 1 in the default
// environment) compute the same bytes as ranks all in the default one:
// sums with subnormals and rounding, and AVG's division by 3 (kernels,
// division and selection run in the default environment).
TEST(Numerics, ResultsIgnoreTheCallersFloatingPointEnvironment) {
  for (const char* transport : {"shm", "tcp"}) {
    auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
      const unsigned saved = _mm_getcsr();
      const unsigned odd_csr = rank % 2 == 0 ? 0xDFC0 : saved;  // upward, FTZ, DAZ
      _mm_setcsr(odd_csr);
      StatusOr<std::unique_ptr<Communicator>> odd = MakeComm(rank, 3, store, transport, "auto", "f32");
      _mm_setcsr(saved);
      CIUIC_RETURN_IF_ERROR(odd.status());
      CIUIC_ASSIGN_OR_RETURN(auto plain, MakeComm(rank, 3, store, transport, "auto", "f32"));
      const size_t count = 5003;
      std::mt19937 rng(static_cast<unsigned>(rank) + 11);
      std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
      std::vector<float> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = std::ldexp(unit(rng), i % 5 == 0 ? -130 : static_cast<int>(i % 40) - 20);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
        for (DataType dt : {DataType::kFloat32, DataType::kBFloat16}) {
          std::vector<uint16_t> narrow(count);
          for (size_t i = 0; i < count; ++i) narrow[i] = kernels::ref::F32ToBF16(in[i]);
          const void* src = dt == DataType::kFloat32 ? static_cast<const void*>(in.data()) : narrow.data();
          std::vector<char> a(count * 4), b(count * 4);
          _mm_setcsr(odd_csr);
          const Status sa = (*odd)->AllReduce(src, a.data(), count, dt, op);
          _mm_setcsr(saved);
          CIUIC_RETURN_IF_ERROR(sa);
          CIUIC_RETURN_IF_ERROR(plain->AllReduce(src, b.data(), count, dt, op));
          if (std::memcmp(a.data(), b.data(), count * DataTypeSize(dt)) != 0) {
            return InternalError(std::string(DataTypeName(dt)) + " " + ReduceOpName(op) + " over " + transport +
                                 ": other bytes under upward rounding with FTZ/DAZ");
          }
        }
      }
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << transport << "\n" << ResultsText(results);
  }
}
#else
TEST(Numerics, ResultsIgnoreTheCallersFloatingPointEnvironment) {
  GTEST_SKIP() << "only x86 runs collectives in the default floating-point environment (MXCSR); arm64's FPCR is "
                  "not handled yet";
}
#endif

TEST(Numerics, EveryRankMustUseTheSameAccumulation) {
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    StatusOr<std::unique_ptr<Communicator>> comm = MakeComm(rank, 2, store, "tcp", "auto", rank == 0 ? "f32" : "wire");
    if (rank == 0) return Status::Ok();
    if (comm.ok()) return InternalError("rank 1 with CIUIC_ACCUMULATE=wire joined rank 0's f32");
    if (comm.status().message().find("CIUIC_ACCUMULATE=wire differs from rank 0's f32") == std::string::npos) {
      return InternalError("unexpected error: " + comm.status().ToString());
    }
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
  Config c;
  EXPECT_EQ(c.accumulate, "wire");  // the default (perf/RESULTS.md: f32 costs 2-4x from 256 KiB on schedules)
}

// Integers of 16 bits, bool and the bitwise ops: exact, through every
// reduction and the moving collectives.
template <typename T>
T IntInput(int r, size_t i) {
  return static_cast<T>((i * 2654435761u) ^ (static_cast<size_t>(r) * 40503u + 7));
}

template <typename T>
T Fold(DataType dt, ReduceOp op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  if (dt == DataType::kBool) {
    if (op == ReduceOp::kSum) op = ReduceOp::kMax;
    if (op == ReduceOp::kProd) op = ReduceOp::kMin;
  }
  switch (op) {
    case ReduceOp::kSum: case ReduceOp::kAvg: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::kProd: return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) * static_cast<U>(b)));
    case ReduceOp::kMin: return a < b ? a : b;
    case ReduceOp::kMax: return a > b ? a : b;
    case ReduceOp::kBand: return static_cast<T>(a & b);
    case ReduceOp::kBor: return static_cast<T>(a | b);
    default: return static_cast<T>(a ^ b);
  }
}

template <typename T>
Status CheckInts(Communicator& c, DataType dt, ReduceOp op, size_t count) {
  const int n = c.size(), rank = c.rank();
  auto input = [&](int r, size_t i) {
    T v = IntInput<T>(r, i);
    return dt == DataType::kBool ? static_cast<T>(v & 1) : v;
  };
  std::vector<T> in(count), out(count), rs(count * n), rs_out(count);
  for (size_t i = 0; i < count; ++i) in[i] = input(rank, i);
  for (size_t i = 0; i < count * n; ++i) rs[i] = input(rank, i);
  CIUIC_RETURN_IF_ERROR(c.AllReduce(in.data(), out.data(), count, dt, op));
  CIUIC_RETURN_IF_ERROR(c.ReduceScatter(rs.data(), rs_out.data(), count, dt, op));
  auto want = [&](size_t i) {
    T acc = input(0, i);
    for (int r = 1; r < n; ++r) acc = Fold<T>(dt, op, acc, input(r, i));
    if (op == ReduceOp::kAvg) acc = static_cast<T>(acc / static_cast<T>(n));
    return acc;
  };
  const std::string what = std::string(DataTypeName(dt)) + " " + ReduceOpName(op);
  for (size_t i = 0; i < count; ++i) {
    CHECK_OR_FAIL(out[i] == want(i), what + " allreduce element " + std::to_string(i));
    CHECK_OR_FAIL(rs_out[i] == want(count * rank + i), what + " reduce_scatter element " + std::to_string(i));
  }
  return Status::Ok();
}

class NewTypesTest : public ::testing::TestWithParam<Param> {};

TEST_P(NewTypesTest, IntegersBoolBitwiseFp8MovesAndPremul) {
  const Param p = GetParam();
  auto results = RunRanks(p.nranks, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, p.nranks, store, p.transport, p.algo, p.accumulate));
    Communicator& c = *comm;
    for (size_t count : {size_t{1}, size_t{1000}, size_t{20011}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg,
                          ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
        CIUIC_RETURN_IF_ERROR(CheckInts<int16_t>(c, DataType::kInt16, op, count));
        CIUIC_RETURN_IF_ERROR(CheckInts<uint16_t>(c, DataType::kUint16, op, count));
        CIUIC_RETURN_IF_ERROR(CheckInts<int32_t>(c, DataType::kInt32, op, count));
        if (op != ReduceOp::kAvg) CIUIC_RETURN_IF_ERROR(CheckInts<uint8_t>(c, DataType::kBool, op, count));
      }
      // fp8 moves bytes untouched: broadcast and all-gather of every code.
      std::vector<uint8_t> codes(count), gathered(count * p.nranks);
      for (size_t i = 0; i < count; ++i) codes[i] = static_cast<uint8_t>(i * 31 + rank);
      for (DataType dt : {DataType::kFloat8E4M3, DataType::kFloat8E5M2}) {
        CIUIC_RETURN_IF_ERROR(c.AllGather(codes.data(), gathered.data(), count, dt));
        for (int r = 0; r < p.nranks; ++r) {
          for (size_t i = 0; i < count; ++i) {
            CHECK_OR_FAIL(gathered[r * count + i] == static_cast<uint8_t>(i * 31 + r), "fp8 allgather");
          }
        }
      }
      // premul_sum on f32 and f64: every rank's input scaled, then summed.
      std::vector<double> d(count), dout(count);
      for (size_t i = 0; i < count; ++i) d[i] = static_cast<double>((i % 13) + rank);
      CIUIC_ASSIGN_OR_RETURN(ReduceOp half, c.CreatePremulSum(0.5));
      CIUIC_RETURN_IF_ERROR(c.AllReduce(d.data(), dout.data(), count, DataType::kFloat64, half));
      for (size_t i = 0; i < count; ++i) {
        double want = 0;
        for (int r = 0; r < p.nranks; ++r) want += 0.5 * static_cast<double>((i % 13) + r);
        CHECK_OR_FAIL(dout[i] == want, "premul_sum f64 element " + std::to_string(i));
      }
      // In place, through a fusion bucket.
      FusionBucket bucket(c, DataType::kFloat64, half, 4096);
      CIUIC_RETURN_IF_ERROR(bucket.Add(d.data(), count));
      CIUIC_RETURN_IF_ERROR(bucket.Wait());
      for (size_t i = 0; i < count; ++i) CHECK_OR_FAIL(d[i] == dout[i], "premul_sum in a bucket");
      CIUIC_RETURN_IF_ERROR(c.DestroyReduceOp(half));
    }
    return Status::Ok();
  }, milliseconds(240000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

INSTANTIATE_TEST_SUITE_P(Matrix, NewTypesTest,
                         ::testing::Values(Param{"shm", "auto", 3, "f32"}, Param{"tcp", "auto", 4, "f32"},
                                           Param{"tcp", "ring", 3, "wire"}, Param{"tcp", "tree", 5, "f32"}),
                         ParamName);

// The working copies (f32 widening, premul_sum) with an output that
// overlaps the input partly, and a reduce whose non-roots pass a recvbuf
// inside their sendbuf: exact results, nothing written outside.
TEST(Numerics, WorkingCopiesWithPartlyOverlappingBuffers) {
  for (const char* transport : {"tcp", "shm"}) {
    auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 3, store, transport, "ring", "f32"));
      Communicator& c = *comm;
      CIUIC_ASSIGN_OR_RETURN(ReduceOp half, c.CreatePremulSum(0.5));
      const size_t count = 3000, shift = 5;
      for (ReduceOp op : {ReduceOp::kSum, half}) {
        std::vector<uint16_t> buf(count + shift + 8);
        std::vector<float> vals(count + shift + 8, 7.0f);
        for (size_t i = 0; i < count; ++i) vals[i] = static_cast<float>(i % 17 + rank);
        for (size_t i = 0; i < buf.size(); ++i) buf[i] = kernels::ref::F32ToBF16(vals[i]);
        const uint16_t guard = buf[count + shift];
        CIUIC_RETURN_IF_ERROR(c.AllReduce(buf.data(), buf.data() + shift, count, DataType::kBFloat16, op));
        const float f = op == ReduceOp::kSum ? 1.0f : 0.5f;
        for (size_t i = 0; i < count; ++i) {
          const float want = f * static_cast<float>(3 * (i % 17) + 3);
          CHECK_OR_FAIL(kernels::ref::BF16ToF32(buf[shift + i]) == want,
                        std::string(transport) + " overlapping all-reduce element " + std::to_string(i));
        }
        CHECK_OR_FAIL(buf[count + shift] == guard, "wrote past the output");
        // reduce: the non-roots' recvbuf runs past the end of their sendbuf.
        std::vector<uint16_t> in(count), out(count + 16);
        for (size_t i = 0; i < count; ++i) in[i] = kernels::ref::F32ToBF16(static_cast<float>(i % 5 + rank));
        void* recv = rank == 0 ? out.data() : static_cast<void*>(in.data() + count / 2);
        CIUIC_RETURN_IF_ERROR(c.Reduce(in.data(), recv, count, DataType::kBFloat16, op, 0));
        for (size_t i = 0; rank == 0 && i < count; ++i) {
          CHECK_OR_FAIL(kernels::ref::BF16ToF32(out[i]) == f * static_cast<float>(3 * (i % 5) + 3),
                        std::string(transport) + " reduce element " + std::to_string(i));
        }
      }
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << transport << "\n" << ResultsText(results);
  }
}

TEST(Numerics, PremulOpsAndTypeChecksAreNamedErrors) {
  auto results = RunRanks(1, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 1, store, "shm", "auto", "f32"));
    Communicator& c = *comm;
    CIUIC_ASSIGN_OR_RETURN(ReduceOp a, c.CreatePremulSum(2.0));
    CIUIC_ASSIGN_OR_RETURN(ReduceOp b, c.CreatePremulSum(3.0));
    CHECK_OR_FAIL(static_cast<int>(a) >= 256 && a != b, "premul ops are distinct values from 256");
    float x[2] = {1, 2}, y[2];
    CIUIC_RETURN_IF_ERROR(c.AllReduce(x, y, 2, DataType::kFloat32, b));
    CHECK_OR_FAIL(y[0] == 3 && y[1] == 6, "premul_sum x3 on one rank");
    int32_t i[2] = {1, 2}, j[2];
    Status s = c.AllReduce(i, j, 2, DataType::kInt32, a);
    CHECK_OR_FAIL(s.code() == StatusCode::kInvalidArgument &&
                      s.message().find("premul_sum on dtype i32") != std::string::npos,
                  "premul on int32: " + s.ToString());
    s = c.AllReduce(x, y, 2, DataType::kFloat32, ReduceOp::kBxor);
    CHECK_OR_FAIL(s.message().find("bxor on dtype f32") != std::string::npos, "bxor on f32: " + s.ToString());
    CIUIC_RETURN_IF_ERROR(c.DestroyReduceOp(a));
    s = c.AllReduce(x, y, 2, DataType::kFloat32, a);
    CHECK_OR_FAIL(s.code() == StatusCode::kInvalidArgument, "a destroyed op: " + s.ToString());
    CHECK_OR_FAIL(c.DestroyReduceOp(a).code() == StatusCode::kInvalidArgument, "destroying twice");
    CHECK_OR_FAIL(c.CreatePremulSum(std::nan("")).status().code() == StatusCode::kInvalidArgument, "NaN factor");
    // The communicator stays usable after argument errors.
    CIUIC_RETURN_IF_ERROR(c.AllReduce(x, y, 2, DataType::kFloat32, b));
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

}  // namespace
}  // namespace ciuic
