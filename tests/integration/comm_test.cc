// Collectives end to end: forked ranks build a Communicator over a real
// transport (shm and tcp here; verbs in the Soft-RoCE guest) and check every
// collective x algorithm x rank count x count x dtype x op against a
// reference computed in the test; in place and out of place; determinism;
// async overlap; fusion; bad input; a rank killed mid-collective.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>
#include <cstdio>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <type_traits>

#include "ciuic/ciuic.h"
#include "ciuic/collectives.h"
#include "ciuic/kernels.h"
#include "transport/transport.h"
#include "collectives/bootstrap.h"
#include "common/log.h"
#include "collectives/comm_impl.h"
#include "collectives/cost_model.h"
#include "collectives/device.h"
#include "collectives/registry.h"
#include "tests/util/backend_skip.h"
#include "tests/util/device_collectives.h"
#include "tests/util/multiproc.h"

namespace ciuic {
namespace {

using std::chrono::milliseconds;
using testing::RankResult;
using testing::RunRanks;

std::string ResultsText(const std::vector<RankResult>& results) {
  std::string s;
  for (const auto& r : results) s += r.Describe() + "\n";
  return s;
}

struct Param {
  std::string transport;
  std::string algo;
  int nranks;
};
std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return info.param.transport + "_" + info.param.algo + "_" + std::to_string(info.param.nranks);
}

// The all-reduce schedules of the registry ("ring", "tree", ...).
std::vector<std::string> AllReduceSchedules() {
  std::vector<std::string> out;
  for (collectives::Algorithm a : collectives::AlgorithmsFor(collectives::Collective::kAllReduce)) {
    out.emplace_back(collectives::AlgorithmName(a));
  }
  return out;
}

// The communicator of a forked rank.
StatusOr<std::unique_ptr<Communicator>> MakeComm(int rank, int n, transport::Store& store,
                                                 const std::string& transport, const std::string& algo,
                                                 int64_t timeout_ms = 60000) {
  CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
  config.transport = transport;
  config.algo = algo;
  config.timeout_ms = timeout_ms;
  config.chunk_size = 16 << 10;  // small slots: many chunks even for small counts
  config.buffer_size = 64 << 10;
  if (algo == "direct") {
    // The direct shm all-reduce: chunks above 16 KiB run two-shot, so the
    // 1000-element counts run one-shot and the larger ones two-shot; two
    // slots make every operation wrap around them. (Under "auto" on shm it
    // runs one-shot with the 16 KiB chunks above.)
    config.chunk_size = 64 << 10;
    config.buffer_size = 128 << 10;
  }
  std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
  return Communicator::CreateWithStore(rank, n, s, config);
}

// A forked rank's communicator with the default chunk and buffer sizes
// (MakeComm shrinks them), as users get it: the direct region's small ring
// of 64 slots and its 512 KiB large slots.
StatusOr<std::unique_ptr<Communicator>> MakeDefaultComm(int rank, int n, transport::Store& store,
                                                        const std::string& transport, const std::string& algo,
                                                        int64_t timeout_ms) {
  CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
  config.transport = transport;
  config.algo = algo;
  config.timeout_ms = timeout_ms;
  std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
  return Communicator::CreateWithStore(rank, n, s, config);
}

// Input element i of rank r, exact in every dtype (small integers).
double Input(int r, size_t i, int salt) { return static_cast<double>(((i * 7 + r * 13 + salt) % 11) + 1); }

template <typename T>
T From(double v) { return static_cast<T>(v); }

template <typename T>
void Fill(std::vector<T>* v, int r, int salt) {
  for (size_t i = 0; i < v->size(); ++i) (*v)[i] = From<T>(Input(r, i, salt));
}

template <typename T>
double Combine(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return a + b;
    case ReduceOp::kProd: return a * b;
    case ReduceOp::kMin: return std::min(a, b);
    case ReduceOp::kMax: return std::max(a, b);
    default: break;  // not used by these checks
  }
  return 0;
}

// Expected reduction of element i over ranks 0..n-1 (products wrap for the
// small integer types exactly like the kernels do: compute in T).
template <typename T>
T Expected(ReduceOp op, int n, size_t i, int salt) {
  T acc = From<T>(Input(0, i, salt));
  for (int r = 1; r < n; ++r) {
    const T v = From<T>(Input(r, i, salt));
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        if constexpr (std::is_integral_v<T>) {
          acc = static_cast<T>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));  // wraps
        } else {
          acc = static_cast<T>(acc + v);
        }
        break;
      case ReduceOp::kProd:
        if constexpr (std::is_integral_v<T>) {
          acc = static_cast<T>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));  // wraps
        } else {
          acc = static_cast<T>(acc * v);
        }
        break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      default: break;  // not used by these checks
    }
  }
  if (op == ReduceOp::kAvg) acc = static_cast<T>(acc / static_cast<T>(n));
  return acc;
}

template <typename T>
constexpr DataType TypeOf();
template <> constexpr DataType TypeOf<float>() { return DataType::kFloat32; }
template <> constexpr DataType TypeOf<double>() { return DataType::kFloat64; }
template <> constexpr DataType TypeOf<int32_t>() { return DataType::kInt32; }
template <> constexpr DataType TypeOf<int64_t>() { return DataType::kInt64; }
template <> constexpr DataType TypeOf<uint8_t>() { return DataType::kUint8; }
template <> constexpr DataType TypeOf<int8_t>() { return DataType::kInt8; }
template <> constexpr DataType TypeOf<uint32_t>() { return DataType::kUint32; }
template <> constexpr DataType TypeOf<uint64_t>() { return DataType::kUint64; }

#define EXPECT_OR_FAIL(cond, what)                                             \
  do {                                                                         \
    if (!(cond)) return InternalError(std::string("rank ") + std::to_string(rank) + ": " + (what)); \
  } while (0)

template <typename T>
Status CheckAllReduce(Communicator& c, size_t count, ReduceOp op, bool in_place, int salt) {
  const int rank = c.rank(), n = c.size();
  std::vector<T> in(count), out(count);
  Fill(&in, rank, salt);
  if (in_place) {
    CIUIC_RETURN_IF_ERROR(c.AllReduce(in.data(), in.data(), count, TypeOf<T>(), op));
    out = in;
  } else {
    CIUIC_RETURN_IF_ERROR(c.AllReduce(in.data(), out.data(), count, TypeOf<T>(), op));
    for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(in[i] == From<T>(Input(rank, i, salt)), "input modified");
  }
  // A floating product of more than 16 of these inputs outgrows the
  // mantissa, so it rounds in the algorithm's association order: n ulps.
  const bool rounds = std::is_floating_point_v<T> && op == ReduceOp::kProd && n > 16;
  for (size_t i = 0; i < count; ++i) {
    const double want = static_cast<double>(Expected<T>(op, n, i, salt));
    const bool ok = rounds ? std::fabs(static_cast<double>(out[i]) - want) <=
                                 n * std::numeric_limits<T>::epsilon() * std::fabs(want)
                           : out[i] == Expected<T>(op, n, i, salt);
    if (!ok) {
      return InternalError("rank " + std::to_string(rank) + ": allreduce count " + std::to_string(count) +
                           " op " + std::to_string(static_cast<int>(op)) + (in_place ? " in place" : "") +
                           ": element " + std::to_string(i) + " is " + std::to_string(static_cast<double>(out[i])) +
                           ", expected " + std::to_string(static_cast<double>(Expected<T>(op, n, i, salt))));
    }
  }
  return Status::Ok();
}

Status CheckOthers(Communicator& c, size_t count, int salt) {
  const int rank = c.rank(), n = c.size();
  using T = float;
  // Broadcast from each root in turn.
  for (int root = 0; root < n; root += (n > 3 ? n - 1 : 1)) {
    std::vector<T> buf(count);
    Fill(&buf, rank, salt);
    CIUIC_RETURN_IF_ERROR(c.Broadcast(buf.data(), count, DataType::kFloat32, root));
    for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(buf[i] == Input(root, i, salt), "broadcast from " + std::to_string(root));
  }
  // Reduce to the last rank.
  {
    const int root = n - 1;
    std::vector<T> in(count), out(count, -1);
    Fill(&in, rank, salt);
    CIUIC_RETURN_IF_ERROR(c.Reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, root));
    if (rank == root) {
      for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(out[i] == Expected<T>(ReduceOp::kSum, n, i, salt), "reduce");
    }
  }
  // All-gather (out of place and in place).
  {
    std::vector<T> in(count), out(count * n);
    Fill(&in, rank, salt);
    CIUIC_RETURN_IF_ERROR(c.AllGather(in.data(), out.data(), count, DataType::kFloat32));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(out[r * count + i] == Input(r, i, salt), "allgather");
    std::vector<T> inplace(count * n, -1);
    for (size_t i = 0; i < count; ++i) inplace[rank * count + i] = Input(rank, i, salt);
    CIUIC_RETURN_IF_ERROR(c.AllGather(inplace.data() + rank * count, inplace.data(), count, DataType::kFloat32));
    EXPECT_OR_FAIL(inplace == out, "allgather in place");
  }
  // Reduce-scatter: block r of the sum goes to rank r.
  {
    std::vector<T> in(count * n), out(count);
    for (size_t i = 0; i < in.size(); ++i) in[i] = Input(rank, i, salt);
    CIUIC_RETURN_IF_ERROR(c.ReduceScatter(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum));
    for (size_t i = 0; i < count; ++i)
      EXPECT_OR_FAIL(out[i] == Expected<T>(ReduceOp::kSum, n, rank * count + i, salt), "reduce_scatter");
  }
  // V-collectives with uneven counts (rank r has count + r elements, some 0).
  {
    std::vector<size_t> counts(n);
    size_t total = 0;
    for (int r = 0; r < n; ++r) total += counts[r] = (r % 3 == 1) ? 0 : count + r;
    std::vector<size_t> off(n, 0);
    for (int r = 1; r < n; ++r) off[r] = off[r - 1] + counts[r - 1];
    std::vector<T> mine(counts[rank]), all(total);
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = Input(rank, i, salt);
    CIUIC_RETURN_IF_ERROR(c.AllGatherV(mine.data(), all.data(), counts.data(), DataType::kFloat32));
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < counts[r]; ++i) EXPECT_OR_FAIL(all[off[r] + i] == Input(r, i, salt), "allgatherv");
    std::vector<T> in(total), out(counts[rank]);
    for (size_t i = 0; i < total; ++i) in[i] = Input(rank, i, salt);
    CIUIC_RETURN_IF_ERROR(c.ReduceScatterV(in.data(), out.data(), counts.data(), DataType::kFloat32, ReduceOp::kMax));
    for (size_t i = 0; i < counts[rank]; ++i)
      EXPECT_OR_FAIL(out[i] == Expected<T>(ReduceOp::kMax, n, off[rank] + i, salt), "reduce_scatterv");
  }
  // All-to-all: block p of rank r holds r*1000 + p*10 + i%10.
  {
    std::vector<T> in(count * n), out(count * n, -1);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i) in[p * count + i] = static_cast<T>(rank * 1000 + p * 10 + i % 10);
    CIUIC_RETURN_IF_ERROR(c.AllToAll(in.data(), out.data(), count, DataType::kFloat32));
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i)
        EXPECT_OR_FAIL(out[p * count + i] == static_cast<T>(p * 1000 + rank * 10 + i % 10), "alltoall");
  }
  CIUIC_RETURN_IF_ERROR(c.Barrier());
  // Send/recv around a ring (even ranks send first so nobody waits on a cycle).
  if (n > 1) {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    std::vector<T> out(count), in(count, -1);
    Fill(&out, rank, salt);
    CIUIC_ASSIGN_OR_RETURN(Request rs, c.ISend(out.data(), count, DataType::kFloat32, next));
    CIUIC_ASSIGN_OR_RETURN(Request rr, c.IRecv(in.data(), count, DataType::kFloat32, prev));
    CIUIC_RETURN_IF_ERROR(rs.Wait());
    CIUIC_RETURN_IF_ERROR(rr.Wait());
    for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(in[i] == Input(prev, i, salt), "send/recv");
    // Tags: tag 9 sent first, tag 2 received first; each tag matches its own.
    {
      std::vector<T> in9(count, -1), in2(count, -1);
      CIUIC_ASSIGN_OR_RETURN(Request s9, c.ISend(out.data(), count, DataType::kFloat32, next, 9));
      CIUIC_ASSIGN_OR_RETURN(Request s2, c.ISend(out.data(), count / 2, DataType::kFloat32, next, 2));
      CIUIC_ASSIGN_OR_RETURN(Request r2, c.IRecv(in2.data(), count / 2, DataType::kFloat32, prev, 2));
      CIUIC_ASSIGN_OR_RETURN(Request r9, c.IRecv(in9.data(), count, DataType::kFloat32, prev, 9));
      for (Request* q : {&s9, &s2, &r2, &r9}) CIUIC_RETURN_IF_ERROR(q->Wait());
      for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(in9[i] == Input(prev, i, salt), "send/recv tag 9");
      for (size_t i = 0; i < count / 2; ++i) EXPECT_OR_FAIL(in2[i] == Input(prev, i, salt), "send/recv tag 2");
    }
  }
  // Gather, scatter and all-to-all-v: the blocking forms on even salts, the
  // I-forms (waited for at once) on odd ones.
  auto either = [&](auto&& blocking, auto&& async) -> Status {
    if (salt % 2 == 0) return blocking();
    CIUIC_ASSIGN_OR_RETURN(Request r, async());
    return r.Wait();
  };
  // Gather to the last rank (in place there), scatter from rank 0.
  {
    const int root = n - 1;
    std::vector<T> all(count * n, -1), mine(count);
    Fill(&mine, rank, salt);
    if (rank == root) {
      std::copy(mine.begin(), mine.end(), all.begin() + static_cast<long>(count) * root);
      CIUIC_RETURN_IF_ERROR(either([&] { return c.Gather(all.data() + count * root, all.data(), count, DataType::kFloat32, root); },
                                   [&] { return c.IGather(all.data() + count * root, all.data(), count, DataType::kFloat32, root); }));
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(all[r * count + i] == Input(r, i, salt), "gather");
    } else {
      CIUIC_RETURN_IF_ERROR(either([&] { return c.Gather(mine.data(), nullptr, count, DataType::kFloat32, root); },
                                   [&] { return c.IGather(mine.data(), nullptr, count, DataType::kFloat32, root); }));
    }
    std::vector<T> src(count * n), got(count, -1);
    for (size_t i = 0; i < src.size(); ++i) src[i] = Input(rank, i, salt);
    CIUIC_RETURN_IF_ERROR(either([&] { return c.Scatter(src.data(), got.data(), count, DataType::kFloat32, 0); },
                                 [&] { return c.IScatter(src.data(), got.data(), count, DataType::kFloat32, 0); }));
    for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(got[i] == Input(0, rank * count + i, salt), "scatter");
  }
  // All-to-all-v: rank r sends (r + p) % 3 * count / 2 elements to p, from
  // the end of its input backwards; blocks land packed in rank order.
  {
    auto amount = [&](int from, int to) { return static_cast<size_t>((from + to) % 3) * count / 2; };
    std::vector<size_t> sc(n), sd(n), rc(n);
    size_t at = count * 2 * n;
    for (int p = 0; p < n; ++p) {
      sc[p] = amount(rank, p);
      at -= sc[p];
      sd[p] = at;
      rc[p] = amount(p, rank);
    }
    std::vector<T> src(count * 2 * n), got(count * 2 * n, -1);
    for (size_t i = 0; i < src.size(); ++i) src[i] = Input(rank, i, salt);
    CIUIC_RETURN_IF_ERROR(either(
        [&] { return c.AllToAllV(src.data(), sc.data(), sd.data(), got.data(), rc.data(), nullptr, DataType::kFloat32); },
        [&] { return c.IAllToAllV(src.data(), sc.data(), sd.data(), got.data(), rc.data(), nullptr, DataType::kFloat32); }));
    size_t off = 0;
    for (int p = 0; p < n; ++p) {
      size_t theirs = count * 2 * n;  // where p's block for this rank starts in p's input
      for (int q = 0; q <= rank; ++q) theirs -= amount(p, q);
      for (size_t i = 0; i < rc[p]; ++i) EXPECT_OR_FAIL(got[off + i] == Input(p, theirs + i, salt), "alltoallv");
      off += rc[p];
    }
  }
  return Status::Ok();
}

// f16 / bf16 (stored as uint16_t bits): small integers are exact in both,
// so sums over up to 16 ranks are exact whatever the order.
Status CheckHalfAllReduce(Communicator& c, size_t count, DataType dtype, int salt) {
  const int rank = c.rank(), n = c.size();
  const bool bf = dtype == DataType::kBFloat16;
  // Whole-array conversions (the C conversions read the environment per call).
  std::vector<float> f(count), want(count, 0.0f), got(count);
  for (size_t i = 0; i < count; ++i) f[i] = static_cast<float>(Input(rank, i, salt));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) want[i] += static_cast<float>(Input(r, i, salt));
  std::vector<uint16_t> in(count), out(count);
  if (count > 0) {
    if (bf ? ciuic_convert_f32_to_bf16(f.data(), in.data(), count) : ciuic_convert_f32_to_f16(f.data(), in.data(), count)) {
      return InternalError("conversion failed");
    }
  }
  CIUIC_RETURN_IF_ERROR(c.AllReduce(in.data(), out.data(), count, dtype, ReduceOp::kSum));
  if (count > 0) {
    if (bf ? ciuic_convert_bf16_to_f32(out.data(), got.data(), count) : ciuic_convert_f16_to_f32(out.data(), got.data(), count)) {
      return InternalError("conversion failed");
    }
  }
  for (size_t i = 0; i < count; ++i) {
    EXPECT_OR_FAIL(got[i] == want[i], std::string(bf ? "bf16" : "f16") + " allreduce element " + std::to_string(i));
  }
  return Status::Ok();
}

class CollectivesTest : public ::testing::TestWithParam<Param> {};

TEST_P(CollectivesTest, AllCollectivesAllCounts) {
  const Param p = GetParam();
  auto results = RunRanks(p.nranks, [&](int rank, transport::Store& store) -> Status {
    // The tree is the all-reduce's; broadcast and reduce then run their
    // binomial tree, so both of their algorithms run at every count.
    const std::string knob = p.algo == "tree" ? "tree,broadcast:binomial,reduce:binomial" : p.algo;
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, p.nranks, store, p.transport, knob));
    const std::vector<size_t> counts = {0, 1, 7, 1000, (1u << 16) + 3};
    int salt = 0;
    for (size_t count : counts) {
      for (bool in_place : {false, true}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
          if (count > 1000 && op != ReduceOp::kSum && op != ReduceOp::kMax) continue;
          ++salt;
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, op, in_place, salt));
        }
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<double>(*comm, count, ReduceOp::kSum, in_place, ++salt));
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<int32_t>(*comm, count, ReduceOp::kProd, in_place, ++salt));
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<int64_t>(*comm, count, ReduceOp::kSum, in_place, ++salt));
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<uint8_t>(*comm, count, ReduceOp::kMax, in_place, ++salt));
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<int8_t>(*comm, count, ReduceOp::kMin, in_place, ++salt));
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<uint32_t>(*comm, count, ReduceOp::kSum, in_place, ++salt));
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<uint64_t>(*comm, count, ReduceOp::kProd, in_place, ++salt));
      }
      CIUIC_RETURN_IF_ERROR(CheckHalfAllReduce(*comm, count, DataType::kFloat16, ++salt));
      CIUIC_RETURN_IF_ERROR(CheckHalfAllReduce(*comm, count, DataType::kBFloat16, ++salt));
      // The other collectives: chosen by selection (auto), or forced where
      // the knob names theirs (ring: broadcast, reduce, all-gather,
      // reduce-scatter; the tree's knob: binomial broadcast and reduce;
      // knomial: broadcast and reduce; bruck: all-gather, all-to-all;
      // pat: all-gather, reduce-scatter).
      if (p.algo == "auto" || p.algo == "ring" || p.algo == "tree" || p.algo == "knomial" || p.algo == "bruck" ||
          p.algo == "pat") {
        CIUIC_RETURN_IF_ERROR(CheckOthers(*comm, count, ++salt));
      }
    }
    return Status::Ok();
  }, milliseconds(240000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

std::vector<Param> Params() {
  std::vector<Param> out;
  // Rank counts 1..9 and 16 under auto; every algorithm at 2..8 (powers of
  // two and not: recursive doubling and Rabenseifner fold 5, 6 and 7 ranks
  // onto 4). The generators run the same matrix and more in the simulator
  // (collectives_test); these run the schedules on real links.
  for (const char* t : {"shm", "tcp"}) {
    for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16}) out.push_back({t, "auto", n});
    for (const std::string& a : AllReduceSchedules()) {
      for (int n : {2, 3, 4, 5, 6, 7, 8}) out.push_back({t, a, n});
    }
  }
  for (int n : {2, 3, 4, 5, 7, 9, 16}) out.push_back({"shm", "direct", n});
  // The research algorithms at 9 and 16 ranks too (2-8 above), and Bruck's
  // all-gather and all-to-all (forced by "bruck"; CheckOthers runs them)
  // from 2 to 16, and PAT's all-gather and reduce-scatter. knomial forces
  // its broadcast and reduce as well.
  for (int n : {9, 16}) {
    for (const char* a : {"knomial", "swing", "swinglat"}) out.push_back({"tcp", a, n});
  }
  // Swing's even non-powers of two without a fold: one message per run at
  // 12, packed runs at 18.
  for (int n : {12, 18}) out.push_back({"tcp", "swing", n});
  for (int n : {2, 3, 4, 5, 6, 7, 8, 9, 16}) {
    for (const char* a : {"bruck", "pat"}) out.push_back({"tcp", a, n});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Matrix, CollectivesTest, ::testing::ValuesIn(Params()), ParamName);

// Verbs: the same checks over real RC queue pairs. Runs in the Soft-RoCE
// guest (label verbs; CIUIC_TEST_REQUIRE_VERBS=1 there); skips elsewhere
// with the reason.
TEST(CollectivesVerbs, TwoAndThreeRanks) {
  transport::BackendOptions probe;
  if (auto config = Config::FromEnv(); config.ok()) probe.config = *config;
  CIUIC_SKIP_UNLESS_BACKEND(transport::BackendKind::kVerbs, probe);
  for (int n : {2, 3}) {
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, n, store, "verbs", "auto", 120000));
      int salt = 0;
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000}, size_t{(1u << 16) + 3}}) {
        for (bool in_place : {false, true}) {
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, ReduceOp::kSum, in_place, ++salt));
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<int64_t>(*comm, count, ReduceOp::kMax, in_place, ++salt));
        }
        // At 3 ranks the ring on new tags has each rank handshake with both
        // neighbours at once (it timed out while a verbs handshake blocked).
        CIUIC_RETURN_IF_ERROR(CheckOthers(*comm, count, ++salt));
      }
      return Status::Ok();
    }, milliseconds(280000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks\n" << ResultsText(results);
  }
}

// Zero-copy sends go from the caller's buffers (tcp: registered per call;
// verbs: through the registration cache, which pins them). A buffer
// unmapped and mapped again at the same address between two calls has new
// pages: every call must send the new contents, not what an earlier
// registration pinned.
void RemappedBufferIsSentFresh(const char* kind) {
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 2, store, kind, "ring", 120000));
    constexpr size_t kCount = 256 << 10;  // 1 MiB of floats
    constexpr size_t kBytes = kCount * sizeof(float);
    void* in = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (in == MAP_FAILED) return InternalError("mmap");
    std::vector<float> out(kCount);
    for (int round = 0; round < 3; ++round) {
      auto* f = static_cast<float*>(in);
      for (size_t i = 0; i < kCount; ++i) f[i] = static_cast<float>((i % 1000) + 10 * round + rank);
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(in, out.data(), kCount, DataType::kFloat32, ReduceOp::kSum));
      for (size_t i = 0; i < kCount; ++i) {
        const float want = static_cast<float>(2 * (i % 1000) + 20 * round + 1);
        if (out[i] != want) {
          return DataLossError(std::string(kind) + " round " + std::to_string(round) + ": element " +
                               std::to_string(i) + " is " + std::to_string(out[i]) + ", want " +
                               std::to_string(want) + " (stale pages sent?)");
        }
      }
      // New memory at the same address for the next round.
      if (munmap(in, kBytes) != 0) return InternalError("munmap");
      void* again = mmap(in, kBytes, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (again != in) return InternalError("could not map new memory at the same address");
    }
    munmap(in, kBytes);
    return Status::Ok();
  }, milliseconds(200000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << kind << "\n" << ResultsText(results);
}

TEST(CollectivesZeroCopy, RemappedBufferIsSentFreshOverTcp) { RemappedBufferIsSentFresh("tcp"); }

// The per-process answer to "can this rank open a device" (what it
// publishes under auto) is kept per value of the knobs the probe reads: a
// GID index the port lacks is not answered from the default's cache.
TEST(CollectivesVerbs, UsabilityIsProbedPerKnobValue) {
  Config config;
  if (auto c = Config::FromEnv(); c.ok()) config = *c;
  transport::BackendOptions probe;
  probe.config = config;
  CIUIC_SKIP_UNLESS_BACKEND(transport::BackendKind::kVerbs, probe);
  config.ib_gid_index = -1;
  EXPECT_TRUE(collectives::VerbsUsableHere(config, 2));
  config.ib_gid_index = 255;  // past or empty in any port's table here
  EXPECT_FALSE(collectives::VerbsUsableHere(config, 2));
  config.ib_gid_index = -1;
  EXPECT_TRUE(collectives::VerbsUsableHere(config, 2));
  config.ib_hca = "no-such-device";
  EXPECT_FALSE(collectives::VerbsUsableHere(config, 2));
}

TEST(CollectivesVerbs, RemappedBufferIsSentFresh) {
  transport::BackendOptions probe;
  if (auto config = Config::FromEnv(); config.ok()) probe.config = *config;
  CIUIC_SKIP_UNLESS_BACKEND(transport::BackendKind::kVerbs, probe);
  RemappedBufferIsSentFresh("verbs");
}

// The direct shm all-reduce runs a two-shot size in one of three modes:
// through the slots with cached or streaming stores, or single-copy (rank
// 0 measures which is fastest; the first two rounds of a size class cycle
// through them, and every 32nd call runs another). Every mode must give the
// same, correct bytes: 70 calls of one size with non-integer floats, each
// compared bitwise with the first call's result, on 2 and 3 ranks, with
// single-copy among the modes and without it.
TEST(CollectivesDirect, StoreModesGiveIdenticalBytes) {
  for (int n : {2, 3}) for (const char* cma : {"off", "auto"}) {
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      setenv("CIUIC_SHM_CMA", cma, 1);  // a forked rank
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, n, store, "shm", "direct"));
      const size_t count = (1u << 18) + 5;  // 1 MiB of floats and a bit: two-shot, many chunks
      std::vector<float> in(count), first(count), out(count);
      for (size_t i = 0; i < count; ++i) in[i] = std::sin(0.01f * i + rank) * 100.0f / (rank + 1);
      for (int call = 0; call < 70; ++call) {
        std::fill(out.begin(), out.end(), -1.0f);  // no stale result passes for a new one
        CIUIC_RETURN_IF_ERROR(comm->AllReduce(in.data(), call == 0 ? first.data() : out.data(), count,
                                              DataType::kFloat32, ReduceOp::kSum));
        if (call == 0) {
          for (size_t i = 0; i < count; i += 4099) {
            float want = 0;
            for (int r = 0; r < n; ++r) want += std::sin(0.01f * i + r) * 100.0f / (r + 1);
            if (std::fabs(first[i] - want) > 1e-3f * (1 + std::fabs(want))) {
              return DataLossError("element " + std::to_string(i) + " is " + std::to_string(first[i]) +
                                   ", want about " + std::to_string(want));
            }
          }
        } else if (std::memcmp(first.data(), out.data(), count * sizeof(float)) != 0) {
          return DataLossError("call " + std::to_string(call) + " gave other bytes than the first");
        }
      }
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks, CIUIC_SHM_CMA=" << cma << "\n" << ResultsText(results);
  }
}

// With the default 512 KiB slots, a block of a few hundred KiB is cut into
// chunks smaller than a slot (at least 4 of >= 64 KiB: ExecJob::chunk_bytes)
// so receiving, reducing and sending overlap. Every algorithm and the other
// collectives, 2-4 ranks over tcp, against the reference.
// The direct shm broadcast: every root, sizes inline in the slot header
// (<= 32 B), one chunk and many (two 64 KiB slots, so the root wraps around
// them and waits for the slowest reader), every dtype width, interleaved
// with direct all-reduces (the two share the chunk sequence), on 2-9 ranks.
TEST(CollectivesDirect, BroadcastEveryRootAndSize) {
  for (int n : {2, 3, 4, 9}) {
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, n, store, "shm", "direct"));
      int salt = 0;
      for (size_t count : {size_t{1}, size_t{8}, size_t{9}, size_t{1000}, size_t{100000}}) {
        for (int root = 0; root < n; ++root) {
          ++salt;
          std::vector<float> f(count);
          Fill(&f, rank, salt);
          CIUIC_RETURN_IF_ERROR(comm->Broadcast(f.data(), count, DataType::kFloat32, root));
          for (size_t i = 0; i < count; ++i) {
            EXPECT_OR_FAIL(f[i] == Input(root, i, salt), "f32 broadcast of " + std::to_string(count) + " from " +
                                                          std::to_string(root) + ", element " + std::to_string(i));
          }
          std::vector<uint8_t> b(count * 3 + 1, static_cast<uint8_t>(rank));
          CIUIC_RETURN_IF_ERROR(comm->Broadcast(b.data(), b.size(), DataType::kUint8, root));
          for (size_t i = 0; i < b.size(); ++i) EXPECT_OR_FAIL(b[i] == root, "u8 broadcast element " + std::to_string(i));
          std::vector<double> d(count, rank + 0.5);
          CIUIC_RETURN_IF_ERROR(comm->Broadcast(d.data(), count, DataType::kFloat64, root));
          for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(d[i] == root + 0.5, "f64 broadcast element " + std::to_string(i));
        }
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, ReduceOp::kSum, false, ++salt));
      }
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks\n" << ResultsText(results);
  }
}

// Ranks that disagree on the root or the count of a direct broadcast get
// an error naming the peer and what it runs, not wrong data or a hang; a
// root killed before its broadcast is named by the survivors.
TEST(CollectivesDirect, BroadcastMismatchesAndADeadRootAreErrors) {
  auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 3, store, "shm", "auto", 2000));
    std::vector<float> x(1000, 1.0f);
    // Rank 2 names root 1, the others root 0: ranks 0 and 1 agree and
    // finish; rank 2 waits for a root that never publishes and says so at
    // the timeout, naming it.
    Status s = comm->Broadcast(x.data(), x.size(), DataType::kFloat32, rank == 2 ? 1 : 0);
    if (rank == 2 && (s.ok() || s.message().find("rank 1") == std::string::npos)) {
      return InternalError("a broadcast from a root that never sent: " + s.ToString());
    }
    // Ranks 0 and 1 stay until rank 2 has its answer (leaving would make
    // it name the rank that left instead).
    CIUIC_RETURN_IF_ERROR(store.Add("answered", rank == 2 ? 1 : 0).status());
    for (int w = 0; w < 2000; ++w) {
      auto v = store.Add("answered", 0);
      if (v.ok() && *v >= 1) break;
      std::this_thread::sleep_for(milliseconds(5));
    }
    if (!s.ok() && s.message().find("rank") == std::string::npos) return InternalError("no rank named: " + s.ToString());
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);

  results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 2, store, "shm", "auto", 5000));
    std::vector<float> x(rank == 0 ? 100 : 99, 1.0f);
    Status s = comm->Broadcast(x.data(), x.size(), DataType::kFloat32, 0);
    if (rank == 1) {
      if (s.ok()) return InternalError("a broadcast of another count was accepted");
      if (s.message().find("rank 0") == std::string::npos || s.message().find("broadcast from rank 0") == std::string::npos) {
        return InternalError("the error does not name rank 0's broadcast: " + s.ToString());
      }
    }
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);

  results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 3, store, "shm", "auto", 20000));
    std::vector<float> x(1000, 1.0f);
    CIUIC_RETURN_IF_ERROR(comm->Broadcast(x.data(), x.size(), DataType::kFloat32, 0));
    // The root returns once its data is out: everyone is past it here.
    CIUIC_RETURN_IF_ERROR(comm->Barrier());
    if (rank == 0) kill(getpid(), SIGKILL);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = comm->Broadcast(x.data(), x.size(), DataType::kFloat32, 0);
    if (s.ok()) return InternalError("no error although the root was killed");
    if (s.message().find("rank 0") == std::string::npos) return InternalError("error does not name rank 0: " + s.ToString());
    if (std::chrono::steady_clock::now() - t0 > milliseconds(15000)) return InternalError("noticed only at the timeout");
    return Status::Ok();
  }, milliseconds(60000));
  EXPECT_EQ(results[0].signal, SIGKILL) << ResultsText(results);
  EXPECT_TRUE(results[1].ok()) << ResultsText(results);
  EXPECT_TRUE(results[2].ok()) << ResultsText(results);
}

// The small collectives' one exchange on shm (reduce, all-gather,
// reduce-scatter, all-to-all, barrier): taken for inputs up to the one-shot
// size (last_algorithm says so), every op including AVG, roots and in-place
// forms, many calls in a row so the four slots wrap, on 2-9 ranks (9 share
// 2 cores here); larger inputs go to the schedules.
// More ranks than the reduction kernel takes at once (16): the one-shot
// all-reduce folds the rest in, in place too (a rank's output then being
// its own input, past the first 16 for ranks 16 and up).
TEST(CollectivesDirect, InPlaceAllReduceOnMoreRanksThanTheKernelTakes) {
  const int n = 18;
  auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, n, store, "shm", "direct"));
    int salt = 0;
    for (size_t count : {size_t{3}, size_t{700}}) {  // inline in the header line, and a slot
      for (bool in_place : {true, false}) {
        ++salt;
        std::vector<float> in(count), out(count, -1);
        Fill(&in, rank, salt);
        float* dst = in_place ? in.data() : out.data();
        CIUIC_RETURN_IF_ERROR(comm->AllReduce(in.data(), dst, count, DataType::kFloat32, ReduceOp::kSum));
        for (size_t i = 0; i < count; ++i) {
          EXPECT_OR_FAIL(dst[i] == Expected<float>(ReduceOp::kSum, n, i, salt),
                         std::string(in_place ? "in place" : "out of place") + ", count " + std::to_string(count) +
                             ", element " + std::to_string(i));
        }
      }
    }
    return Status::Ok();
  }, milliseconds(120000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

TEST(CollectivesDirect, SmallCollectivesInOneExchange) {
  for (int n : {2, 3, 4, 9}) {
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, n, store, "shm", "auto"));
      auto direct = [&](const char* what) -> Status {
        const std::string got = comm->last_algorithm();
        if (got.rfind("direct for ", 0) != 0) return InternalError(std::string(what) + " did not run direct: " + got);
        return Status::Ok();
      };
      int salt = 0;
      for (int round = 0; round < 6; ++round) {
        for (size_t count : {size_t{1}, size_t{5}, size_t{300}}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg}) {
            ++salt;
            const int root = (round + static_cast<int>(count)) % n;
            std::vector<float> in(count), out(count, -1);
            Fill(&in, rank, salt);
            CIUIC_RETURN_IF_ERROR(comm->Reduce(in.data(), out.data(), count, DataType::kFloat32, op, root));
            CIUIC_RETURN_IF_ERROR(direct("reduce"));
            for (size_t i = 0; i < count && rank == root; ++i) {
              EXPECT_OR_FAIL(out[i] == Expected<float>(op, n, i, salt), "reduce " + std::string(ReduceOpName(op)) +
                                                                            " to " + std::to_string(root) + " element " + std::to_string(i));
            }
            // In place at the root.
            Fill(&in, rank, salt);
            CIUIC_RETURN_IF_ERROR(comm->Reduce(in.data(), in.data(), count, DataType::kFloat32, op, root));
            for (size_t i = 0; i < count && rank == root; ++i) EXPECT_OR_FAIL(in[i] == Expected<float>(op, n, i, salt), "reduce in place");
            std::vector<float> rs_in(count * n), rs_out(count, -1);
            for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<float>(Input(rank, i, salt));
            CIUIC_RETURN_IF_ERROR(comm->ReduceScatter(rs_in.data(), rs_out.data(), count, DataType::kFloat32, op));
            CIUIC_RETURN_IF_ERROR(direct("reduce_scatter"));
            for (size_t i = 0; i < count; ++i) {
              EXPECT_OR_FAIL(rs_out[i] == Expected<float>(op, n, rank * count + i, salt), "reduce_scatter " + std::string(ReduceOpName(op)));
            }
          }
          std::vector<int32_t> ag(count * n, -1);
          for (size_t i = 0; i < count; ++i) ag[rank * count + i] = rank * 100000 + static_cast<int32_t>(i) + salt;
          CIUIC_RETURN_IF_ERROR(comm->AllGather(ag.data() + rank * count, ag.data(), count, DataType::kInt32));
          CIUIC_RETURN_IF_ERROR(direct("allgather"));
          for (int r = 0; r < n; ++r)
            for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(ag[r * count + i] == r * 100000 + static_cast<int32_t>(i) + salt, "allgather in place");
          std::vector<int32_t> a_in(count * n), a_out(count * n, -1);
          for (int p = 0; p < n; ++p)
            for (size_t i = 0; i < count; ++i) a_in[p * count + i] = rank * 10000 + p * 100 + static_cast<int32_t>(i % 100);
          CIUIC_RETURN_IF_ERROR(comm->AllToAll(a_in.data(), a_out.data(), count, DataType::kInt32));
          CIUIC_RETURN_IF_ERROR(direct("alltoall"));
          for (int p = 0; p < n; ++p)
            for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(a_out[p * count + i] == p * 10000 + rank * 100 + static_cast<int32_t>(i % 100), "alltoall");
          CIUIC_RETURN_IF_ERROR(comm->Barrier());
          CIUIC_RETURN_IF_ERROR(direct("barrier"));
        }
      }
      // Above the one-shot size (16 KiB of input per rank): the schedules.
      std::vector<float> big(8192, 1.0f), sum(8192);
      CIUIC_RETURN_IF_ERROR(comm->Reduce(big.data(), sum.data(), big.size(), DataType::kFloat32, ReduceOp::kSum, 0));
      if (comm->last_algorithm().rfind("direct", 0) == 0) return InternalError("32 KiB reduce ran direct: " + comm->last_algorithm());
      for (size_t i = 0; i < sum.size() && rank == 0; ++i) EXPECT_OR_FAIL(sum[i] == static_cast<float>(n), "large reduce");
      // The reduce's senders return before the root has read them: nobody
      // leaves before everyone is done.
      return comm->Barrier();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks\n" << ResultsText(results);
  }
}

// With the default slots (512 KiB), mid-size inputs also run in one
// exchange, on the large ring: reduce and reduce-scatter up to 256 KiB per
// rank, all-gather and all-to-all up to 64 KiB; one element more goes to
// the schedules. Every result is checked, with small calls (the small
// ring) between them.
TEST(CollectivesDirect, MidSizeExchangesOnTheLargeRing) {
  for (int n : {2, 4}) {
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, n, store, "shm", "auto", 60000));
      auto ran = [&](const std::string& what, bool direct) -> Status {
        const bool was = comm->last_algorithm().rfind("direct for ", 0) == 0;
        if (was != direct) return InternalError(what + (direct ? " did not run" : " ran") + " direct: " + comm->last_algorithm());
        return Status::Ok();
      };
      int salt = 0;
      for (int extra : {0, 1}) {
        const bool direct = extra == 0;
        ++salt;
        // reduce: 256 KiB (+ one element) per rank.
        const size_t rc = (256u << 10) / sizeof(float) + extra;
        std::vector<float> in(rc), out(rc, -1);
        Fill(&in, rank, salt);
        const int root = (salt + 1) % n;
        CIUIC_RETURN_IF_ERROR(comm->Reduce(in.data(), out.data(), rc, DataType::kFloat32, ReduceOp::kSum, root));
        CIUIC_RETURN_IF_ERROR(ran("reduce of " + std::to_string(rc) + " floats", direct));
        for (size_t i = 0; i < rc && rank == root; ++i) EXPECT_OR_FAIL(out[i] == Expected<float>(ReduceOp::kSum, n, i, salt), "reduce");
        // A small call on the other ring between them.
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, 7, ReduceOp::kMax, false, salt));
        // reduce-scatter: n * count elements in = 256 KiB (+ n elements).
        const size_t rsc = (256u << 10) / sizeof(float) / n + extra;
        std::vector<float> rs_in(rsc * n), rs_out(rsc, -1);
        for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<float>(Input(rank, i, salt));
        CIUIC_RETURN_IF_ERROR(comm->ReduceScatter(rs_in.data(), rs_out.data(), rsc, DataType::kFloat32, ReduceOp::kSum));
        CIUIC_RETURN_IF_ERROR(ran("reduce_scatter of " + std::to_string(rsc) + " floats", direct));
        for (size_t i = 0; i < rsc; ++i) {
          EXPECT_OR_FAIL(rs_out[i] == Expected<float>(ReduceOp::kSum, n, rank * rsc + i, salt), "reduce_scatter");
        }
        // all-gather: 64 KiB (+ one element) per rank, in place.
        const size_t agc = (64u << 10) / sizeof(int32_t) + extra;
        std::vector<int32_t> ag(agc * n, -1);
        for (size_t i = 0; i < agc; ++i) ag[rank * agc + i] = rank * 1000000 + static_cast<int32_t>(i) + salt;
        CIUIC_RETURN_IF_ERROR(comm->AllGather(ag.data() + rank * agc, ag.data(), agc, DataType::kInt32));
        CIUIC_RETURN_IF_ERROR(ran("allgather of " + std::to_string(agc) + " ints", direct));
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < agc; ++i) EXPECT_OR_FAIL(ag[r * agc + i] == r * 1000000 + static_cast<int32_t>(i) + salt, "allgather");
        CIUIC_RETURN_IF_ERROR(comm->Barrier());
        // all-to-all: n * count elements in = 64 KiB (+ n elements).
        const size_t ac = (64u << 10) / sizeof(int32_t) / n + extra;
        std::vector<int32_t> a_in(ac * n), a_out(ac * n, -1);
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < ac; ++i) a_in[p * ac + i] = rank * 10000000 + p * 100000 + static_cast<int32_t>(i);
        CIUIC_RETURN_IF_ERROR(comm->AllToAll(a_in.data(), a_out.data(), ac, DataType::kInt32));
        CIUIC_RETURN_IF_ERROR(ran("alltoall of " + std::to_string(ac) + " ints per peer", direct));
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < ac; ++i) EXPECT_OR_FAIL(a_out[p * ac + i] == p * 10000000 + rank * 100000 + static_cast<int32_t>(i), "alltoall");
      }
      return comm->Barrier();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks\n" << ResultsText(results);
  }
}

// Ranks in different small collectives: the one that reads finds the
// other's header and names the rank and what it runs.
TEST(CollectivesDirect, SmallCollectivesMismatchNamesThePeer) {
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 2, store, "shm", "auto", 5000));
    std::vector<float> in(4, 1.0f), out(8);
    Status s = rank == 0 ? comm->AllGather(in.data(), out.data(), 4, DataType::kFloat32)
                         : comm->ReduceScatter(out.data(), in.data(), 4, DataType::kFloat32, ReduceOp::kSum);
    if (s.ok()) return InternalError("mismatched collectives were accepted");
    const std::string peer = "rank " + std::to_string(1 - rank);
    const std::string theirs = rank == 0 ? "reduce_scatter" : "allgather";
    if (s.message().find(peer) == std::string::npos || s.message().find(theirs) == std::string::npos) {
      return InternalError("the error does not name " + peer + "'s " + theirs + ": " + s.ToString());
    }
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// A blocking all-reduce repeated with the same arguments (a training loop's
// small call) takes CommImpl::FastAllReduce from its second call on: the
// same bytes as the general path for every type, op, size class and in
// place, with fresh inputs every round.
template <typename T>
Status RepeatAllReduce(Communicator& c, std::vector<T>* in, std::vector<T>* out, size_t count, ReduceOp op,
                       bool in_place, int salt) {
  const int rank = c.rank(), n = c.size();
  Fill(in, rank, salt);
  T* dst = in_place ? in->data() : out->data();
  CIUIC_RETURN_IF_ERROR(c.AllReduce(in->data(), dst, count, TypeOf<T>(), op));
  for (size_t i = 0; i < count; ++i) {
    const T want = Expected<T>(op, n, i, salt);
    EXPECT_OR_FAIL(dst[i] == want, "count " + std::to_string(count) + " op " + ReduceOpName(op) +
                                       (in_place ? " in place" : "") + " salt " + std::to_string(salt) +
                                       ": element " + std::to_string(i) + " is " +
                                       std::to_string(static_cast<double>(dst[i])) + ", want " +
                                       std::to_string(static_cast<double>(want)));
    if (!in_place) EXPECT_OR_FAIL((*in)[i] == From<T>(Input(rank, i, salt)), "input modified");
  }
  return Status::Ok();
}

template <typename T>
Status RepeatEveryOp(Communicator& c, int* combos) {
  std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax};
  if (std::is_floating_point_v<T>) ops.push_back(ReduceOp::kAvg);
  for (size_t count : {size_t{1}, size_t{8}, size_t{9}, size_t{100}, size_t{1000}}) {
    // The same buffers for every op and both placements: only the op or
    // the output tells these calls apart.
    std::vector<T> in(count), out(count);
    for (bool in_place : {false, true}) {
      for (ReduceOp op : ops) {
        for (int round = 0; round < 3; ++round) {
          CIUIC_RETURN_IF_ERROR(RepeatAllReduce<T>(c, &in, &out, count, op, in_place, round * 5 + 1));
        }
        ++*combos;
      }
    }
  }
  return Status::Ok();
}

TEST(CollectivesDirect, RepeatedSmallAllReducesTakeTheCachedEntryWithExactResults) {
  for (int n : {2, 4}) {
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, n, store, "shm", "auto", 30000));
      int combos = 0;
      CIUIC_RETURN_IF_ERROR(RepeatEveryOp<float>(*comm, &combos));
      CIUIC_RETURN_IF_ERROR(RepeatEveryOp<double>(*comm, &combos));
      CIUIC_RETURN_IF_ERROR(RepeatEveryOp<int32_t>(*comm, &combos));
      CIUIC_RETURN_IF_ERROR(RepeatEveryOp<int64_t>(*comm, &combos));
      CIUIC_RETURN_IF_ERROR(RepeatEveryOp<uint8_t>(*comm, &combos));
      // Every combination's second and third call (at most 8000 bytes: one
      // small slot), not its first.
      const uint64_t fast = collectives::CommImpl::Of(*comm).fast_calls();
      EXPECT_OR_FAIL(fast == static_cast<uint64_t>(2 * combos),
                     std::to_string(fast) + " calls took the cached entry, want " + std::to_string(2 * combos));
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks\n" << ResultsText(results);
  }
}

// Small-ring payloads of up to 288 B lie beside their stamp (the slot
// header's lines), larger ones in the slot. Every byte count around those
// edges (32/33, 256, 288/289, and 1-300 for u8), all-reduce out of place
// and in place (cached entry included: each size three times), and the
// exchange collectives and broadcast at the same sizes; then 150 calls
// alternating 256 and 8 B, so both kinds wrap the 64 slots over each other.
TEST(CollectivesDirect, PayloadsBesideTheStampAndInTheSlotAreExactAtEveryEdge) {
  for (int n : {2, 3}) {
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, n, store, "shm", "auto", 30000));
      int salt = 0;
      for (size_t count = 1; count <= 300; ++count) {
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<uint8_t>(*comm, count, ReduceOp::kMax, count % 2 == 0, ++salt));
      }
      const uint64_t fast_before = collectives::CommImpl::Of(*comm).fast_calls();
      for (size_t bytes : {28, 32, 36, 64, 252, 256, 260, 284, 288, 292, 296}) {
        // The same buffers three times: the second and third calls take the
        // cached entry (ShmDirect::AllReduceSmall), the first the general one.
        std::vector<float> fin(bytes / 4), fout(bytes / 4);
        std::vector<double> din(bytes / 8), dout(bytes / 8);
        for (bool in_place : {false, true}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin}) {
            for (int round = 0; round < 3; ++round) {
              CIUIC_RETURN_IF_ERROR(RepeatAllReduce<float>(*comm, &fin, &fout, bytes / 4, op, in_place, ++salt));
            }
            for (int round = 0; round < 3 && bytes % 8 == 0; ++round) {
              CIUIC_RETURN_IF_ERROR(RepeatAllReduce<double>(*comm, &din, &dout, bytes / 8, op, in_place, ++salt));
            }
          }
        }
        CIUIC_RETURN_IF_ERROR(CheckOthers(*comm, bytes / 4, ++salt));
      }
      EXPECT_OR_FAIL(collectives::CommImpl::Of(*comm).fast_calls() > fast_before, "no call took the cached entry");
      for (int call = 0; call < 150; ++call) {
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, call % 2 == 0 ? 64 : 2, ReduceOp::kSum, call % 3 == 0, ++salt));
      }
      return comm->Barrier();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks\n" << ResultsText(results);
  }
}

// Once armed, the entry keeps what the general path guarantees: queued
// async calls stay ordered, other calls in between, bad arguments named
// (and the communicator still usable), premul_sum ops with their own
// factors, last_algorithm().
TEST(CollectivesDirect, TheCachedAllReduceEntryKeepsOrderChecksAndPremulFactors) {
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, 2, store, "shm", "auto", 30000));
    auto& impl = collectives::CommImpl::Of(*comm);
    std::vector<float> a(8), b(8), c(8);
    CIUIC_RETURN_IF_ERROR(RepeatAllReduce<float>(*comm, &a, &b, 8, ReduceOp::kSum, false, 1));
    const std::string slow_algo = comm->last_algorithm();
    CIUIC_RETURN_IF_ERROR(RepeatAllReduce<float>(*comm, &a, &b, 8, ReduceOp::kSum, false, 2));
    EXPECT_OR_FAIL(impl.fast_calls() == 1, "the second call did not take the cached entry");
    EXPECT_OR_FAIL(comm->last_algorithm() == slow_algo, "last_algorithm: " + comm->last_algorithm() + " vs " + slow_algo);
    // An async call queued ahead of the blocking one finishes first, with
    // its own result.
    Fill(&c, rank, 7);
    CIUIC_ASSIGN_OR_RETURN(Request req, comm->IAllReduce(c.data(), c.data(), 8, DataType::kFloat32, ReduceOp::kMax));
    CIUIC_RETURN_IF_ERROR(RepeatAllReduce<float>(*comm, &a, &b, 8, ReduceOp::kSum, false, 3));
    CIUIC_RETURN_IF_ERROR(req.Wait());
    for (size_t i = 0; i < 8; ++i) EXPECT_OR_FAIL(c[i] == Expected<float>(ReduceOp::kMax, 2, i, 7), "the async max");
    // Another collective in between.
    std::vector<int32_t> bc(5, rank == 1 ? 42 : 0);
    CIUIC_RETURN_IF_ERROR(comm->Broadcast(bc.data(), bc.size(), DataType::kInt32, 1));
    for (int32_t v : bc) EXPECT_OR_FAIL(v == 42, "broadcast");
    CIUIC_RETURN_IF_ERROR(RepeatAllReduce<float>(*comm, &a, &b, 8, ReduceOp::kSum, false, 4));
    // Bad arguments next to the armed call are still named, and leave the
    // communicator usable.
    Status bad = comm->AllReduce(a.data(), b.data(), 8, DataType::kFloat32, ReduceOp::kBand);
    EXPECT_OR_FAIL(bad.code() == StatusCode::kInvalidArgument, "band on float32: " + bad.ToString());
    bad = comm->AllReduce(nullptr, b.data(), 8, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_OR_FAIL(bad.code() == StatusCode::kInvalidArgument && bad.message().find("sendbuf") != std::string::npos,
                   "null sendbuf: " + bad.ToString());
    const uint64_t before = impl.fast_calls();
    CIUIC_RETURN_IF_ERROR(RepeatAllReduce<float>(*comm, &a, &b, 8, ReduceOp::kSum, false, 5));
    EXPECT_OR_FAIL(impl.fast_calls() == before + 1, "the armed call after the bad ones did not take the entry");
    // premul_sum: every op id with its own factor, also on the same buffers
    // call after call (never the cached entry: an id can be destroyed and
    // made again with another factor).
    for (double factor : {2.0, 3.0, 0.5}) {
      CIUIC_ASSIGN_OR_RETURN(ReduceOp op, comm->CreatePremulSum(factor));
      for (int round = 0; round < 2; ++round) {
        Fill(&a, rank, round);
        CIUIC_RETURN_IF_ERROR(comm->AllReduce(a.data(), b.data(), 8, DataType::kFloat32, op));
        for (size_t i = 0; i < 8; ++i) {
          const float want = static_cast<float>(factor * Input(0, i, round)) + static_cast<float>(factor * Input(1, i, round));
          EXPECT_OR_FAIL(b[i] == want, "premul_sum " + std::to_string(factor) + ": element " + std::to_string(i) +
                                           " is " + std::to_string(b[i]) + ", want " + std::to_string(want));
        }
      }
      CIUIC_RETURN_IF_ERROR(comm->DestroyReduceOp(op));
    }
    // More distinct calls than the plan cache keeps (it starts over, and
    // the entry with it), then the armed call again.
    for (size_t count = 1; count <= 70; ++count) {
      CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, ReduceOp::kSum, false, 9));
    }
    for (int round = 0; round < 3; ++round) {
      CIUIC_RETURN_IF_ERROR(RepeatAllReduce<float>(*comm, &a, &b, 8, ReduceOp::kSum, false, 10 + round));
    }
    return comm->Barrier();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// A peer that dies while the survivor repeats its cached call: the
// survivor's call fails within the timeout naming the peer, the next one
// says the communicator failed earlier; an aborted communicator's call is
// kAborted. With CIUIC_DEBUG=INFO every call still logs its time (the
// entry steps aside).
TEST(CollectivesDirect, TheCachedAllReduceEntryNamesADeadPeerAndStepsAsideForInfoLogs) {
  const std::string dir = ::testing::TempDir() + "/fast_entry_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
    config.transport = "shm";
    config.timeout_ms = 3000;
    config.debug = LogLevel::kInfo;
    config.debug_file = dir + "/rank" + std::to_string(rank) + ".log";
    CIUIC_RETURN_IF_ERROR(ConfigureLogging(config, rank));  // the process's log, as CIUIC_DEBUG sets it
    std::shared_ptr<transport::Store> st(&store, [](transport::Store*) {});
    CIUIC_ASSIGN_OR_RETURN(auto comm, Communicator::CreateWithStore(rank, 2, st, config));
    std::vector<float> a(4), b(4);
    for (int round = 0; round < 4; ++round) {
      CIUIC_RETURN_IF_ERROR(RepeatAllReduce<float>(*comm, &a, &b, 4, ReduceOp::kSum, false, round));
    }
    auto& impl = collectives::CommImpl::Of(*comm);
    EXPECT_OR_FAIL(impl.fast_calls() == 0, "the cached entry ran at INFO");
    std::ifstream log(config.debug_file);
    std::string line;
    int timed = 0;
    while (std::getline(log, line)) timed += line.find("allreduce 16 B:") != std::string::npos &&
                                             line.find("measured") != std::string::npos;
    EXPECT_OR_FAIL(timed == 4, std::to_string(timed) + " timing lines for 4 calls");
    CIUIC_RETURN_IF_ERROR(ConfigureLogging(Config(), rank));  // back to warnings
    for (int round = 0; round < 3; ++round) {
      CIUIC_RETURN_IF_ERROR(RepeatAllReduce<float>(*comm, &a, &b, 4, ReduceOp::kSum, false, round));
    }
    EXPECT_OR_FAIL(impl.fast_calls() >= 2, "no cached calls after INFO was turned off");
    if (rank == 1) _exit(0);  // dies between calls, without a word
    const auto t0 = std::chrono::steady_clock::now();
    Status s = comm->AllReduce(a.data(), b.data(), 4, DataType::kFloat32, ReduceOp::kSum);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_OR_FAIL(!s.ok() && s.message().find("rank 1") != std::string::npos, "the dead peer: " + s.ToString());
    EXPECT_OR_FAIL(took < 10.0, "took " + std::to_string(took) + " s with a 3 s timeout");
    Status again = comm->AllReduce(a.data(), b.data(), 4, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_OR_FAIL(again.message().find("failed earlier") != std::string::npos, "the next call: " + again.ToString());
    comm->Abort();
    Status aborted = comm->AllReduce(a.data(), b.data(), 4, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_OR_FAIL(aborted.code() == StatusCode::kAborted, "after Abort: " + aborted.ToString());
    return Status::Ok();
  }, milliseconds(60000));
  EXPECT_TRUE(results[0].ok()) << ResultsText(results);
  std::filesystem::remove_all(dir);
}

// Small calls run on the small ring (64 slots with the default buffer), so
// a broadcast root finishes 48 small broadcasts before any other rank has
// started its first: with the large ring's 8 slots it would wait for them
// at the 9th and the others, waiting for its "done", would time out. The
// others then receive all 48 intact, between large broadcasts on the other
// ring, and a large and a small all-reduce still agree.
TEST(CollectivesDirect, SmallCallsRunFarAheadOnTheSmallRing) {
  constexpr int kCalls = 48;
  auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, 3, store, "shm", "auto", 10000));
    std::vector<float> big(300000);  // 1.2 MiB: the large ring
    for (size_t i = 0; i < big.size(); ++i) big[i] = rank == 1 ? static_cast<float>(i % 1000) : -1.0f;
    CIUIC_RETURN_IF_ERROR(comm->Broadcast(big.data(), big.size(), DataType::kFloat32, 1));
    for (size_t i = 0; i < big.size(); ++i) {
      if (big[i] != static_cast<float>(i % 1000)) return InternalError("large broadcast: wrong element " + std::to_string(i));
    }
    std::vector<std::vector<int32_t>> msgs(kCalls);
    for (int k = 0; k < kCalls; ++k) {
      msgs[k].assign(1 + k * 7, -1);
      if (rank == 0) {
        for (size_t i = 0; i < msgs[k].size(); ++i) msgs[k][i] = static_cast<int32_t>(k * 1000 + i);
      }
    }
    if (rank == 0) {
      for (int k = 0; k < kCalls; ++k) {
        CIUIC_RETURN_IF_ERROR(comm->Broadcast(msgs[k].data(), msgs[k].size(), DataType::kInt32, 0));
      }
      CIUIC_RETURN_IF_ERROR(store.Set("root_done", "1"));
    } else {
      // Not one call before the root finished all of them.
      CIUIC_RETURN_IF_ERROR(store.Get("root_done", milliseconds(8000)).status());
      for (int k = 0; k < kCalls; ++k) {
        CIUIC_RETURN_IF_ERROR(comm->Broadcast(msgs[k].data(), msgs[k].size(), DataType::kInt32, 0));
        if (comm->last_algorithm().rfind("direct for broadcast", 0) != 0) {
          return InternalError("a small broadcast did not run direct: " + comm->last_algorithm());
        }
        for (size_t i = 0; i < msgs[k].size(); ++i) {
          if (msgs[k][i] != static_cast<int32_t>(k * 1000 + i)) {
            return InternalError("broadcast " + std::to_string(k) + ": wrong element " + std::to_string(i));
          }
        }
      }
    }
    CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, 300000, ReduceOp::kSum, false, 3));
    return CheckAllReduce<float>(*comm, 1000, ReduceOp::kSum, true, 4);
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// A seeded random sequence of collectives whose sizes straddle every limit
// of the direct region (the 16 KiB small slots, the 64 and 256 KiB
// exchanges, the 512 KiB large slots), so operations alternate between the
// two rings and the schedules in every order; every result is checked.
TEST(CollectivesDirect, MixedSizesInterleaveBothRings) {
  for (int n : {3, 5}) {
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, n, store, "shm", "auto", 60000));
      std::mt19937 rng(20261130 + n);  // the same sequence on every rank
      const size_t counts[] = {1, 7, 8, 9, 1000, 4095, 4096, 4097, 16383, 16384, 16385,
                               65535, 65536, 65537, 131072, 131073, 200003};
      const ReduceOp ops[] = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kProd};
      for (int step = 0; step < 40; ++step) {
        const size_t count = counts[rng() % (sizeof(counts) / sizeof(counts[0]))];
        const ReduceOp op = ops[rng() % 4];
        const bool in_place = rng() % 2 == 0;
        const int what = static_cast<int>(rng() % 3);
        Status s = what == 0   ? CheckAllReduce<float>(*comm, count, op, in_place, step)
                   : what == 1 ? CheckAllReduce<int32_t>(*comm, count, op, in_place, step)
                               : CheckOthers(*comm, count, step);
        if (!s.ok()) {
          return Status(s.code(), "step " + std::to_string(step) + " (count " + std::to_string(count) + "): " + s.message());
        }
      }
      return comm->Barrier();
    }, milliseconds(180000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks\n" << ResultsText(results);
  }
}

// Slot counts that are not powers of two (CIUIC_BUFFER_SIZE of 3 chunks: a
// large ring of 3 slots, a small ring of 12) take the modulo where the
// usual counts take a mask: both rings wrap many times, every result exact.
TEST(CollectivesDirect, RingsOfSlotCountsThatAreNotPowersOfTwoWrapExactly) {
  const int n = 3;
  auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
    config.transport = "shm";
    config.timeout_ms = 60000;
    config.chunk_size = 64 << 10;
    config.buffer_size = 3 * (64 << 10);
    std::shared_ptr<transport::Store> st(&store, [](transport::Store*) {});
    CIUIC_ASSIGN_OR_RETURN(auto comm, Communicator::CreateWithStore(rank, n, st, config));
    std::mt19937 rng(20261206);  // the same sequence on every rank
    const size_t counts[] = {1, 9, 64, 72, 1000, 4097, 16385, 65537, 200003};
    for (int step = 0; step < 60; ++step) {
      const size_t count = counts[rng() % (sizeof(counts) / sizeof(counts[0]))];
      const bool in_place = rng() % 2 == 0;
      Status s = rng() % 3 == 0 ? CheckOthers(*comm, count, step)
                                : CheckAllReduce<float>(*comm, count, ReduceOp::kSum, in_place, step);
      if (!s.ok()) {
        return Status(s.code(), "step " + std::to_string(step) + " (count " + std::to_string(count) + "): " + s.message());
      }
    }
    return comm->Barrier();
  }, milliseconds(180000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// Ranks whose calls differ in size so much that they take different rings
// (a small all-reduce on one, a large one on the other) never see each
// other's slots: each names the other at once from what it announced, not
// at the timeout.
TEST(CollectivesDirect, CallsOnDifferentRingsNameThePeerAtOnce) {
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, 2, store, "shm", "direct", 20000));
    CIUIC_RETURN_IF_ERROR(comm->Barrier());
    std::vector<float> x(rank == 0 ? 100 : 1 << 20, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = comm->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
    const auto took = std::chrono::steady_clock::now() - t0;
    if (s.ok()) return InternalError("an all-reduce of another count was accepted");
    const std::string peer = "rank " + std::to_string(1 - rank);
    const std::string theirs = "count " + std::to_string(rank == 0 ? 1 << 20 : 100);
    if (s.message().find(peer) == std::string::npos || s.message().find(theirs) == std::string::npos) {
      return InternalError("the error does not name " + peer + "'s " + theirs + ": " + s.ToString());
    }
    if (took > milliseconds(10000)) return InternalError("named only at the timeout: " + s.ToString());
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// A root may return from its broadcast once its data is out (it reads
// nothing), destroy its communicator and exit before the others have even
// called theirs: they still get every byte. The direct region is made on
// first use; before, a peer that mapped the root's region only after the
// root had exited lost the data ("peer rank 0 died"). Now creation returns
// once every rank has mapped every region. Small ring, one large slot and
// several large slots, with the default sizes.
TEST(CollectivesDirect, ARootThatLeavesRightAfterItsBroadcastsStillDelivers) {
  const std::vector<size_t> counts = {1000, 100000, 600000};  // 4 KB, 400 KB, 2.4 MB
  auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, 3, store, "shm", "auto", 20000));
    if (rank != 0) std::this_thread::sleep_for(milliseconds(300));  // the root is long gone by now
    int salt = 40;
    for (size_t count : counts) {
      std::vector<float> x(count);
      Fill(&x, rank, ++salt);
      CIUIC_RETURN_IF_ERROR(comm->Broadcast(x.data(), count, DataType::kFloat32, 0));
      const std::string got = comm->last_algorithm();
      if (got.rfind("direct", 0) != 0) return InternalError("the broadcast did not run direct: " + got);
      for (size_t i = 0; i < count; ++i) {
        EXPECT_OR_FAIL(x[i] == Input(0, i, salt), "broadcast of " + std::to_string(count) + ", element " +
                                                     std::to_string(i));
      }
    }
    if (rank == 0) {
      comm.reset();
      _exit(0);  // at once: no test teardown that could wait for the others
    }
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// One call of `c` (its result is checked by CheckOthers), so that
// last_algorithm() says what ran for it.
Status CallOnce(Communicator& comm, collectives::Collective c, size_t count) {
  using collectives::Collective;
  const int n = comm.size();
  std::vector<float> in(count * n, 1.0f), out(count * n, 0.0f);
  std::vector<size_t> counts(n, count);
  switch (c) {
    case Collective::kBroadcast: return comm.Broadcast(in.data(), count, DataType::kFloat32, 0);
    case Collective::kReduce: return comm.Reduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum, 0);
    case Collective::kAllGather: return comm.AllGather(in.data(), out.data(), count, DataType::kFloat32);
    case Collective::kAllGatherv: return comm.AllGatherV(in.data(), out.data(), counts.data(), DataType::kFloat32);
    case Collective::kReduceScatter:
      return comm.ReduceScatter(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
    case Collective::kReduceScatterv:
      return comm.ReduceScatterV(in.data(), out.data(), counts.data(), DataType::kFloat32, ReduceOp::kSum);
    case Collective::kAllToAll: return comm.AllToAll(in.data(), out.data(), count, DataType::kFloat32);
    case Collective::kBarrier: return comm.Barrier();
    case Collective::kGather: return comm.Gather(in.data(), out.data(), count, DataType::kFloat32, 0);
    case Collective::kScatter: return comm.Scatter(in.data(), out.data(), count, DataType::kFloat32, 0);
    case Collective::kAllToAllv:
      return comm.AllToAllV(in.data(), counts.data(), nullptr, out.data(), counts.data(), nullptr, DataType::kFloat32);
    default: return comm.AllReduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum);
  }
}

// Every schedule the registry has for a collective other than all-reduce
// (the matrix above runs those) runs over real links when forced by
// COLLECTIVE:NAME, with exact results: an algorithm added to the registry
// is run here with no change to this test.
TEST(CollectivesRegistry, EveryScheduleRunsOverLinksWhenForced) {
  using collectives::Collective;
  for (const collectives::AlgorithmInfo& e : collectives::Registry()) {
    if (e.kind != collectives::AlgorithmKind::kSchedule || e.collective == Collective::kAllReduce ||
        e.collective == Collective::kSend || e.collective == Collective::kRecv) {
      continue;
    }
    const std::string knob = std::string(collectives::CollectiveName(e.collective)) + ":" + e.name();
    for (const auto& tn : {std::pair<const char*, int>{"tcp", 3}, {"shm", 5}}) {
      const char* t = tn.first;  // (a lambda cannot capture a structured binding before C++20)
      const int n = tn.second;
      auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
        CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, n, store, t, knob));
        int salt = 0;
        for (size_t count : {size_t{1}, size_t{7}, size_t{1000}}) {
          CIUIC_RETURN_IF_ERROR(CheckOthers(*comm, count, ++salt));
          CIUIC_RETURN_IF_ERROR(CallOnce(*comm, e.collective, count));
          EXPECT_OR_FAIL(comm->last_algorithm().rfind(std::string(e.name()) + " (forced by CIUIC_ALGO", 0) == 0,
                         knob + ": ran " + comm->last_algorithm());
        }
        return Status::Ok();
      }, milliseconds(60000));
      for (const auto& r : results) EXPECT_TRUE(r.ok()) << knob << " on " << t << ":\n" << ResultsText(results);
    }
  }
}

// Ranks split into hosts by CIUIC_HOST_ID (`host_of[rank]`): shm inside a
// "host", tcp between (no verbs device here), every collective exact under
// auto and every all-reduce schedule forced, send/recv across and inside.
StatusOr<std::unique_ptr<Communicator>> MakeHostComm(int rank, transport::Store& store,
                                                     const std::vector<int>& host_of, const std::string& algo,
                                                     const std::string& transport = "auto", int nchannels = 1) {
  CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
  config.transport = transport;
  config.nchannels = nchannels;
  config.algo = algo;
  config.timeout_ms = 60000;
  config.chunk_size = 16 << 10;
  config.buffer_size = 64 << 10;
  config.host_id = "h" + std::to_string(host_of[static_cast<size_t>(rank)]);
  std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
  return Communicator::CreateWithStore(rank, static_cast<int>(host_of.size()), s, config);
}

TEST(CollectivesHosts, ShmInsideHostsTcpBetweenEveryCollectiveExact) {
  for (const std::vector<int>& host_of : std::vector<std::vector<int>>{{0, 0, 1, 1}, {0, 0, 1}, {0, 1, 1, 0, 1}}) {
    const int n = static_cast<int>(host_of.size());
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeHostComm(rank, store, host_of, "auto"));
      // The kinds this rank's pairs use: shm when a peer shares its host.
      const int mates = static_cast<int>(std::count(host_of.begin(), host_of.end(), host_of[static_cast<size_t>(rank)]));
      EXPECT_OR_FAIL(comm->transport_name() == (mates > 1 ? "shm+tcp" : "tcp"), "transport " + comm->transport_name());
      // The job's kinds, alike on every rank (rank 2 of {0, 0, 1} too).
      EXPECT_OR_FAIL(comm->job_transport_name() == "shm+tcp", "job transport " + comm->job_transport_name());
      int salt = 0;
      for (size_t count : {size_t{1}, size_t{7}, size_t{1000}, size_t{(1u << 16) + 3}}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, op, false, ++salt));
        }
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<int64_t>(*comm, count, ReduceOp::kSum, true, ++salt));
        CIUIC_RETURN_IF_ERROR(CheckHalfAllReduce(*comm, count, DataType::kBFloat16, ++salt));
        // The direct family needs every rank on one host: never chosen.
        EXPECT_OR_FAIL(comm->last_algorithm().find("direct") == std::string::npos,
                       "ran " + comm->last_algorithm());
        CIUIC_RETURN_IF_ERROR(CheckOthers(*comm, count, ++salt));
      }
      // Send/recv around the ring: pairs inside and between hosts.
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      std::vector<float> out(100003, static_cast<float>(rank)), in(out.size(), -1);
      CIUIC_ASSIGN_OR_RETURN(Request rs, comm->ISend(out.data(), out.size(), DataType::kFloat32, next));
      CIUIC_ASSIGN_OR_RETURN(Request rr, comm->IRecv(in.data(), in.size(), DataType::kFloat32, prev));
      CIUIC_RETURN_IF_ERROR(rs.Wait());
      CIUIC_RETURN_IF_ERROR(rr.Wait());
      for (float v : in) EXPECT_OR_FAIL(v == static_cast<float>(prev), "received from rank " + std::to_string(prev));
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks:\n" << ResultsText(results);
  }
}

TEST(CollectivesHosts, EveryAllReduceScheduleAcrossHosts) {
  const std::vector<int> host_of = {0, 0, 1, 1, 1};
  for (const std::string& algo : AllReduceSchedules()) {
    auto results = RunRanks(5, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeHostComm(rank, store, host_of, algo));
      int salt = 0;
      for (size_t count : {size_t{1}, size_t{1000}, size_t{(1u << 16) + 3}}) {
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, ReduceOp::kSum, false, ++salt));
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<int32_t>(*comm, count, ReduceOp::kProd, true, ++salt));
        EXPECT_OR_FAIL(comm->last_algorithm().rfind(algo + " (forced by CIUIC_ALGO", 0) == 0,
                       algo + ": ran " + comm->last_algorithm());
      }
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << algo << ":\n" << ResultsText(results);
  }
}

// The hierarchical all-reduce on uneven hosts (3+1, 2+2+3), with a rank of
// a small host owning several slices; every element exact, in place too.
// From 2^19 elements it runs as pipelined pieces (3 and 4 here), the host's
// all-gather on a second shm channel.
TEST(CollectivesHosts, HierarchicalOnUnevenHosts) {
  for (const std::vector<int>& host_of :
       std::vector<std::vector<int>>{{0, 0, 1, 1}, {0, 0, 0, 1}, {0, 0, 1, 1, 2, 2, 2}}) {
    const int n = static_cast<int>(host_of.size());
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeHostComm(rank, store, host_of, "hier"));
      int salt = 0;
      for (size_t count : {size_t{0}, size_t{1}, size_t{5}, size_t{1000}, size_t{(1u << 16) + 3},
                           size_t{3u << 18} + 1, size_t{(1u << 20) + 3}}) {
        for (bool in_place : {false, true}) {
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, ReduceOp::kSum, in_place, ++salt));
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<int32_t>(*comm, count, ReduceOp::kMax, in_place, ++salt));
        }
        CIUIC_RETURN_IF_ERROR(CheckHalfAllReduce(*comm, count, DataType::kBFloat16, ++salt));
      }
      EXPECT_OR_FAIL(comm->last_algorithm().rfind("hier (forced by CIUIC_ALGO", 0) == 0, "ran " + comm->last_algorithm());
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks:\n" << ResultsText(results);
  }
}

// The other hierarchical collectives (broadcast, reduce, all-gather(v),
// reduce-scatter(v), barrier) on uneven and interleaved hosts, exact, in
// place too; each call reports that hier ran.
TEST(CollectivesHosts, EveryHierarchicalCollectiveOnUnevenHosts) {
  for (const std::vector<int>& host_of :
       std::vector<std::vector<int>>{{0, 0, 0, 1}, {0, 1, 0, 1, 1}, {0, 0, 1, 1, 2, 2, 2}}) {
    const int n = static_cast<int>(host_of.size());
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeHostComm(rank, store, host_of, "hier"));
      auto ran_hier = [&](const char* what) {
        return comm->last_algorithm().rfind("hier (forced by CIUIC_ALGO", 0) == 0
                   ? Status::Ok()
                   : InternalError(std::string(what) + " ran " + comm->last_algorithm());
      };
      int salt = 0;
      for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{(1u << 16) + 3}}) {
        CIUIC_RETURN_IF_ERROR(CheckOthers(*comm, count, ++salt));
        if (count == 0) continue;
        std::vector<float> v(count * static_cast<size_t>(n), 1.0f), w(count * static_cast<size_t>(n));
        CIUIC_RETURN_IF_ERROR(comm->Broadcast(v.data(), count, DataType::kFloat32, n - 1));
        CIUIC_RETURN_IF_ERROR(ran_hier("broadcast"));
        CIUIC_RETURN_IF_ERROR(comm->Reduce(v.data(), w.data(), count, DataType::kFloat32, ReduceOp::kSum, 1));
        CIUIC_RETURN_IF_ERROR(ran_hier("reduce"));
        CIUIC_RETURN_IF_ERROR(comm->AllGather(v.data(), w.data(), count, DataType::kFloat32));
        CIUIC_RETURN_IF_ERROR(ran_hier("allgather"));
        CIUIC_RETURN_IF_ERROR(comm->ReduceScatter(v.data(), w.data(), count, DataType::kFloat32, ReduceOp::kSum));
        CIUIC_RETURN_IF_ERROR(ran_hier("reduce_scatter"));
        CIUIC_RETURN_IF_ERROR(comm->Barrier());
        CIUIC_RETURN_IF_ERROR(ran_hier("barrier"));
      }
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks:\n" << ResultsText(results);
  }
}

// CIUIC_NCHANNELS=3 over real shm and tcp links: every hierarchical
// collective splits its vector over 3 channels (the pipelined all-reduce's
// all-gathers over up to 3 more), exact.
TEST(CollectivesHosts, HierarchicalOnThreeChannels) {
  for (const std::vector<int>& host_of : std::vector<std::vector<int>>{{0, 0, 1, 1}, {0, 1, 0, 1, 1}}) {
    const int n = static_cast<int>(host_of.size());
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeHostComm(rank, store, host_of, "hier", "auto", 3));
      int salt = 0;
      // 3 x 2^19 - 1 on 3 channels: one part of 2^19 - 1 elements runs
      // whole, the two of 2^19 as 2 pieces each (all-gathers on 4 and 5).
      for (size_t count : {size_t{2}, size_t{1000}, size_t{3u << 19} - 1}) {
        for (bool in_place : {false, true}) {
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, ReduceOp::kSum, in_place, ++salt));
        }
        EXPECT_OR_FAIL(comm->last_algorithm().rfind("hier (forced by CIUIC_ALGO", 0) == 0, "ran " + comm->last_algorithm());
        if (count > 1000) continue;  // the others' large sizes: the simulator's matrix
        CIUIC_RETURN_IF_ERROR(CheckOthers(*comm, count, ++salt));
      }
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks:\n" << ResultsText(results);
  }
}

// CIUIC_KNOMIAL_RADIX and CIUIC_PAT_AGGREGATION over real tcp links: the
// k-nomial and PAT schedules they shape are exact (PlanCall's test shows
// they reach the generators).
TEST(CollectivesRegistry, RadixAndAggregationKnobsOverLinks) {
  for (const auto& [radix, aggregation] : std::vector<std::pair<const char*, const char*>>{{"3", "2"}, {"8", "1"}}) {
    auto results = RunRanks(6, [&, radix = radix, aggregation = aggregation](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
      config.transport = "tcp";
      config.timeout_ms = 60000;
      CIUIC_RETURN_IF_ERROR(config.Set("CIUIC_ALGO", "allgather:pat,reducescatter:pat,knomial"));
      CIUIC_RETURN_IF_ERROR(config.Set("CIUIC_KNOMIAL_RADIX", radix));
      CIUIC_RETURN_IF_ERROR(config.Set("CIUIC_PAT_AGGREGATION", aggregation));
      std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
      CIUIC_ASSIGN_OR_RETURN(auto comm, Communicator::CreateWithStore(rank, 6, s, config));
      int salt = 0;
      for (size_t count : {size_t{1}, size_t{1000}, size_t{65539}}) {
        CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, ReduceOp::kSum, false, ++salt));
        EXPECT_OR_FAIL(comm->last_algorithm().rfind("knomial", 0) == 0, "ran " + comm->last_algorithm());
        CIUIC_RETURN_IF_ERROR(CheckOthers(*comm, count, ++salt));
      }
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << radix << "/" << aggregation << ":\n" << ResultsText(results);
  }
}

// A schedule whose scratch would pass CIUIC_SCRATCH_MAX (and twice the
// call's buffer) is an argument error on every rank before anything moves,
// naming the algorithm and the knob; the communicator goes on with calls
// that fit.
// swinglat gathers all 4 vectors: 4 x 64 KiB against max(64 KiB, 128 KiB).
TEST(CollectivesRegistry, ScratchOverTheLimitIsANamedErrorOnEveryRank) {
  // n ranks over tcp with `algo` forced under a 64 KiB scratch limit.
  auto make = [](int rank, int n, transport::Store& store,
                 const char* algo) -> StatusOr<std::unique_ptr<Communicator>> {
    CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
    config.transport = "tcp";
    config.timeout_ms = 60000;
    CIUIC_RETURN_IF_ERROR(config.Set("CIUIC_ALGO", algo));
    CIUIC_RETURN_IF_ERROR(config.Set("CIUIC_SCRATCH_MAX", "64K"));
    std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
    return Communicator::CreateWithStore(rank, n, s, config);
  };
  auto results = RunRanks(4, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, make(rank, 4, store, "allreduce:swinglat"));
    std::vector<float> in(16384, 1.0f), out(16384, 0.0f);
    const Status big = comm->AllReduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum);
    EXPECT_OR_FAIL(big.code() == StatusCode::kInvalidArgument, "big call: " + big.ToString());
    EXPECT_OR_FAIL(big.message().find("allreduce/swinglat needs 262144 B of scratch") != std::string::npos &&
                       big.message().find("CIUIC_SCRATCH_MAX") != std::string::npos,
                   "big call: " + big.ToString());
    CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, 1000, ReduceOp::kSum, false, 7));
    EXPECT_OR_FAIL(comm->last_algorithm().rfind("swinglat", 0) == 0, "ran " + comm->last_algorithm());
    return Status::Ok();
  }, milliseconds(120000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
  // Only gathering schedules are bounded: k-nomial's radix-4 scratch (4 x
  // the vector here, on ranks 0-3 but none on the extras of 6 ranks) runs
  // under the same limit, exact.
  results = RunRanks(6, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, make(rank, 6, store, "allreduce:knomial"));
    CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, 16384, ReduceOp::kSum, false, 8));
    EXPECT_OR_FAIL(comm->last_algorithm().rfind("knomial", 0) == 0, "ran " + comm->last_algorithm());
    return Status::Ok();
  }, milliseconds(120000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// Verbs between hosts for real (the Soft-RoCE guest; skipped elsewhere with
// the reason): hosts named by CIUIC_HOST_ID, shm inside each, verbs queue
// pairs between, the hierarchical forms and the automatic choice exact.
// (Network namespaces inside the guest cannot carry Soft-RoCE between them:
// see README "Multi-host", the rxe note.)
TEST(CollectivesVerbs, ShmInsideHostsVerbsBetween) {
  transport::BackendOptions probe;
  if (auto config = Config::FromEnv(); config.ok()) probe.config = *config;
  CIUIC_SKIP_UNLESS_BACKEND(transport::BackendKind::kVerbs, probe);
  for (const std::vector<int>& host_of : std::vector<std::vector<int>>{{0, 0, 1, 1}, {0, 1, 1, 1}}) {
    const int n = static_cast<int>(host_of.size());
    for (const char* algo : {"hier", "auto"}) {
      auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
        CIUIC_ASSIGN_OR_RETURN(auto comm, MakeHostComm(rank, store, host_of, algo));
        const int mates =
            static_cast<int>(std::count(host_of.begin(), host_of.end(), host_of[static_cast<size_t>(rank)]));
        EXPECT_OR_FAIL(comm->transport_name() == (mates > 1 ? "shm+verbs" : "verbs"), "transport " + comm->transport_name());
        EXPECT_OR_FAIL(comm->job_transport_name() == "shm+verbs", "job transport " + comm->job_transport_name());
        int salt = 0;
        for (size_t count : {size_t{1}, size_t{1000}, size_t{(1u << 16) + 3}, size_t{(1u << 20) + 3}}) {
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, ReduceOp::kSum, false, ++salt));
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<int32_t>(*comm, count, ReduceOp::kMax, true, ++salt));
          if (std::string(algo) == "hier") {
            EXPECT_OR_FAIL(comm->last_algorithm().rfind("hier (forced by CIUIC_ALGO", 0) == 0,
                           "ran " + comm->last_algorithm());
          }
          if (count < (1u << 20)) CIUIC_RETURN_IF_ERROR(CheckOthers(*comm, count, ++salt));  // pieces: all-reduce only
        }
        return Status::Ok();
      }, milliseconds(280000));
      for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks, " << algo << ":\n" << ResultsText(results);
    }
  }
}

TEST(CollectivesHosts, TheKnobForcesOneTransportAndShmOnlyAlgorithmsNeedOneHost) {
  const std::vector<int> host_of = {0, 0, 1};
  auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeHostComm(rank, store, host_of, "auto", "tcp"));
    EXPECT_OR_FAIL(comm->transport_name() == "tcp", "forced tcp: " + comm->transport_name());
    EXPECT_OR_FAIL(comm->job_transport_name() == "tcp", "forced tcp, job: " + comm->job_transport_name());
    CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, 1000, ReduceOp::kSum, false, 1));
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
  results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
    auto comm = MakeHostComm(rank, store, host_of, "direct");
    EXPECT_OR_FAIL(!comm.ok(), "the direct algorithm accepted on two hosts");
    EXPECT_OR_FAIL(comm.status().message().find("direct") != std::string::npos, comm.status().ToString());
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// The CPUs the progress thread ("ciuic-progress") of this process may run
// on, from /proc (empty: no such thread).
std::vector<int> ProgressThreadCpus() {
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name != "ciuic-progress") continue;
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("Cpus_allowed_list:", 0) != 0) continue;
      std::string list = line.substr(line.find(':') + 1);
      list.erase(0, list.find_first_not_of(" \t"));
      StatusOr<std::vector<int>> cpus = topology::ParseCpuList(list);
      return cpus.ok() ? *cpus : std::vector<int>{-1};
    }
  }
  return {};
}

Status BindThisProcess(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) return InternalError("sched_setaffinity failed");
  return Status::Ok();
}

// The topology plan is applied: under CIUIC_PROGRESS_CPU=auto the progress
// thread of a rank bound to CPU 0 runs on the free CPU 1; when every CPU has
// a rank it stays with its rank; an explicit CPU is that CPU.
TEST(CollectivesTopology, TheProgressThreadRunsWhereThePlanSays) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0 || !CPU_ISSET(0, &mine) || !CPU_ISSET(1, &mine)) {
    GTEST_SKIP() << "needs CPUs 0 and 1";
  }
  struct Case {
    int n;
    const char* progress_cpu;
  };
  for (const Case c : {Case{1, "auto"}, Case{2, "auto"}, Case{1, "0"}, Case{2, "none"}}) {
    auto results = RunRanks(c.n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_RETURN_IF_ERROR(BindThisProcess({rank}));
      CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
      config.transport = "shm";
      config.timeout_ms = 20000;
      CIUIC_RETURN_IF_ERROR(config.Set("CIUIC_PROGRESS_CPU", c.progress_cpu));
      std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
      CIUIC_ASSIGN_OR_RETURN(auto comm, Communicator::CreateWithStore(rank, c.n, s, config));
      const auto& plan = collectives::CommImpl::Of(*comm).topology_plan();
      EXPECT_OR_FAIL(plan.has_value(), "no topology plan");
      std::vector<int> want;
      if (std::string(c.progress_cpu) == "auto") want = c.n == 1 ? std::vector<int>{1} : std::vector<int>{rank};
      if (std::string(c.progress_cpu) == "0") want = {0};
      if (std::string(c.progress_cpu) == "none") want = {rank};  // inherited from the rank
      EXPECT_OR_FAIL(plan->progress_cpus == (std::string(c.progress_cpu) == "none" ? std::vector<int>{} : want),
                     "plan's progress CPUs " + topology::FormatCpuList(plan->progress_cpus));
      const std::vector<int> got = ProgressThreadCpus();
      EXPECT_OR_FAIL(got == want, std::string("CIUIC_PROGRESS_CPU=") + c.progress_cpu + " on " +
                                      std::to_string(c.n) + " ranks: progress thread on CPUs " +
                                      topology::FormatCpuList(got) + ", want " + topology::FormatCpuList(want));
      float x = 1, y = 0;
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(&x, &y, 1, DataType::kFloat32, ReduceOp::kSum));
      EXPECT_OR_FAIL(y == static_cast<float>(c.n), "wrong sum");
      return Status::Ok();
    }, milliseconds(30000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << c.n << " ranks, " << c.progress_cpu << ":\n" << ResultsText(results);
  }
}

// A CIUIC_TOPO_FILE that cannot be read fails the communicator, naming it.
TEST(CollectivesTopology, AnUnreadableTopologyFileIsAnErrorNamingTheKnob) {
  auto results = RunRanks(1, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
    config.topo_file = "/nonexistent/topo.xml";
    std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
    StatusOr<std::unique_ptr<Communicator>> comm = Communicator::CreateWithStore(rank, 1, s, config);
    EXPECT_OR_FAIL(!comm.ok(), "created with an unreadable topology file");
    EXPECT_OR_FAIL(comm.status().message().find("CIUIC_TOPO_FILE") != std::string::npos, comm.status().ToString());
    return Status::Ok();
  }, milliseconds(30000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// CIUIC_SECRET_FILE set in the Config given to CreateWithStore is read and
// proved by the data connections (it was ignored: only CreateFromEnv read
// it): one file works, two different files never connect, and a
// world-readable file is refused naming the knob.
TEST(CollectivesSecrets, SecretFileIsProvedOnTheDataPlane) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("ciuic-secret-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text, std::filesystem::perms perms) {
    const std::filesystem::path p = dir / name;
    std::ofstream(p) << text << "\n";
    std::filesystem::permissions(p, perms);
    return p.string();
  };
  using P = std::filesystem::perms;
  const std::string a = write("a", "secret-a", P::owner_read | P::owner_write);
  const std::string b = write("b", "secret-b", P::owner_read | P::owner_write);
  const std::string loose = write("loose", "secret-o", P::owner_read | P::owner_write | P::others_read);
  auto job = [&](const std::vector<std::string>& files, int64_t timeout_ms) {
    return RunRanks(2, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
      config.transport = "tcp";
      config.secret.clear();
      config.secret_file = files[static_cast<size_t>(rank)];
      config.timeout_ms = timeout_ms;
      std::shared_ptr<transport::Store> st(&store, [](transport::Store*) {});
      CIUIC_ASSIGN_OR_RETURN(auto comm, Communicator::CreateWithStore(rank, 2, st, config));
      float x = 1, y = 0;
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(&x, &y, 1, DataType::kFloat32, ReduceOp::kSum));
      EXPECT_OR_FAIL(y == 2.0f, "wrong sum");
      return Status::Ok();
    }, milliseconds(60000));
  };
  auto same = job({a, a}, 30000);
  for (const auto& r : same) EXPECT_TRUE(r.ok()) << ResultsText(same);
  auto differ = job({a, b}, 3000);
  for (const auto& r : differ) EXPECT_FALSE(r.ok()) << "ranks with different secret files connected";
  auto refused = job({loose, loose}, 3000);
  for (const auto& r : refused) {
    EXPECT_FALSE(r.ok());
    EXPECT_NE(r.message.find("CIUIC_SECRET_FILE"), std::string::npos) << ResultsText(refused);
    EXPECT_NE(r.message.find("world-readable"), std::string::npos) << ResultsText(refused);
  }
  std::filesystem::remove_all(dir);
}

TEST(CollectivesPipelining, ChunksSmallerThanSlotsGiveExactResults) {
  for (int n : {2, 3, 4}) {
    for (const std::string& algo : AllReduceSchedules()) {
      auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
        CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
        config.transport = "tcp";
        config.algo = algo;
        config.timeout_ms = 60000;  // default chunk and buffer sizes
        std::shared_ptr<transport::Store> st(&store, [](transport::Store*) {});
        CIUIC_ASSIGN_OR_RETURN(auto comm, Communicator::CreateWithStore(rank, n, st, config));
        for (size_t count : {size_t{(1u << 20) + 3}, size_t{300007}}) {
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, ReduceOp::kSum, false, 5));
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<int32_t>(*comm, count, ReduceOp::kMax, true, 6));
        }
        return CheckOthers(*comm, 300007, 7);
      }, milliseconds(120000));
      for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks, " << algo << "\n" << ResultsText(results);
    }
  }
}

// A ring of sends posted before their receives, as the first operations of
// a communicator: every rank's send needs a link its neighbour asks for
// only in its receive, posted after its own send (links are set up without
// waiting on the peer, Link::Builder). Before: each rank waited for its
// neighbour's endpoint until the timeout.
TEST(CollectivesPointToPoint, RingOfSendsBeforeReceivesOnANewCommunicator) {
  for (const char* transport : {"tcp", "shm"}) {
    for (int iter = 0; iter < 5; ++iter) {
      auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
        CIUIC_ASSIGN_OR_RETURN(auto c, MakeComm(rank, 3, store, transport, "auto", 20000));
        const int n = 3, next = (rank + 1) % n, prev = (rank + n - 1) % n;
        const size_t count = 100003;
        std::vector<float> out(count, static_cast<float>(rank)), in(count, -1);
        CIUIC_ASSIGN_OR_RETURN(Request rs, c->ISend(out.data(), count, DataType::kFloat32, next));
        CIUIC_ASSIGN_OR_RETURN(Request rr, c->IRecv(in.data(), count, DataType::kFloat32, prev));
        CIUIC_RETURN_IF_ERROR(rs.Wait());
        CIUIC_RETURN_IF_ERROR(rr.Wait());
        for (size_t i = 0; i < count; ++i) EXPECT_OR_FAIL(in[i] == static_cast<float>(prev), "element " + std::to_string(i));
        return Status::Ok();
      }, milliseconds(60000));
      for (const auto& r : results) EXPECT_TRUE(r.ok()) << transport << " iteration " << iter << "\n" << ResultsText(results);
    }
  }
}

// Sends on two tags around a ring, received in the other order: the first
// receive must return although this rank's send on the other tag still
// waits for a link its neighbour asks for only after that receive
// (operations of one batch complete one by one).
TEST(CollectivesPointToPoint, RingOnTwoTagsReceivedInTheOtherOrder) {
  for (const char* transport : {"tcp", "shm"}) {
    auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto c, MakeComm(rank, 3, store, transport, "auto", 20000));
      const int n = 3, next = (rank + 1) % n, prev = (rank + n - 1) % n;
      std::vector<float> a(7, static_cast<float>(rank)), b(9, static_cast<float>(rank + 50));
      std::vector<float> ra(7, -1), rb(9, -1);
      CIUIC_ASSIGN_OR_RETURN(Request sa, c->ISend(a.data(), a.size(), DataType::kFloat32, next, 3));
      CIUIC_ASSIGN_OR_RETURN(Request sb, c->ISend(b.data(), b.size(), DataType::kFloat32, next, 4));
      CIUIC_RETURN_IF_ERROR(c->Recv(rb.data(), rb.size(), DataType::kFloat32, prev, 4));
      CIUIC_RETURN_IF_ERROR(c->Recv(ra.data(), ra.size(), DataType::kFloat32, prev, 3));
      CIUIC_RETURN_IF_ERROR(sa.Wait());
      CIUIC_RETURN_IF_ERROR(sb.Wait());
      for (float v : ra) EXPECT_OR_FAIL(v == static_cast<float>(prev), "tag 3 got " + std::to_string(v));
      for (float v : rb) EXPECT_OR_FAIL(v == static_cast<float>(prev + 50), "tag 4 got " + std::to_string(v));
      return Status::Ok();
    }, milliseconds(60000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << transport << "\n" << ResultsText(results);
  }
}

// A peer that sent its last message and destroyed its communicator while
// this rank was still in an earlier receive: what arrived is delivered,
// not refused because the link has since closed.
TEST(CollectivesPointToPoint, MessagesFromAPeerThatHasLeftAreDelivered) {
  // Iterations 3-5: four sockets per connection (CIUIC_SOCKET_NSOCKS) and
  // messages of many chunks striped over them, so the sender leaves with
  // frames queued on several sockets.
  for (int iter = 0; iter < 6; ++iter) {
    const bool striped = iter >= 3;
    const size_t count = striped ? (3u << 20) / sizeof(float) + 5 : 1000;
    auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
      config.transport = "tcp";
      config.timeout_ms = 20000;
      config.chunk_size = 16 << 10;
      config.buffer_size = 64 << 10;
      if (striped) config.socket_nsocks = 4;
      std::shared_ptr<transport::Store> st(&store, [](transport::Store*) {});
      CIUIC_ASSIGN_OR_RETURN(auto c, Communicator::CreateWithStore(rank, 2, st, config));
      std::vector<float> a(count), b(count);
      for (size_t i = 0; i < count; ++i) {
        a[i] = static_cast<float>(i % 4099);
        b[i] = static_cast<float>(i % 5003) + 0.5f;
      }
      if (rank == 0) {
        CIUIC_RETURN_IF_ERROR(c->Send(a.data(), a.size(), DataType::kFloat32, 1));
        CIUIC_RETURN_IF_ERROR(c->Send(b.data(), b.size(), DataType::kFloat32, 1));
        return Status::Ok();  // leaves at once: the communicator says goodbye
      }
      std::vector<float> got_a(count, 0), got_b(count, 0);
      CIUIC_RETURN_IF_ERROR(c->Recv(got_a.data(), got_a.size(), DataType::kFloat32, 0));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // rank 0 is gone by now
      CIUIC_RETURN_IF_ERROR(c->Recv(got_b.data(), got_b.size(), DataType::kFloat32, 0));
      EXPECT_OR_FAIL(got_a == a && got_b == b, "wrong data");
      // Anything more from rank 0 is an error naming it, not a hang.
      Status more = c->Recv(got_b.data(), got_b.size(), DataType::kFloat32, 0);
      EXPECT_OR_FAIL(!more.ok() && more.message().find("rank 0") != std::string::npos,
                     "a receive from a departed rank: " + more.ToString());
      return Status::Ok();
    }, milliseconds(60000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << "iteration " << iter << "\n" << ResultsText(results);
  }
}

// A send to a rank that never posts the receive (nor any operation that
// connects to this rank): an error naming it at the timeout, not a hang.
TEST(CollectivesPointToPoint, SendToARankThatNeverAnswersNamesItAtTheTimeout) {
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto c, MakeComm(rank, 2, store, "tcp", "auto", 1500));
    if (rank == 1) {
      CIUIC_RETURN_IF_ERROR(store.Get("sender done", milliseconds(20000)).status());
      return Status::Ok();
    }
    std::vector<float> x(1000, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    Status s = c->Send(x.data(), x.size(), DataType::kFloat32, 1);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CIUIC_RETURN_IF_ERROR(store.Set("sender done", "1"));
    EXPECT_OR_FAIL(s.code() == StatusCode::kDeadlineExceeded, "want DEADLINE_EXCEEDED, got " + s.ToString());
    EXPECT_OR_FAIL(s.message().find("rank 1") != std::string::npos &&
                       s.message().find("not connected") != std::string::npos,
                   "the error does not name the silent rank: " + s.ToString());
    EXPECT_OR_FAIL(waited > 1.0 && waited < 10.0, "gave up after " + std::to_string(waited) + " s (timeout 1.5 s)");
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// Plans are cached per call (collective, buffers, counts, type, op, root):
// the same buffers in another relation (out of place, in place, swapped, a
// partial overlap that must be staged) and more distinct calls than the
// cache holds (it starts over) all give exact results.
TEST(CollectivesPlanCache, CallsThatDifferOnlyInBuffersOrCount) {
  auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 3, store, "tcp", "ring"));
    const size_t count = 5000;
    std::vector<float> a(2 * count), b(2 * count);
    auto fill = [&](float* p) {
      for (size_t i = 0; i < count; ++i) p[i] = static_cast<float>(rank * 100 + i % 97);
    };
    auto check = [&](const float* p, const char* what) -> Status {
      for (size_t i = 0; i < count; ++i) {
        const float want = static_cast<float>(300 + 3 * (i % 97));
        EXPECT_OR_FAIL(p[i] == want, std::string(what) + ": element " + std::to_string(i) + " is " +
                                         std::to_string(p[i]) + ", want " + std::to_string(want));
      }
      return Status::Ok();
    };
    for (int round = 0; round < 3; ++round) {
      fill(a.data());
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(a.data(), b.data(), count, DataType::kFloat32, ReduceOp::kSum));
      CIUIC_RETURN_IF_ERROR(check(b.data(), "a -> b"));
      fill(a.data());
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(a.data(), a.data(), count, DataType::kFloat32, ReduceOp::kSum));
      CIUIC_RETURN_IF_ERROR(check(a.data(), "a in place"));
      fill(b.data());
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(b.data(), a.data(), count, DataType::kFloat32, ReduceOp::kSum));
      CIUIC_RETURN_IF_ERROR(check(a.data(), "b -> a"));
      fill(a.data() + 7);  // output overlaps the input, shifted: staged
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(a.data() + 7, a.data(), count, DataType::kFloat32, ReduceOp::kSum));
      CIUIC_RETURN_IF_ERROR(check(a.data(), "a + 7 -> a"));
      // More distinct calls than the cache keeps.
      for (size_t c = 1; c <= 70; ++c) {
        fill(b.data());
        CIUIC_RETURN_IF_ERROR(comm->AllReduce(b.data(), a.data(), c, DataType::kFloat32, ReduceOp::kSum));
        for (size_t i = 0; i < c; ++i) {
          EXPECT_OR_FAIL(a[i] == static_cast<float>(300 + 3 * (i % 97)), "count " + std::to_string(c));
        }
      }
    }
    return Status::Ok();
  }, milliseconds(120000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// The direct shm all-reduce writes outputs of half the last-level cache or
// more with streaming stores (ShmDirectOptions::stream_output_min_bytes):
// exact results out of place and in place, on each side of the threshold.
TEST(CollectivesDirect, LargeOutputsWrittenWithStreamingStoresAreExact) {
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
    config.transport = "shm";
    config.timeout_ms = 60000;  // default slots; "auto" runs the direct all-reduce
    config.shm_cma = "off";     // through the slots (these sizes would run single-copy)
    std::shared_ptr<transport::Store> st(&store, [](transport::Store*) {});
    CIUIC_ASSIGN_OR_RETURN(auto comm, Communicator::CreateWithStore(rank, 2, st, config));
    // The communicator's threshold: its kernels' (half the LLC, <= 16 MiB).
    const size_t at = std::min<size_t>(kernels::CacheSizes::FromSystem().llc, 32u << 20) / 2;
    for (size_t bytes : {at - 4096, at + 12, 2 * at}) {
      CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, bytes / 4, ReduceOp::kSum, false, 8));
      CIUIC_RETURN_IF_ERROR(CheckAllReduce<int32_t>(*comm, bytes / 4, ReduceOp::kMax, true, 9));
    }
    return Status::Ok();
  }, milliseconds(120000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// Every rank ends with exactly the same bytes (non-integer floats, whose
// sum depends on the order of additions).
TEST(CollectivesDeterminism, SameBytesOnEveryRankAndRun) {
  for (const std::string& algo : AllReduceSchedules()) {
    auto results = RunRanks(4, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 4, store, "shm", algo));
      const size_t count = 100003;
      std::vector<float> in(count), out(count), again(count);
      for (size_t i = 0; i < count; ++i) in[i] = std::sin(0.001f * i + rank) * 1e3f / (1 + rank);
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum));
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(in.data(), again.data(), count, DataType::kFloat32, ReduceOp::kSum));
      if (std::memcmp(out.data(), again.data(), count * 4) != 0) return InternalError("two runs differ");
      // Compare with rank 0's bytes through an all-gather of a checksum.
      uint64_t h = 1469598103934665603ull;
      const auto* b = reinterpret_cast<const uint8_t*>(out.data());
      for (size_t i = 0; i < count * 4; ++i) h = (h ^ b[i]) * 1099511628211ull;
      std::vector<uint64_t> all(4);
      CIUIC_RETURN_IF_ERROR(comm->AllGather(&h, all.data(), 1, DataType::kUint64));
      for (uint64_t v : all) {
        if (v != all[0]) return InternalError(std::string(algo) + ": ranks ended with different bytes");
      }
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << algo << "\n" << ResultsText(results);
  }
}

// The progress thread runs the all-reduce while the caller computes: the
// request completes without the caller waiting on it.
TEST(CollectivesAsync, OverlapsComputation) {
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 2, store, "shm", "auto"));
    const size_t count = 1 << 20;
    std::vector<float> a(count, 1.0f + rank), b(count, 2.0f), c(count, 3.0f);
    CIUIC_ASSIGN_OR_RETURN(Request r1, comm->IAllReduce(a.data(), a.data(), count, DataType::kFloat32, ReduceOp::kSum));
    CIUIC_ASSIGN_OR_RETURN(Request r2, comm->IAllReduce(b.data(), b.data(), count, DataType::kFloat32, ReduceOp::kSum));
    CIUIC_ASSIGN_OR_RETURN(Request r3, comm->IAllReduce(c.data(), c.data(), count, DataType::kFloat32, ReduceOp::kMax));
    // "Compute" without calling into ciuic, then look: all done already.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    bool done = false;
    while (!done && std::chrono::steady_clock::now() < until) {
      volatile double x = 0;
      for (int i = 0; i < 100000; ++i) x = x + i * 0.5;
      CIUIC_ASSIGN_OR_RETURN(done, r3.Test());
    }
    if (!done) return InternalError("the async all-reduce made no progress while the caller computed");
    // Completed in call order.
    CIUIC_ASSIGN_OR_RETURN(bool d1, r1.Test());
    CIUIC_ASSIGN_OR_RETURN(bool d2, r2.Test());
    if (!d1 || !d2) return InternalError("requests completed out of order");
    CIUIC_RETURN_IF_ERROR(r1.Wait());
    CIUIC_RETURN_IF_ERROR(r2.Wait());
    CIUIC_RETURN_IF_ERROR(r3.Wait());
    if (a[12345] != 3.0f || b[0] != 4.0f || c[count - 1] != 3.0f) return InternalError("wrong async results");
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// A blocking call right after an async one runs after it on every rank,
// also in the window where the progress thread has taken the async call
// off the queue but not yet started it (the blocking call must not see an
// empty queue then and overtake it: the ranks would run the two in
// different orders).
TEST(CollectivesAsync, ABlockingCallNeverOvertakesTheAsyncOneBeforeIt) {
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, 2, store, "shm", "auto", 20000));
    float x = 0, y = 0;
    for (int i = 0; i < 20000; ++i) {
      x = static_cast<float>(rank + 1);
      y = static_cast<float>(rank * 10 + i % 7);
      CIUIC_ASSIGN_OR_RETURN(Request r, comm->IAllReduce(&x, &x, 1, DataType::kFloat32, ReduceOp::kSum));
      // 0-20 us: sometimes right when the progress thread takes it.
      const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds((i * 7919) % 20000);
      while (std::chrono::steady_clock::now() < until) {
      }
      Status s = comm->AllReduce(&y, &y, 1, DataType::kFloat32, ReduceOp::kMax);
      Status w = r.Wait();
      if (!s.ok() || !w.ok()) {
        return InternalError("call " + std::to_string(i) + ": blocking: " + s.ToString() + "; async: " + w.ToString());
      }
      EXPECT_OR_FAIL(x == 3.0f && y == static_cast<float>(10 + i % 7), "call " + std::to_string(i) + ": wrong result");
    }
    return Status::Ok();
  }, milliseconds(120000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// Fusion: many small tensors, few all-reduces, results scattered back.
TEST(CollectivesFusion, BucketRoundTrip) {
  auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 3, store, "shm", "auto"));
    for (int step = 0; step < 2; ++step) {  // reuse of the packs
      FusionBucket bucket(*comm, DataType::kFloat32, ReduceOp::kSum, 64 << 10);
      std::vector<std::vector<float>> tensors;
      for (int t = 0; t < 200; ++t) tensors.emplace_back(1 + (t * 37) % 300, static_cast<float>(rank + t + step));
      tensors.emplace_back(100000, 1.0f);  // larger than the bucket: its own all-reduce
      for (auto& t : tensors) CIUIC_RETURN_IF_ERROR(bucket.Add(t.data(), t.size()));
      CIUIC_RETURN_IF_ERROR(bucket.Wait());
      for (int t = 0; t < 200; ++t) {
        for (float v : tensors[t]) {
          if (v != static_cast<float>(3 * (t + step) + 3)) return InternalError("tensor " + std::to_string(t) + " wrong");
        }
      }
      if (tensors.back()[99999] != 3.0f) return InternalError("oversized tensor wrong");
      if (bucket.allreduces_issued() > 10) return InternalError("fusion issued too many all-reduces");
    }
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// Bad input is an error naming the argument; the communicator stays usable.
// Calls with nothing to move (count 0) return at once, as in MPI: here
// rank 0 makes them while the other ranks never do (they would wait for
// it at the barrier after, then time out if rank 0 were stuck), with null
// buffers, over shm and tcp; then everyone still runs a real all-reduce.
TEST(CollectivesZeroCount, ReturnsAtOnceWithoutThePeers) {
  for (const char* transport : {"shm", "tcp"}) {
    auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 3, store, transport, "auto", 20000));
      if (rank == 0) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 100; ++i) {
          CIUIC_RETURN_IF_ERROR(comm->AllReduce(nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum));
          CIUIC_RETURN_IF_ERROR(comm->Broadcast(nullptr, 0, DataType::kFloat32, 2));
          CIUIC_RETURN_IF_ERROR(comm->Reduce(nullptr, nullptr, 0, DataType::kInt32, ReduceOp::kMax, 1));
          CIUIC_RETURN_IF_ERROR(comm->AllGather(nullptr, nullptr, 0, DataType::kFloat64));
          CIUIC_RETURN_IF_ERROR(comm->ReduceScatter(nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum));
          CIUIC_RETURN_IF_ERROR(comm->AllToAll(nullptr, nullptr, 0, DataType::kUint8));
          CIUIC_ASSIGN_OR_RETURN(Request r, comm->IAllReduce(nullptr, nullptr, 0, DataType::kFloat32, ReduceOp::kSum));
          CIUIC_RETURN_IF_ERROR(r.Wait());
        }
        if (std::chrono::steady_clock::now() - t0 > milliseconds(5000)) return InternalError("zero-count calls waited");
      }
      return CheckAllReduce<float>(*comm, 1000, ReduceOp::kSum, false, 3);
    }, milliseconds(60000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << transport << "\n" << ResultsText(results);
  }
}

// Communicators over one store under prefixes of the caller's: ranks that
// belong to different groups make them in different numbers and orders
// (with the per-process count, rank 1's third would not meet rank 0's
// second). Groups {0, 1} and {1, 2}; rank 0 first makes a lone one.
TEST(CollectivesGroups, CallerPrefixesMeetWhateverEachRankMadeBefore) {
  auto results = RunRanks(3, [](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
    config.transport = "shm";
    config.timeout_ms = 20000;
    std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
    if (Communicator::CreateWithStore(0, 1, s, config, "").ok()) return InternalError("an empty prefix was taken");
    std::unique_ptr<Communicator> lone, a, b;
    if (rank == 0) {
      CIUIC_ASSIGN_OR_RETURN(lone, Communicator::CreateWithStore(0, 1, s, config, "lone0"));
    }
    if (rank <= 1) {
      CIUIC_ASSIGN_OR_RETURN(a, Communicator::CreateWithStore(rank, 2, s, config, "group-a"));
    }
    if (rank >= 1) {
      CIUIC_ASSIGN_OR_RETURN(b, Communicator::CreateWithStore(rank - 1, 2, s, config, "group-b"));
    }
    for (Communicator* c : {a.get(), b.get()}) {
      if (c == nullptr) continue;
      std::vector<float> x(1000, static_cast<float>(rank + 1));
      CIUIC_RETURN_IF_ERROR(c->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
      const float want = c == a.get() ? 1 + 2 : 2 + 3;
      for (float v : x) EXPECT_OR_FAIL(v == want, "group sum");
    }
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// Two communicators of the same ranks driven at once from two threads of
// each rank (what sub-communicators and torch process groups do): both
// exact, neither waits for the other (run under TSan in CI).
TEST(CollectivesGroups, TwoCommunicatorsFromTwoThreadsAtOnce) {
  for (const std::string kind : {"shm", "tcp"}) {
    auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
      config.transport = kind;
      config.timeout_ms = 30000;
      std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
      CIUIC_ASSIGN_OR_RETURN(auto a, Communicator::CreateWithStore(rank, 3, s, config, "threads-a"));
      CIUIC_ASSIGN_OR_RETURN(auto b, Communicator::CreateWithStore(rank, 3, s, config, "threads-b"));
      Status results[2];
      auto drive = [&](Communicator* c, int salt, Status* out) {
        *out = [&]() -> Status {
          for (int i = 0; i < 20; ++i) {
            const size_t count = i % 2 ? 100000 : 1000;
            std::vector<float> x(count, static_cast<float>(rank + salt + i));
            CIUIC_RETURN_IF_ERROR(c->AllReduce(x.data(), x.data(), count, DataType::kFloat32, ReduceOp::kSum));
            const float want = static_cast<float>(0 + 1 + 2 + 3 * (salt + i));
            for (float v : x) EXPECT_OR_FAIL(v == want, "sum of communicator " + std::to_string(salt));
          }
          return Status::Ok();
        }();
      };
      std::thread ta(drive, a.get(), 0, &results[0]);
      std::thread tb(drive, b.get(), 100, &results[1]);
      ta.join();
      tb.join();
      CIUIC_RETURN_IF_ERROR(results[0]);
      return results[1];
    }, milliseconds(90000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << kind << "\n" << ResultsText(results);
  }
}

TEST(CollectivesErrors, BadInput) {
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 2, store, "shm", "auto"));
    float x[4] = {1, 2, 3, 4};
    auto expect = [&](Status s, const char* needle) -> Status {
      if (s.code() != StatusCode::kInvalidArgument || s.message().find(needle) == std::string::npos) {
        return InternalError(std::string("expected an error naming '") + needle + "', got " + s.ToString());
      }
      return Status::Ok();
    };
    CIUIC_RETURN_IF_ERROR(expect(comm->AllReduce(nullptr, x, 4, DataType::kFloat32, ReduceOp::kSum), "sendbuf"));
    CIUIC_RETURN_IF_ERROR(expect(comm->AllReduce(x, nullptr, 4, DataType::kFloat32, ReduceOp::kSum), "recvbuf"));
    CIUIC_RETURN_IF_ERROR(expect(comm->Broadcast(x, 4, DataType::kFloat32, 2), "root"));
    CIUIC_RETURN_IF_ERROR(expect(comm->Reduce(x, x, 4, DataType::kFloat32, ReduceOp::kSum, -1), "root"));
    CIUIC_RETURN_IF_ERROR(expect(comm->AllReduce(x, x, 4, static_cast<DataType>(42), ReduceOp::kSum), "dtype"));
    CIUIC_RETURN_IF_ERROR(expect(comm->Send(x, 4, DataType::kFloat32, rank), "peer"));
    CIUIC_RETURN_IF_ERROR(comm->AllReduce(x, x, 4, DataType::kFloat32, ReduceOp::kSum));
    if (x[0] != 2.0f) return InternalError("the communicator is unusable after refused input");
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// Mismatched counts across ranks are detected (chunk sizes disagree) instead
// of corrupting memory or hanging.
TEST(CollectivesErrors, MismatchedCountsDetected) {
  for (const char* algo : {"ring", "direct"}) {
    for (size_t count : {size_t{1000}, size_t{100000}}) {  // direct: one-shot, two-shot
      auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
        CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 2, store, "shm", algo, 5000));
        std::vector<float> x(count, 1.0f);
        Status s = comm->AllReduce(x.data(), x.data(), rank == 0 ? count : count - 1, DataType::kFloat32,
                                   ReduceOp::kSum);
        if (s.ok()) return InternalError("mismatched counts were not detected");
        const std::string peer = "rank " + std::to_string(1 - rank);
        if (std::string(algo) == "direct" && s.message().find(peer) == std::string::npos) {
          return InternalError("the error does not name " + peer + ": " + s.ToString());
        }
        return Status::Ok();
      }, milliseconds(60000));
      for (const auto& r : results) EXPECT_TRUE(r.ok()) << algo << " count " << count << "\n" << ResultsText(results);
    }
  }
}

// Counts this rank in at `key` and waits (10 s at most) until `n` ranks
// have: ranks that leave together, so none sees another close first.
Status LeaveTogether(transport::Store& store, const std::string& key, int n,
                     milliseconds wait = milliseconds(10000)) {
  CIUIC_RETURN_IF_ERROR(store.Add(key, 1).status());
  StatusOr<int64_t> v = int64_t{0};
  for (int64_t w = 0; w < wait.count() / 5; ++w) {
    v = store.Add(key, 0);
    if (v.ok() && *v >= n) return Status::Ok();
    std::this_thread::sleep_for(milliseconds(5));
  }
  return InternalError("the other ranks never reported at '" + key + "': " +
                       (v.ok() ? std::to_string(*v) + " of " + std::to_string(n) : v.status().ToString()));
}

// A rank killed in the middle of a collective: every survivor returns an
// error naming it, well within the timeout.
TEST(CollectivesErrors, KilledRankNamedBySurvivors) {
  // (Named copies: lambdas cannot capture structured bindings before C++20.)
  for (const auto& ta : {std::pair<const char*, const char*>{"shm", "ring"}, {"shm", "direct"}, {"tcp", "ring"}}) {
    const char* t = ta.first;
    const char* algo = ta.second;
    auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 3, store, t, algo, 20000));
      std::vector<float> x(1 << 20, 1.0f);
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
      if (rank == 2) kill(getpid(), SIGKILL);
      for (int i = 0; i < 1000; ++i) {
        Status s = comm->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
        if (!s.ok()) {
          if (s.message().find("rank 2") == std::string::npos) return InternalError("error does not name rank 2: " + s.ToString());
          Status again = comm->Barrier();
          if (again.ok()) return InternalError("the failed communicator kept working");
          // Survivors leave together, so neither sees the other close first.
          return LeaveTogether(store, "survived", 2);
        }
      }
      return InternalError("no error although rank 2 was killed");
    }, milliseconds(60000));
    EXPECT_TRUE(results[0].ok()) << t << "\n" << ResultsText(results);
    EXPECT_TRUE(results[1].ok()) << t << "\n" << ResultsText(results);
    EXPECT_EQ(results[2].signal, SIGKILL) << ResultsText(results);
  }
}

// Whether this process may use process_vm_readv at all (a seccomp filter,
// as in some containers, refuses even a read of itself).
bool CmaAllowed() {
  uint64_t x = 42, y = 0;
  iovec l{&y, sizeof(y)}, r{&x, sizeof(x)};
  return process_vm_readv(getpid(), &l, 1, &r, 1, 0) == static_cast<ssize_t>(sizeof(y)) && y == 42;
}

// The single-copy direct all-reduce (process_vm_readv from the peers'
// buffers): on 2, 3 and 5 ranks (5 share 2 cores), sizes from just past the
// one-shot limit to past the streaming-output threshold, odd counts (the
// last slice shorter), in place and not, four dtypes and ops; on 18 ranks
// (more than the reduction kernel takes at once: in place, a rank past the
// 16th must not fold its own overwritten input in) one size; and every
// rank ends with the same bytes for non-integer floats (rank 0's digest
// through the store).
TEST(CollectivesDirect, SingleCopyAllReduceExactOnEveryRank) {
  if (!CmaAllowed()) GTEST_SKIP() << "process_vm_readv is refused here (seccomp?): the single-copy path cannot run";
  const size_t nt = kernels::CacheSizes::FromSystem().llc / 2;
  for (int n : {2, 3, 5, 18}) {
    auto results = RunRanks(n, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
      config.transport = "shm";
      config.algo = "direct";
      config.timeout_ms = 60000;
      config.shm_cma = "on";   // always, not where measured faster
      config.shm_cma_min = 0;  // everything past one-shot
      std::shared_ptr<transport::Store> st(&store, [](transport::Store*) {});
      CIUIC_ASSIGN_OR_RETURN(auto comm, Communicator::CreateWithStore(rank, n, st, config));
      int salt = 0;
      std::vector<size_t> counts = {4100, 65537, (size_t{1} << 18) + 5};
      if (n == 2) counts.push_back(std::min<size_t>(nt, 16u << 20) / 4 + 3);
      if (n == 18) counts = {65537};
      for (size_t count : counts) {
        for (bool in_place : {false, true}) {
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<float>(*comm, count, ReduceOp::kSum, in_place, ++salt));
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<int32_t>(*comm, count, ReduceOp::kMax, in_place, ++salt));
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<double>(*comm, count / 2 + 1, ReduceOp::kMin, in_place, ++salt));
          CIUIC_RETURN_IF_ERROR(CheckAllReduce<uint8_t>(*comm, count * 3 + 1, ReduceOp::kMax, in_place, ++salt));
        }
      }
      // Non-integer floats: the sum depends on the order of additions.
      const size_t count = (1u << 18) + 5;
      std::vector<float> in(count), out(count);
      for (size_t i = 0; i < count; ++i) in[i] = std::sin(0.01f * i + rank) * 100.0f / (rank + 1);
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum));
      uint64_t h = 1469598103934665603ull;
      const auto* b = reinterpret_cast<const unsigned char*>(out.data());
      for (size_t i = 0; i < count * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
      if (rank == 0) CIUIC_RETURN_IF_ERROR(store.Set("digest", std::to_string(h)));
      CIUIC_ASSIGN_OR_RETURN(std::string want, store.Get("digest", milliseconds(30000)));
      if (want != std::to_string(h)) return DataLossError("rank " + std::to_string(rank) + "'s bytes differ from rank 0's");
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << n << " ranks\n" << ResultsText(results);
  }
}

// Single-copy failures: ranks that call with other counts get an error
// naming the peer and its single-copy all-reduce; ranks whose size limits
// differ fail at the first direct call naming the knobs; a rank killed
// between calls is named by the survivors well before the timeout.
TEST(CollectivesDirect, SingleCopyMismatchesAndADeadRankAreNamed) {
  if (!CmaAllowed()) GTEST_SKIP() << "process_vm_readv is refused here (seccomp?): the single-copy path cannot run";
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    setenv("CIUIC_SHM_CMA", "on", 1);
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, 2, store, "shm", "direct", 5000));
    std::vector<float> x(rank == 0 ? (1u << 18) : (1u << 18) + 64, 1.0f);
    Status s = comm->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
    if (s.ok()) return InternalError("an all-reduce of another count was accepted");
    if (s.message().find(rank == 0 ? "rank 1" : "rank 0") == std::string::npos ||
        s.message().find("single-copy allreduce") == std::string::npos) {
      return InternalError("the error does not name the peer's single-copy all-reduce: " + s.ToString());
    }
    return LeaveTogether(store, "mismatched", 2);
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);

  for (const char* knob : {"CIUIC_SHM_CMA_MIN", "CIUIC_SHM_CMA"}) {
    results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
      if (rank == 1) setenv(knob, std::string(knob) == "CIUIC_SHM_CMA" ? "on" : "1M", 1);
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, 2, store, "shm", "direct", 5000));
      std::vector<float> x(1u << 18, 1.0f);
      Status s = comm->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
      if (s.ok()) return InternalError(std::string("different ") + knob + " accepted");
      // The first rank to see it fails at once, and its peer may then see
      // only that (its region gone): one of the two names the knob.
      const bool named = s.message().find(std::string(knob) + (std::string(knob) == "CIUIC_SHM_CMA" ? "=" : "")) !=
                         std::string::npos;
      CIUIC_RETURN_IF_ERROR(store.Add("named", named ? 1 : 0).status());
      CIUIC_RETURN_IF_ERROR(LeaveTogether(store, "limits", 2));
      CIUIC_ASSIGN_OR_RETURN(int64_t k, store.Add("named", 0));
      if (k < 1) return InternalError(std::string("no rank named ") + knob + "; this one said: " + s.ToString());
      return Status::Ok();
    }, milliseconds(60000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << knob << "\n" << ResultsText(results);
  }

  results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
    setenv("CIUIC_SHM_CMA", "on", 1);
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeDefaultComm(rank, 3, store, "shm", "direct", 20000));
    std::vector<float> x(1 << 20, 1.0f);
    CIUIC_RETURN_IF_ERROR(comm->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
    if (rank == 2) kill(getpid(), SIGKILL);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; ++i) {
      Status s = comm->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
      if (!s.ok()) {
        if (s.message().find("rank 2") == std::string::npos) return InternalError("error does not name rank 2: " + s.ToString());
        if (std::chrono::steady_clock::now() - t0 > milliseconds(15000)) return InternalError("noticed only at the timeout");
        return LeaveTogether(store, "survived", 2);
      }
    }
    return InternalError("no error although rank 2 was killed");
  }, milliseconds(60000));
  EXPECT_TRUE(results[0].ok()) << ResultsText(results);
  EXPECT_TRUE(results[1].ok()) << ResultsText(results);
  EXPECT_EQ(results[2].signal, SIGKILL) << ResultsText(results);
}

// A rank killed after the communicator is made but before its first
// collective never connects: the survivors' first collective (which makes
// the links or the direct region, waiting for the peer's store keys) names
// it within a few checks of its process, not at the 20 s timeout.
TEST(CollectivesErrors, RankKilledBeforeItsFirstCollectiveNamedAtOnce) {
  // (Named copies: lambdas cannot capture structured bindings before C++20.)
  for (const auto& ta : {std::pair<const char*, const char*>{"shm", "ring"}, {"shm", "direct"}, {"tcp", "ring"}}) {
    const char* t = ta.first;
    const char* algo = ta.second;
    auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 3, store, t, algo, 20000));
      if (rank == 2) kill(getpid(), SIGKILL);
      std::vector<float> x(1000, 1.0f);
      const auto t0 = std::chrono::steady_clock::now();
      Status s = comm->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
      const auto took = std::chrono::steady_clock::now() - t0;
      if (s.ok()) return InternalError("no error although rank 2 was killed");
      if (s.message().find("rank 2") == std::string::npos) return InternalError("error does not name rank 2: " + s.ToString());
      if (took > milliseconds(5000)) return InternalError("named only after " + std::to_string(std::chrono::duration_cast<milliseconds>(took).count()) + " ms: " + s.ToString());
      // Survivors leave together, so neither sees the other close first.
      return LeaveTogether(store, "survived", 2);
    }, milliseconds(60000));
    EXPECT_TRUE(results[0].ok()) << t << " " << algo << "\n" << ResultsText(results);
    EXPECT_TRUE(results[1].ok()) << t << " " << algo << "\n" << ResultsText(results);
    EXPECT_EQ(results[2].signal, SIGKILL) << ResultsText(results);
  }
}

// Sub-communicators: 8 ranks split two ways at once (2 groups of 4, ranked
// in reverse by key; 4 groups of 2), both splits driven concurrently from
// two threads with the parent between the rounds; every result checked.
// The splits outlive the parent.
TEST(CollectivesGroups, SplitEightRanksTwoWaysDrivenAtOnceWithTheParentBetween) {
  for (const std::string kind : {"shm", "tcp"}) {
    auto results = RunRanks(8, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto parent, MakeComm(rank, 8, store, kind, "auto", 60000));
      CIUIC_ASSIGN_OR_RETURN(auto quads, parent->Split(rank / 4, -rank));
      CIUIC_ASSIGN_OR_RETURN(auto pairs, parent->Split(rank % 4, rank));
      EXPECT_OR_FAIL(quads != nullptr && pairs != nullptr, "a split gave no communicator");
      EXPECT_OR_FAIL(quads->size() == 4 && quads->rank() == 3 - rank % 4, "quads: rank " +
                     std::to_string(quads->rank()) + " of " + std::to_string(quads->size()));
      EXPECT_OR_FAIL(pairs->size() == 2 && pairs->rank() == rank / 4, "pairs: rank " +
                     std::to_string(pairs->rank()) + " of " + std::to_string(pairs->size()));
      // Members in key order: the quads hold their parent ranks in reverse.
      int32_t me = rank;
      std::vector<int32_t> seen(4, -1);
      CIUIC_RETURN_IF_ERROR(quads->AllGather(&me, seen.data(), 1, DataType::kInt32));
      const int base = rank / 4 * 4;
      for (int i = 0; i < 4; ++i) EXPECT_OR_FAIL(seen[i] == base + 3 - i, "quads' all-gather order");
      // Sum of (parent rank + 1 + salt) over a group, element i adding i.
      auto drive = [&](Communicator* c, std::vector<int> members, int salt) -> Status {
        for (int round = 0; round < 6; ++round) {
          const size_t count = round % 2 ? 100000 : 1000;
          std::vector<int32_t> x(count);
          for (size_t i = 0; i < count; ++i) x[i] = rank + 1 + salt + round + static_cast<int32_t>(i % 1000);
          CIUIC_RETURN_IF_ERROR(c->AllReduce(x.data(), x.data(), count, DataType::kInt32, ReduceOp::kSum));
          for (size_t i = 0; i < count; ++i) {
            int32_t want = 0;
            for (int m : members) want += m + 1 + salt + round + static_cast<int32_t>(i % 1000);
            if (x[i] != want) {
              return InternalError("rank " + std::to_string(rank) + " salt " + std::to_string(salt) + ": element " +
                                   std::to_string(i) + " is " + std::to_string(x[i]) + ", want " + std::to_string(want));
            }
          }
        }
        return Status::Ok();
      };
      const std::vector<int> quad_members{base, base + 1, base + 2, base + 3};
      const std::vector<int> pair_members{rank % 4, rank % 4 + 4};
      std::vector<int> everyone(8);
      for (int i = 0; i < 8; ++i) everyone[i] = i;
      for (int step = 0; step < 3; ++step) {
        Status qs, ps;
        std::thread tq([&] { qs = drive(quads.get(), quad_members, 10 * step); });
        std::thread tp([&] { ps = drive(pairs.get(), pair_members, 1000 + 10 * step); });
        tq.join();
        tp.join();
        CIUIC_RETURN_IF_ERROR(qs);
        CIUIC_RETURN_IF_ERROR(ps);
        CIUIC_RETURN_IF_ERROR(drive(parent.get(), everyone, 5000 + step));
      }
      // Destroying the parent leaves its splits working.
      parent.reset();
      CIUIC_RETURN_IF_ERROR(drive(quads.get(), quad_members, 7));
      return drive(pairs.get(), pair_members, 8);
    }, milliseconds(240000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << kind << "\n" << ResultsText(results);
  }
}

// Split's edges: CIUIC_UNDEFINED takes part and gets nothing, Dup keeps the
// ranks, a split of a split, and a bad color fails every rank naming the
// rank that passed it while the parent goes on.
TEST(CollectivesGroups, SplitUndefinedDupNestedAndABadColor) {
  auto results = RunRanks(4, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto parent, MakeComm(rank, 4, store, "shm", "auto", 30000));
    CIUIC_ASSIGN_OR_RETURN(auto rest, parent->Split(rank == 0 ? kUndefinedColor : 3, 0));
    EXPECT_OR_FAIL((rest == nullptr) == (rank == 0), "kUndefinedColor gives null, and only it");
    if (rest != nullptr) {
      EXPECT_OR_FAIL(rest->size() == 3 && rest->rank() == rank - 1, "the three others, in rank order");
      // A split of a split: ranks 1 and 3 here (rest's 0 and 2).
      CIUIC_ASSIGN_OR_RETURN(auto odd, rest->Split(rank % 2 == 1 ? 0 : kUndefinedColor, rank));
      if (rank % 2 == 1) {
        EXPECT_OR_FAIL(odd != nullptr && odd->size() == 2 && odd->rank() == rank / 2, "odd ranks");
        int32_t v = rank;
        CIUIC_RETURN_IF_ERROR(odd->AllReduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum));
        EXPECT_OR_FAIL(v == 4, "1 + 3 on the split of a split");
      } else {
        EXPECT_OR_FAIL(odd == nullptr, "an undefined color in a split of a split");
      }
    }
    CIUIC_ASSIGN_OR_RETURN(auto dup, parent->Dup());
    EXPECT_OR_FAIL(dup != nullptr && dup->size() == 4 && dup->rank() == rank, "Dup keeps size and rank");
    int32_t v = rank + 1;
    CIUIC_RETURN_IF_ERROR(dup->AllReduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum));
    EXPECT_OR_FAIL(v == 10, "the sum on the duplicate");

    auto bad = parent->Split(rank == 2 ? -5 : 0, 0);
    EXPECT_OR_FAIL(bad.status().code() == StatusCode::kInvalidArgument &&
                   bad.status().message().find("color -5 of rank 2") != std::string::npos,
                   "a bad color on rank 2: " + bad.status().ToString());
    v = 1;
    CIUIC_RETURN_IF_ERROR(parent->AllReduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum));
    EXPECT_OR_FAIL(v == 4, "the parent after a refused split");
    return Status::Ok();
  }, milliseconds(120000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// The process that serves the store (rank 0, from a unique id it made)
// takes no part in a split and destroys its communicator at once; the
// others meet, make their links and run on the split through its store.
TEST(CollectivesGroups, SplitsMeetThroughAStoreWhoseServerLeftTheSplit) {
  for (const std::string kind : {"shm", "tcp"}) {
    auto results = RunRanks(3, [&](int rank, transport::Store& files) -> Status {
      CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
      config.transport = kind;
      config.timeout_ms = 30000;
      config.socket_ifname = "lo";
      UniqueId id;
      if (rank == 0) {
        CIUIC_RETURN_IF_ERROR(Communicator::MakeUniqueId(config, &id));
        CIUIC_RETURN_IF_ERROR(files.Set("id", std::string(id.bytes, sizeof(id.bytes))));
      } else {
        CIUIC_ASSIGN_OR_RETURN(std::string got, files.Get("id", milliseconds(30000)));
        EXPECT_OR_FAIL(got.size() == sizeof(id.bytes), "the id's size");
        std::memcpy(id.bytes, got.data(), sizeof(id.bytes));
      }
      CIUIC_ASSIGN_OR_RETURN(auto parent, Communicator::CreateFromId(rank, 3, id, config));
      CIUIC_ASSIGN_OR_RETURN(auto rest, parent->Split(rank == 0 ? kUndefinedColor : 0, rank));
      parent.reset();
      if (rank == 0) return LeaveTogether(files, "done", 3);
      // The first collective makes the links: through the store.
      std::vector<float> x(50000, static_cast<float>(rank));
      CIUIC_RETURN_IF_ERROR(rest->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
      EXPECT_OR_FAIL(x[0] == 3.0f && x.back() == 3.0f, "1 + 2 on the split");
      rest.reset();
      return LeaveTogether(files, "done", 3);
    }, milliseconds(90000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << kind << "\n" << ResultsText(results);
  }
}

// A rank killed after a split is named on its group (with its rank in the
// parent) and, within the timeout, on the parent by every survivor; the
// other group goes on once the death is known. (A rank whose parent call
// failed does not tell its peers: a survivor waiting on it learns at the
// timeout, from the fault records, that rank 3 is the first fault.)
TEST(CollectivesGroups, AKilledRankIsNamedOnItsGroupAndOnTheParent) {
  for (const std::string kind : {"shm", "tcp"}) {
    auto results = RunRanks(4, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(auto parent, MakeComm(rank, 4, store, kind, "ring", 6000));
      CIUIC_ASSIGN_OR_RETURN(auto half, parent->Split(rank / 2, rank));
      if (rank == 3) kill(getpid(), SIGKILL);
      std::vector<float> x(100000, 1.0f);
      if (rank == 2) {
        Status s = half->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
        EXPECT_OR_FAIL(!s.ok() && s.message().find("where it is rank 3; rank 1 here") != std::string::npos,
                       "the group's error names the dead rank there and here: " + s.ToString());
        CIUIC_RETURN_IF_ERROR(store.Set("rank 3 is dead", "1"));
      } else {
        CIUIC_RETURN_IF_ERROR(store.Get("rank 3 is dead", milliseconds(30000)).status());
        CIUIC_RETURN_IF_ERROR(half->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
        EXPECT_OR_FAIL(x[0] == 2.0f && x.back() == 2.0f, "the other group's sum");
      }
      Status s = parent->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
      EXPECT_OR_FAIL(!s.ok() && RankNamedLast(s.message(), rank) == 3, "the parent's error names rank 3: " + s.ToString());
      return LeaveTogether(store, "survived", 3, milliseconds(30000));
    }, milliseconds(90000));
    for (int r = 0; r < 3; ++r) EXPECT_TRUE(results[r].ok()) << kind << "\n" << ResultsText(results);
    EXPECT_EQ(results[3].signal, SIGKILL) << ResultsText(results);
  }
}

// CIUIC_TUNING_FILE: the communicator follows the file's rules under auto
// (and says so), every rank must load the same file, and a broken file is
// an error naming it and the line.
std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name + "." + std::to_string(getpid());
  std::ofstream(path) << text;
  return path;
}

StatusOr<std::unique_ptr<Communicator>> MakeTunedComm(int rank, int n, transport::Store& store,
                                                      const std::string& tuning_file) {
  CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
  config.transport = "shm";
  config.algo = "auto";
  config.timeout_ms = 20000;
  config.tuning_file = tuning_file;
  std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
  return Communicator::CreateWithStore(rank, n, s, config);
}

TEST(CollectivesTuning, RulesOfTheFileDecide) {
  const std::string file = WriteFile("tuning", R"(ciuic-tuning 1
backend shm alpha_us 0.3 beta_gbps 12 copy_gbps 25
gamma f32 sum 30
rule allreduce shm ranks 2 from 0 ring
rule allreduce shm ranks 2 from 4096 direct
rule allreduce shm ranks 2 from 1048576 tree
)");
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeTunedComm(rank, 2, store, file));
    struct Want { size_t count; const char* algo; };
    for (const Want w : {Want{2, "ring"}, Want{1000, "ring"}, Want{1024, "direct"}, Want{100000, "direct"},
                         Want{1u << 18, "tree"}, Want{1u << 19, "tree"}}) {
      std::vector<float> x(w.count, static_cast<float>(rank + 1));
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(x.data(), x.data(), w.count, DataType::kFloat32, ReduceOp::kSum));
      for (float v : x) EXPECT_OR_FAIL(v == 3.0f, "wrong sum");
      const std::string got = comm->last_algorithm();
      EXPECT_OR_FAIL(got.rfind(w.algo, 0) == 0 && got.find("tuned: rule allreduce shm ranks 2") != std::string::npos,
                     std::to_string(w.count * 4) + " B: expected the file's " + w.algo + ", got: " + got);
    }
    // Other rank counts have no rule: the defaults decide (direct on shm).
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// A file that ciuic-tune measured on one machine ("meta hosts 1") has
// loopback's tcp line: on several hosts the network level keeps the
// defaults and its one-host rules do not apply; shm's line still does. The
// same lines without the key (a file of another origin) are taken as given.
// A between_hosts line (ciuic-tune launched across hosts) is what a job on
// several hosts takes for its network, whatever else the file holds.
TEST(CollectivesTuning, AOneMachineFileLeavesTheNetworkBetweenHostsAlone) {
  const std::string body = R"(backend shm alpha_us 0.3 beta_gbps 12 copy_gbps 25
backend tcp alpha_us 5000 beta_gbps 0.001
rule allreduce tcp ranks 4 hosts 1 from 0 ring
)";
  const std::string one = WriteFile("tuning_one", "ciuic-tuning 1\nmeta hosts 1\n" + body);
  const std::string given = WriteFile("tuning_given", "ciuic-tuning 1\n" + body);
  const std::string between = WriteFile("tuning_between", "ciuic-tuning 1\nmeta hosts 1\n" + body +
                                                               "backend tcp between_hosts alpha_us 3000 beta_gbps 0.002\n");
  const std::vector<int> host_of = {0, 0, 1, 1};
  // The model's prediction for the algorithm that ran, from last_algorithm()
  // ("... predicted 21 us, ..." or "5.01 ms"), in microseconds.
  auto predicted_us = [](const std::string& why) {
    const size_t at = why.find("predicted ");
    if (at == std::string::npos) return -1.0;
    char* end = nullptr;
    const double v = std::strtod(why.c_str() + at + 10, &end);
    const std::string unit = std::string(end).substr(0, 3);
    return unit == " ms" ? v * 1e3 : unit == " us" ? v : unit == " s," || unit == " s)" ? v * 1e6 : -1.0;
  };
  for (const std::string& file : {one, given, between}) {
    auto results = RunRanks(4, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
      config.algo = "auto";
      config.timeout_ms = 30000;
      config.tuning_file = file;
      config.host_id = "h" + std::to_string(host_of[static_cast<size_t>(rank)]);
      std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
      CIUIC_ASSIGN_OR_RETURN(auto comm, Communicator::CreateWithStore(rank, 4, s, config));
      std::vector<float> x(2, 1.0f);
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
      EXPECT_OR_FAIL(x[0] == 4.0f, "wrong sum");
      const std::string why = comm->last_algorithm();
      EXPECT_OR_FAIL(why.find("tuned: rule") == std::string::npos, "a one-host rule applied on 2 hosts: " + why);
      const double us = predicted_us(why);
      if (file == one) {
        // Default network alpha: tens of microseconds, not the file's 5 ms.
        EXPECT_OR_FAIL(us > 0 && us < 1000, "the one-machine file's tcp line was used between hosts: " + why);
      } else if (file == between) {
        // At least one crossing at the between_hosts alpha (3 ms); the
        // plain line's 5 ms would put every algorithm above 5 ms.
        EXPECT_OR_FAIL(us > 2900 && us < 5000, "the between_hosts line was not the network's: " + why);
      } else {
        EXPECT_OR_FAIL(us > 5000, "the file's tcp line was not used: " + why);
      }
      return Status::Ok();
    }, milliseconds(60000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << file << ":\n" << ResultsText(results);
  }
}

// Ranks of one machine whose cores move the bytes (tcp over loopback):
// selection costs their work on the CPUs they share, the model ciuic-sim
// --cpu-cores runs and perf/sim_validate checks, not as independent NICs.
TEST(CollectivesTuning, OneMachinesRanksShareItsCpusInTheModel) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int cpus = CPU_COUNT(&set);
  if (cpus < 2) GTEST_SKIP() << "needs 2 CPUs for 2 ranks that do not outnumber them; this process may use " << cpus;
  const size_t bytes = 4u << 20;
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
    config.algo = "auto";
    config.transport = "tcp";
    config.tuning_file = "";
    config.timeout_ms = 30000;
    std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
    CIUIC_ASSIGN_OR_RETURN(auto comm, Communicator::CreateWithStore(rank, 2, s, config));
    std::vector<float> x(bytes / 4, 1.0f);
    CIUIC_RETURN_IF_ERROR(comm->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum));
    EXPECT_OR_FAIL(x[0] == 2.0f && x.back() == 2.0f, "wrong sum");
    const std::string why = comm->last_algorithm();
    const std::string head = "ring (ring for allreduce " + std::to_string(bytes) + " B on 2 ranks: predicted ";
    EXPECT_OR_FAIL(why.rfind(head, 0) == 0, "expected the model to pick the ring here: " + why);
    char* end = nullptr;
    const double v = std::strtod(why.c_str() + head.size(), &end);
    const std::string unit = std::string(end).substr(0, 3);
    const double us = unit == " ms" ? v * 1e3 : unit == " us" ? v : -1.0;
    collectives::CostParams p = collectives::DefaultCostParams(transport::BackendKind::kTcp);
    p.chunk_bytes = config.chunk_size;
    p.nchannels = config.nchannels;
    p.cpu_cores = cpus;
    StatusOr<collectives::Prediction> shared =
        collectives::Predict(collectives::Collective::kAllReduce, collectives::Algorithm::kRing, bytes, 2, p);
    p.cpu_cores = 0;
    StatusOr<collectives::Prediction> nics =
        collectives::Predict(collectives::Collective::kAllReduce, collectives::Algorithm::kRing, bytes, 2, p);
    CIUIC_RETURN_IF_ERROR(shared.status());
    CIUIC_RETURN_IF_ERROR(nics.status());
    // Seconds() prints 3 significant digits; the two models differ ~2x.
    EXPECT_OR_FAIL(std::abs(us - shared->seconds * 1e6) <= 0.01 * us,
                   why + ": not the shared-CPU model's " + std::to_string(shared->seconds * 1e6) + " us (NICs': " +
                       std::to_string(nics->seconds * 1e6) + ")");
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// Rank 0 of 2, made while rank 1 failed at creation: its first call needs
// rank 1 and names that failure with `why` (rank 1's reason) at once, not
// at the timeout. Sets "checked" in the store for rank 1 to finish.
Status RankZeroNamesRankOnesFailure(StatusOr<std::unique_ptr<Communicator>>& comm, transport::Store& store,
                                    const std::string& why) {
  CIUIC_RETURN_IF_ERROR(comm.status());
  std::vector<float> x(1000, 1.0f);
  const auto t0 = std::chrono::steady_clock::now();
  Status s = (*comm)->AllReduce(x.data(), x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
  const auto took = std::chrono::steady_clock::now() - t0;
  CIUIC_RETURN_IF_ERROR(store.Set("checked", "1"));
  if (s.ok()) return InternalError("an all-reduce with a rank that failed to initialise succeeded");
  if (s.message().find("rank 1 failed to initialise") == std::string::npos || s.message().find(why) == std::string::npos) {
    return InternalError("rank 0's error does not name rank 1's failure: " + s.ToString());
  }
  if (took > std::chrono::seconds(5)) return InternalError("rank 1's failure was named only at the timeout");
  return Status::Ok();
}

TEST(CollectivesTuning, EveryRankMustUseTheSameFile) {
  const std::string a = WriteFile("tuning_a", "ciuic-tuning 1\nrule allreduce shm ranks 2 from 0 ring\n");
  const std::string b = WriteFile("tuning_b", "ciuic-tuning 1\nrule allreduce shm ranks 2 from 0 tree\n");
  auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    StatusOr<std::unique_ptr<Communicator>> comm = MakeTunedComm(rank, 2, store, rank == 0 ? a : b);
    if (rank == 0) return RankZeroNamesRankOnesFailure(comm, store, "CIUIC_TUNING_FILE");
    if (comm.ok()) return InternalError("rank 1 accepted a tuning file that differs from rank 0's");
    if (comm.status().message().find("CIUIC_TUNING_FILE") == std::string::npos) {
      return InternalError("the error does not name CIUIC_TUNING_FILE: " + comm.status().ToString());
    }
    return store.Get("checked", milliseconds(60000)).status();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// Knobs that shape every schedule (CIUIC_ALGO, CIUIC_NCHANNELS) must match:
// a rank that differs from rank 0 stops at creation naming the knob and
// both values, and rank 0's first call names that rank's failure at once
// (it used to wait out the timeout, or fail on a chunk's size).
TEST(CollectivesErrors, EveryRankMustUseTheSameScheduleKnobs) {
  struct Mismatch {
    const char* algo0;
    const char* algo1;
    int nch0, nch1;
    const char* want;
  };
  for (const Mismatch& m : {Mismatch{"auto", "auto", 1, 2, "CIUIC_NCHANNELS=2 differs from rank 0's 1"},
                            Mismatch{"allreduce:ring", "recdoubling", 1, 1,
                                     "CIUIC_ALGO=allreduce:recdoubling differs from rank 0's allreduce:ring"},
                            Mismatch{"RING", "ring", 2, 2, ""}}) {
    auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
      CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
      config.transport = "tcp";
      config.timeout_ms = 60000;
      CIUIC_RETURN_IF_ERROR(config.Set("CIUIC_ALGO", rank == 0 ? m.algo0 : m.algo1));
      config.nchannels = rank == 0 ? m.nch0 : m.nch1;
      std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
      StatusOr<std::unique_ptr<Communicator>> comm = Communicator::CreateWithStore(rank, 2, s, config);
      if (*m.want == '\0') {  // the same knobs, spelled differently
        CIUIC_RETURN_IF_ERROR(comm.status());
        return CheckAllReduce<float>(**comm, 1000, ReduceOp::kSum, false, 1);
      }
      if (rank == 0) return RankZeroNamesRankOnesFailure(comm, store, m.want);
      if (comm.ok()) return InternalError(std::string("rank 1 joined with other schedule knobs: ") + m.want);
      if (comm.status().message().find(m.want) == std::string::npos) {
        return InternalError("the error does not name the knob: " + comm.status().ToString());
      }
      return store.Get("checked", milliseconds(60000)).status();
    }, milliseconds(60000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << m.want << ":\n" << ResultsText(results);
  }
}

TEST(CollectivesTuning, BrokenFileNamesFileAndLine) {
  const std::string bad = WriteFile("tuning_bad", "ciuic-tuning 1\nrule allreduce shm ranks 2 from 0 nosuchalgo\n");
  auto results = RunRanks(1, [&](int rank, transport::Store& store) -> Status {
    StatusOr<std::unique_ptr<Communicator>> comm = MakeTunedComm(rank, 1, store, bad);
    if (comm.ok()) return InternalError("a broken tuning file was accepted");
    const std::string m = comm.status().message();
    if (m.find(bad + ":2") == std::string::npos || m.find("nosuchalgo") == std::string::npos) {
      return InternalError("the error does not name the file, line 2 and the bad name: " + m);
    }
    StatusOr<std::unique_ptr<Communicator>> missing = MakeTunedComm(rank, 1, store, bad + ".missing");
    if (missing.ok() || missing.status().message().find("CIUIC_TUNING_FILE") == std::string::npos) {
      return InternalError("a missing tuning file was not named: " + missing.status().ToString());
    }
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

// "Device" memory for the GPU-buffer paths without a GPU: pages the host
// cannot touch (PROT_NONE) except through this class's copies, so any code
// that reads or writes a device buffer directly dies with SIGSEGV instead
// of passing by luck. Both sides use it: the library (DeviceMemory) and the
// test (TestDeviceMemory).
class FakeDevice final : public collectives::DeviceMemory, public testing::TestDeviceMemory {
 public:
  // DeviceMemory (the library's side).
  int DeviceOf(const void* p) override {
    lookups.fetch_add(1);
    return Find(p, 1).has_value() ? 0 : -1;
  }
  Status ToHost(void* host, const void* dev, size_t bytes, int device) override {
    if (device != 0) return InternalError("ToHost: wrong device " + std::to_string(device));
    to_host.fetch_add(1);
    return Copy(host, dev, bytes, dev);
  }
  Status ToDevice(void* dev, const void* host, size_t bytes, int device) override {
    if (device != 0) return InternalError("ToDevice: wrong device " + std::to_string(device));
    to_device.fetch_add(1);
    return Copy(dev, host, bytes, dev);
  }
  void* AllocHost(size_t bytes, int) override { return std::malloc(bytes); }
  void FreeHost(void* p) override { std::free(p); }
  std::string Identity(int) override { return "fake0"; }
  std::string name() const override { return "fake"; }

  // TestDeviceMemory (the test's side).
  void* Alloc(size_t bytes) override {
    const size_t len = (bytes + 4095) / 4096 * 4096 + 4096;
    void* p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    maps_.push_back({static_cast<char*>(p), len});
    return p;
  }
  void Free(void* p) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < maps_.size(); ++i) {
      if (maps_[i].p == p) {
        munmap(maps_[i].p, maps_[i].len);
        maps_.erase(maps_.begin() + i);
        return;
      }
    }
  }
  Status Upload(void* dev, const void* host, size_t bytes) override { return Copy(dev, host, bytes, dev); }
  Status Download(void* host, const void* dev, size_t bytes) override { return Copy(host, dev, bytes, dev); }

  std::atomic<int> to_host{0}, to_device{0}, lookups{0};

 private:
  struct Map {
    char* p;
    size_t len;
  };
  // A copy: the vector may grow on another thread (the test allocates
  // while the progress thread copies).
  std::optional<Map> Find(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const char* c = static_cast<const char*>(p);
    for (const Map& m : maps_) {
      if (c >= m.p && c + bytes <= m.p + m.len) return m;
    }
    return std::nullopt;
  }
  // Opens the mapping of `dev` for the copy only.
  Status Copy(void* dst, const void* src, size_t bytes, const void* dev) {
    if (bytes == 0) return Status::Ok();
    const std::optional<Map> m = Find(dev, bytes);
    if (!m.has_value()) return InternalError("copy of a range that is not fake device memory");
    mprotect(m->p, m->len, PROT_READ | PROT_WRITE);
    std::memcpy(dst, src, bytes);
    mprotect(m->p, m->len, PROT_NONE);
    return Status::Ok();
  }
  std::mutex mu_;
  std::vector<Map> maps_;
};

// Every collective on device buffers, through host copies, over shm and
// tcp (the fake above dies on any direct access to device memory).
TEST(CollectivesGpuBuffers, EveryCollectiveThroughHostCopies) {
  for (const char* transport : {"shm", "tcp"}) {
    auto results = RunRanks(3, [&](int rank, transport::Store& store) -> Status {
      auto fake = std::make_shared<FakeDevice>();
      collectives::SetDeviceMemoryForTesting(fake);
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 3, store, transport, "auto"));
      for (size_t count : {size_t{1}, size_t{1000}, size_t{70000}}) {
        CIUIC_RETURN_IF_ERROR(testing::CheckCollectivesOnDevice(*comm, *fake, count, static_cast<int>(count % 7)));
      }
      if (fake->to_host.load() == 0 || fake->to_device.load() == 0) {
        return InternalError("no device copies were made: the device buffers were not staged");
      }
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << transport << "\n" << ResultsText(results);
  }
}

// A large all-reduce on device buffers goes through the host in chunks
// (copies of the next and previous chunks beside the host all-reduce): the
// results are exact, in place and out of place, and the input came over
// chunk by chunk.
TEST(CollectivesGpuBuffers, LargeAllReduceInPipelinedChunks) {
  for (const char* transport : {"shm", "tcp"}) {
    auto results = RunRanks(2, [&](int rank, transport::Store& store) -> Status {
      auto fake = std::make_shared<FakeDevice>();
      collectives::SetDeviceMemoryForTesting(fake);
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 2, store, transport, "auto"));
      const size_t count = (size_t{1} << 20) + 3;  // 4 MiB and a ragged last chunk
      const size_t chunks = (count * 4 + collectives::StagingChunkBytes(count * 4, 4) - 1) /
                            collectives::StagingChunkBytes(count * 4, 4);
      testing::DevFloats in(*fake, count), out(*fake, count);
      std::vector<float> mine(count), want(count);
      for (size_t i = 0; i < count; ++i) {
        mine[i] = testing::DevInput(rank, i, 3);
        want[i] = testing::DevInput(0, i, 3) + testing::DevInput(1, i, 3);
      }
      CIUIC_RETURN_IF_ERROR(in.Set(mine));
      const int before = fake->to_host.load();
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum));
      if (static_cast<size_t>(fake->to_host.load() - before) != chunks) {
        return InternalError("expected " + std::to_string(chunks) + " chunk copies, saw " +
                             std::to_string(fake->to_host.load() - before));
      }
      CIUIC_ASSIGN_OR_RETURN(auto got, out.Get());
      if (got != want) return InternalError("rank " + std::to_string(rank) + ": pipelined all-reduce is wrong");
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(in.get(), in.get(), count, DataType::kFloat32, ReduceOp::kAvg));
      CIUIC_ASSIGN_OR_RETURN(got, in.Get());
      for (size_t i = 0; i < count; ++i) {
        if (got[i] != want[i] / 2) return InternalError("rank " + std::to_string(rank) + ": in-place avg element " + std::to_string(i));
      }
      return Status::Ok();
    }, milliseconds(120000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << transport << "\n" << ResultsText(results);
  }
}

// CIUIC_GPU=off: buffers are not looked at (no copies); CIUIC_GPU=nccl
// without a usable NCCL is an error naming the knob at creation.
TEST(CollectivesGpuBuffers, KnobOffAndNcclWithoutADriver) {
  auto results = RunRanks(1, [&](int rank, transport::Store& store) -> Status {
    auto fake = std::make_shared<FakeDevice>();
    collectives::SetDeviceMemoryForTesting(fake);
    CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
    config.transport = "shm";
    config.gpu = "off";
    std::shared_ptr<transport::Store> st(&store, [](transport::Store*) {});
    CIUIC_ASSIGN_OR_RETURN(auto comm, Communicator::CreateWithStore(rank, 1, st, config));
    std::vector<float> a(100, 1.0f), b(100, 0.0f);
    CIUIC_RETURN_IF_ERROR(comm->AllReduce(a.data(), b.data(), a.size(), DataType::kFloat32, ReduceOp::kSum));
    if (fake->lookups.load() != 0) return InternalError("CIUIC_GPU=off still looked for device buffers");
    config.gpu = "auto";
    CIUIC_ASSIGN_OR_RETURN(auto looking, Communicator::CreateWithStore(rank, 1, st, config));
    CIUIC_RETURN_IF_ERROR(looking->AllReduce(a.data(), b.data(), a.size(), DataType::kFloat32, ReduceOp::kSum));
    if (fake->lookups.load() == 0) return InternalError("CIUIC_GPU=auto did not look at the buffers");
    collectives::SetDeviceMemoryForTesting(nullptr);
    config.gpu = "nccl";
    StatusOr<std::unique_ptr<Communicator>> nccl = Communicator::CreateWithStore(rank, 1, st, config);
    if (nccl.ok()) {
      return Status::Ok();  // this machine has a GPU driver and NCCL (checked on the GPU machine)
    }
    if (nccl.status().message().find("CIUIC_GPU=nccl") == std::string::npos) {
      return InternalError("the error does not name CIUIC_GPU=nccl: " + nccl.status().ToString());
    }
    return Status::Ok();
  }, milliseconds(60000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << ResultsText(results);
}

}  // namespace
}  // namespace ciuic
