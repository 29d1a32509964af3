// The executor without fork: two ranks as two threads of this process, each
// with its own backend (tcp or shm), linked through a store in a temporary
// directory. Hand-written schedules exercise every step kind, chunk
// pipelining through rings smaller than the message (credits), and the
// errors: a deadline naming the peer and the step, abort, a bad range, a
// peer sending the wrong count.
#include "collectives/executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "collectives/schedule_builder.h"
#include "kernels/reference.h"
#include "tests/util/backend_skip.h"
#include "tests/util/multiproc.h"

namespace ciuic::collectives {
namespace {

using Clock = std::chrono::steady_clock;
using internal::Builder;
using internal::In;
using internal::Out;
using internal::Scr;
using std::chrono::milliseconds;
using transport::BackendKind;

// One rank of an in-process pair.
struct Side {
  std::unique_ptr<transport::Backend> backend;
  std::unique_ptr<transport::BufferPool> pool;
  std::unique_ptr<transport::Link> link;
  std::optional<kernels::Reducer> reducer;
};

// Both ranks' links to each other, made concurrently (Link::Create waits
// for the peer). Slots of `slot` bytes, `nslots` of them.
StatusOr<std::array<Side, 2>> MakePair(BackendKind kind, transport::Store& store, size_t slot, size_t nslots) {
  std::array<Side, 2> sides;
  transport::LinkOptions lo;
  lo.slot_size = slot;
  lo.nslots = nslots;
  std::array<Status, 2> status;
  const std::string job = "exec" + std::to_string(getpid()) + "_" + std::to_string(Clock::now().time_since_epoch().count());
  auto make = [&](int r) {
    transport::BackendOptions bo;
    bo.rank = r;
    bo.world_size = 2;
    bo.job_id = job;
    StatusOr<Config> c = Config::FromEnv();
    if (!c.ok()) {
      status[r] = c.status();
      return;
    }
    bo.config = *c;
    StatusOr<std::unique_ptr<transport::Backend>> b = transport::OpenBackend(kind, bo);
    if (!b.ok()) {
      status[r] = b.status();
      return;
    }
    Side& s = sides[r];
    s.backend = std::move(*b);
    s.pool = std::make_unique<transport::BufferPool>(*s.backend, 1u << 20);
    StatusOr<std::unique_ptr<transport::Link>> l =
        transport::Link::Create(*s.backend, *s.pool, store, job, r, 1 - r, 0, lo, milliseconds(10000));
    if (!l.ok()) {
      status[r] = l.status();
      return;
    }
    s.link = std::move(*l);
    StatusOr<kernels::Reducer> red = kernels::Reducer::FromEnv();
    if (!red.ok()) {
      status[r] = red.status();
      return;
    }
    s.reducer.emplace(*red);
  };
  std::thread t1(make, 1);
  make(0);
  t1.join();
  for (const Status& s : status) CIUIC_RETURN_IF_ERROR(s);
  return sides;
}

struct Job {
  Schedule schedule;
  std::vector<float> in, out, scratch;
  size_t chunk_bytes = 0;
};

// Runs the two jobs, one per thread, each on its own side; their statuses.
std::array<Status, 2> RunBoth(std::array<Side, 2>& sides, std::array<Job, 2>& jobs, milliseconds timeout,
                              const std::array<bool, 2>& runs = {true, true},
                              const std::atomic<bool>* abort = nullptr) {
  std::array<Status, 2> st;
  auto run = [&](int r) {
    if (!runs[r]) return;
    Side& s = sides[r];
    Job& j = jobs[r];
    ExecJob e;
    e.schedule = &j.schedule;
    e.buffers.input = j.in.data();
    e.buffers.input_count = j.in.size();
    e.buffers.output = j.out.data();
    e.buffers.output_count = j.out.size();
    e.buffers.scratch = j.scratch.data();
    e.buffers.scratch_count = j.scratch.size();
    e.dtype = DataType::kFloat32;
    e.op = ReduceOp::kSum;
    e.chunk_bytes = j.chunk_bytes;
    Executor exec(*s.backend, *s.reducer);
    transport::Link* link = s.link.get();
    LinkSource source = [link](int, int) -> StatusOr<transport::Link*> { return link; };
    st[r] = exec.RunMany({e}, source, Clock::now() + timeout, abort, nullptr);
  };
  std::thread t1(run, 1);
  run(0);
  t1.join();
  return st;
}

class ExecutorTest : public ::testing::TestWithParam<BackendKind> {
 protected:
  void SetUp() override {
    if (!store_dir_.path().empty()) {
      auto s = transport::FileStore::Open(store_dir_.path());
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      store_ = std::move(*s);
    }
  }
  testing::TempDir store_dir_;
  std::unique_ptr<transport::FileStore> store_;
};

std::vector<float> Iota(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return v;
}

// Every step kind between two ranks, with chunks of 3 elements (each
// message several chunks) through rings of 4 slots of 16 B:
//   rank 0: #0 send in            -> rank 1 stores it (recv)
//           #1 recv out[0,n)      <- rank 1's in
//           #2 recv_reduce        scr[0,n) = in + rank 1's in
//           #3 recv_reduce_send   scr[n,2n) = in + rank 1's in, sent back
//           #4 copy               out[n,2n) = in
//           #5 reduce             out[2n,3n) = out[0,n) + in (after #1)
//           #6 recv_copy_send     out[3n,4n) = rank 1's in + 1, sent back
// Rank 1 answers each and checks what comes back.
TEST_P(ExecutorTest, EveryStepKindChunkByChunk) {
  ASSERT_NE(store_, nullptr);
  auto sides = MakePair(GetParam(), *store_, 16, 4);
  if (!sides.ok() && sides.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << sides.status().ToString();
  ASSERT_TRUE(sides.ok()) << sides.status().ToString();
  const size_t n = 10;
  std::array<Job, 2> jobs;
  {
    Builder b("test", "every", 0, 2);
    b.Send(1, 0, In(0, n));
    const int r1 = b.Recv(1, 0, Out(0, n));
    b.RecvReduce(1, 0, In(0, n), Scr(0, n));
    b.RecvReduceSend(1, 1, 0, In(0, n), Scr(n, n));
    b.Copy(In(0, n), Out(n, n));
    b.Reduce({Out(0, n), In(0, n)}, Out(2 * n, n), {r1}, DepMode::kPerChunk);
    b.RecvCopySend(1, 1, 0, Out(3 * n, n));
    jobs[0].schedule = b.Take();
    jobs[0].in = Iota(n, 0);
    jobs[0].out.assign(4 * n, -1);
    jobs[0].scratch.assign(2 * n, -1);
  }
  {
    Builder b("test", "every", 1, 2);
    b.Recv(0, 0, Out(0, n));          // rank 0's #0
    b.Send(0, 0, In(0, n));           // #1
    b.Send(0, 0, In(0, n));           // #2
    b.Send(0, 0, In(0, n));           // #3's input
    b.Recv(0, 0, Out(n, n));          // #3's result
    b.Send(0, 0, Scr(0, n));          // #6's input: in + 1
    b.Recv(0, 0, Out(2 * n, n));      // #6 forwarded back
    jobs[1].schedule = b.Take();
    jobs[1].in = Iota(n, 100);
    jobs[1].out.assign(3 * n, -1);
    jobs[1].scratch = Iota(n, 101);
  }
  for (auto& j : jobs) j.chunk_bytes = 12;
  auto st = RunBoth(*sides, jobs, milliseconds(20000));
  ASSERT_TRUE(st[0].ok()) << st[0].ToString();
  ASSERT_TRUE(st[1].ok()) << st[1].ToString();
  for (size_t i = 0; i < n; ++i) {
    const float a = static_cast<float>(i), b = 100 + a;
    EXPECT_EQ(jobs[1].out[i], a);              // send -> recv
    EXPECT_EQ(jobs[0].out[i], b);              // recv
    EXPECT_EQ(jobs[0].scratch[i], a + b);      // recv_reduce
    EXPECT_EQ(jobs[0].scratch[n + i], a + b);  // recv_reduce_send (stored)
    EXPECT_EQ(jobs[1].out[n + i], a + b);      // ... and forwarded
    EXPECT_EQ(jobs[0].out[n + i], a);          // copy
    EXPECT_EQ(jobs[0].out[2 * n + i], a + b);  // reduce after a per-chunk dep
    EXPECT_EQ(jobs[0].out[3 * n + i], b + 1);  // recv_copy_send (stored)
    EXPECT_EQ(jobs[1].out[2 * n + i], b + 1);  // ... and forwarded
  }
}

// A reduce step may take up to 64 inputs (a k-nomial round of radix 64)
// while the kernel takes 16: the rest are folded in, in order (the first
// 16 in one pass, then the running value and the next 15), into an output
// that is also the first input or apart from them all. The values are not
// exact in float, so another order gives other bits.
TEST_P(ExecutorTest, AReduceOfMoreInputsThanTheKernelTakes) {
  ASSERT_NE(store_, nullptr);
  auto sides = MakePair(GetParam(), *store_, 64, 4);
  if (!sides.ok() && sides.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << sides.status().ToString();
  ASSERT_TRUE(sides.ok()) << sides.status().ToString();
  const size_t n = 7;
  for (int inputs : {17, 33, 64}) {
    std::array<Job, 2> jobs;
    Builder b("test", "wide", 0, 2);
    std::vector<Range> in;
    for (int x = 0; x < inputs; ++x) in.push_back(Scr(static_cast<size_t>(x) * n, n));
    b.Reduce(in, Out(0, n), {}, DepMode::kPerChunk);
    b.Reduce(in, in[0], {0}, DepMode::kPerChunk);  // in place on the first, after #0 read it
    jobs[0].schedule = b.Take();
    jobs[0].in = Iota(n, 0);
    jobs[0].out.assign(n, -1);
    jobs[0].scratch.resize(static_cast<size_t>(inputs) * n);
    for (size_t i = 0; i < jobs[0].scratch.size(); ++i) jobs[0].scratch[i] = 1.0f / static_cast<float>(i % 97 + 3);
    const std::vector<float> scratch = jobs[0].scratch;
    // The expected fold, pass by pass, with the reference kernel.
    std::vector<float> want(n);
    {
      std::vector<const void*> src;
      for (int x = 0; x < inputs; ++x) src.push_back(scratch.data() + static_cast<size_t>(x) * n);
      kernels::ref::Reduce(want.data(), src.data(), kernels::kMaxSources, n, DataType::kFloat32, ReduceOp::kSum, 1.0);
      for (int first = kernels::kMaxSources; first < inputs;) {
        std::vector<const void*> more = {want.data()};
        while (static_cast<int>(more.size()) < kernels::kMaxSources && first < inputs) more.push_back(src[first++]);
        std::vector<float> next(n);
        kernels::ref::Reduce(next.data(), more.data(), static_cast<int>(more.size()), n, DataType::kFloat32,
                             ReduceOp::kSum, 1.0);
        want = next;
      }
    }
    jobs[0].chunk_bytes = 12;
    auto st = RunBoth(*sides, jobs, milliseconds(20000), {true, false});
    ASSERT_TRUE(st[0].ok()) << inputs << " inputs: " << st[0].ToString();
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(jobs[0].out[i], want[i]) << inputs << " inputs, element " << i;
      EXPECT_EQ(jobs[0].scratch[i], want[i]) << inputs << " inputs in place, element " << i;
    }
  }
  // An output that is an input past the first pass would be read after
  // the first pass wrote it: refused.
  StatusOr<kernels::Reducer> r = kernels::Reducer::FromEnv();
  ASSERT_TRUE(r.ok());
  std::vector<std::vector<float>> bufs(20, std::vector<float>(n, 1.0f));
  std::vector<const void*> src;
  for (const auto& b : bufs) src.push_back(b.data());
  Status bad = ReduceInOrder(*r, bufs[17].data(), src.data(), 20, n, DataType::kFloat32, ReduceOp::kSum);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument) << bad.ToString();
  EXPECT_NE(bad.message().find("input 17 of 20"), std::string::npos) << bad.ToString();
  EXPECT_TRUE(ReduceInOrder(*r, bufs[3].data(), src.data(), 20, n, DataType::kFloat32, ReduceOp::kSum).ok());
  EXPECT_EQ(bufs[3][0], 20.0f);
}

// A message of 64 Ki floats through a ring of 2 slots of 4 KiB, cut into
// 1 KiB chunks: 256 chunks, each slot reused 128 times, so the sender runs
// on credits the receiver returns; a forwarding step on the way back keeps
// per-chunk order.
TEST_P(ExecutorTest, LongMessagesPipelineThroughSmallRingsOnCredits) {
  ASSERT_NE(store_, nullptr);
  auto sides = MakePair(GetParam(), *store_, 4096, 2);
  if (!sides.ok() && sides.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << sides.status().ToString();
  ASSERT_TRUE(sides.ok()) << sides.status().ToString();
  const size_t n = 64 * 1024;
  std::array<Job, 2> jobs;
  {
    Builder b("test", "pipe", 0, 2);
    b.Send(1, 0, In(0, n));
    b.Recv(1, 0, Out(0, n));
    jobs[0].schedule = b.Take();
    jobs[0].in = Iota(n, 1);
    jobs[0].out.assign(n, 0);
  }
  {
    Builder b("test", "pipe", 1, 2);
    b.RecvReduceSend(0, 0, 0, In(0, n), Out(0, n));
    jobs[1].schedule = b.Take();
    jobs[1].in = Iota(n, 0);
    jobs[1].out.assign(n, 0);
  }
  for (auto& j : jobs) j.chunk_bytes = 1024;
  EXPECT_EQ(jobs[0].schedule.steps.size(), 2u);
  auto st = RunBoth(*sides, jobs, milliseconds(30000));
  ASSERT_TRUE(st[0].ok()) << st[0].ToString();
  ASSERT_TRUE(st[1].ok()) << st[1].ToString();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(jobs[0].out[i], 2.0f * static_cast<float>(i) + 1) << i;
  // Far more chunks than slots went through: credits came back.
  EXPECT_GT((*sides)[1].link->credit_messages() + (*sides)[0].link->credit_messages(), 10u);
}

// A peer that never runs its part: the deadline names the step, the
// direction, the peer and how far the step got.
TEST_P(ExecutorTest, ADeadlineNamesThePeerAndTheStep) {
  ASSERT_NE(store_, nullptr);
  auto sides = MakePair(GetParam(), *store_, 4096, 2);
  if (!sides.ok() && sides.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << sides.status().ToString();
  ASSERT_TRUE(sides.ok()) << sides.status().ToString();
  std::array<Job, 2> jobs;
  Builder b("test", "late", 0, 2);
  b.Copy(In(0, 4), Out(0, 4));
  b.Recv(1, 0, Out(4, 4));
  jobs[0].schedule = b.Take();
  jobs[0].in = Iota(4, 0);
  jobs[0].out.assign(8, 0);
  const auto t0 = Clock::now();
  auto st = RunBoth(*sides, jobs, milliseconds(300), {true, false});
  EXPECT_LT(Clock::now() - t0, milliseconds(5000));
  EXPECT_EQ(st[0].code(), StatusCode::kDeadlineExceeded) << st[0].ToString();
  EXPECT_NE(st[0].message().find("test/late step 1 timed out (recv from rank 1, chunk 0 of 1)"), std::string::npos)
      << st[0].ToString();
}

// A forwarding step that has received everything but cannot pass it on
// (its send peer never reads) names the send peer last: that is the rank
// it waits for. It named the receive peer, which had long finished.
TEST_P(ExecutorTest, AForwardingStepStuckOnItsSendNamesTheSendPeer) {
  ASSERT_NE(store_, nullptr);
  auto sides = MakePair(GetParam(), *store_, 4096, 2);
  if (!sides.ok() && sides.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << sides.status().ToString();
  ASSERT_TRUE(sides.ok()) << sides.status().ToString();
  const size_t n = 4096;  // 16 chunks of 1 KiB
  std::array<Job, 2> jobs;
  {
    Builder b("test", "fwd", 0, 2);
    b.Send(1, 0, In(0, n));  // and never receives what comes back
    jobs[0].schedule = b.Take();
    jobs[0].in = Iota(n, 0);
    jobs[0].out.assign(n, 0);
  }
  {
    Builder b("test", "fwd", 1, 2);
    b.RecvCopySend(0, 0, 0, Out(0, n));
    jobs[1].schedule = b.Take();
    jobs[1].in = Iota(n, 0);
    jobs[1].out.assign(n, 0);
  }
  for (auto& j : jobs) j.chunk_bytes = 1024;
  auto st = RunBoth(*sides, jobs, milliseconds(500));
  ASSERT_TRUE(st[0].ok()) << st[0].ToString();
  EXPECT_EQ(st[1].code(), StatusCode::kDeadlineExceeded) << st[1].ToString();
  EXPECT_NE(st[1].message().find("test/fwd step 0 timed out (recv_copy_send from rank 0 to rank 0, chunk "),
            std::string::npos)
      << st[1].ToString();
  EXPECT_NE(st[1].message().find(" of 16, 16 received)"), std::string::npos) << st[1].ToString();
}

TEST_P(ExecutorTest, AbortBadRangesAndWrongCountsAreErrors) {
  ASSERT_NE(store_, nullptr);
  auto sides = MakePair(GetParam(), *store_, 4096, 2);
  if (!sides.ok() && sides.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << sides.status().ToString();
  ASSERT_TRUE(sides.ok()) << sides.status().ToString();
  // Abort: a receive that would wait stops at once.
  {
    std::array<Job, 2> jobs;
    Builder b("test", "abort", 0, 2);
    b.Recv(1, 0, Out(0, 4));
    jobs[0].schedule = b.Take();
    jobs[0].out.assign(4, 0);
    std::atomic<bool> abort{true};
    auto st = RunBoth(*sides, jobs, milliseconds(20000), {true, false}, &abort);
    EXPECT_EQ(st[0].code(), StatusCode::kAborted) << st[0].ToString();
  }
  // A range outside its buffer, before anything moves.
  {
    std::array<Job, 2> jobs;
    Builder b("test", "range", 0, 2);
    b.Send(1, 0, In(2, 4));
    jobs[0].schedule = b.Take();
    jobs[0].in.assign(4, 0);
    auto st = RunBoth(*sides, jobs, milliseconds(20000), {true, false});
    EXPECT_EQ(st[0].code(), StatusCode::kInvalidArgument) << st[0].ToString();
    EXPECT_NE(st[0].message().find("test/range step 0: range [2, +4) outside a buffer of 4"), std::string::npos)
        << st[0].ToString();
  }
  // The peer sends 5 elements where 4 are expected.
  {
    std::array<Job, 2> jobs;
    Builder b0("test", "count", 0, 2);
    b0.Recv(1, 0, Out(0, 4));
    jobs[0].schedule = b0.Take();
    jobs[0].out.assign(4, 0);
    Builder b1("test", "count", 1, 2);
    b1.Send(0, 0, In(0, 5));
    jobs[1].schedule = b1.Take();
    jobs[1].in = Iota(5, 0);
    auto st = RunBoth(*sides, jobs, milliseconds(20000));
    EXPECT_EQ(st[0].code(), StatusCode::kDataLoss) << st[0].ToString();
    EXPECT_NE(st[0].message().find("rank 1 sent a chunk of 20 bytes where 16 were expected"), std::string::npos)
        << st[0].ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ExecutorTest, ::testing::Values(BackendKind::kTcp, BackendKind::kShm),
                         [](const ::testing::TestParamInfo<BackendKind>& i) {
                           return std::string(transport::BackendName(i.param));
                         });

}  // namespace
}  // namespace ciuic::collectives
