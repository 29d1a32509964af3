// Test helper: every collective on buffers that live in "device" memory
// (CUDA on a GPU machine, a fake that the host cannot touch elsewhere),
// results checked against a reference computed here. The same checks run
// on both, so what the fake proves about staging holds for CUDA too.
#ifndef CIUIC_TESTS_UTIL_DEVICE_COLLECTIVES_H_
#define CIUIC_TESTS_UTIL_DEVICE_COLLECTIVES_H_

#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "ciuic/collectives.h"

namespace ciuic::testing {

// Device memory as a test uses it.
class TestDeviceMemory {
 public:
  virtual ~TestDeviceMemory() = default;
  virtual void* Alloc(size_t bytes) = 0;  // nullptr on failure
  virtual void Free(void* p) = 0;
  virtual Status Upload(void* dev, const void* host, size_t bytes) = 0;
  virtual Status Download(void* host, const void* dev, size_t bytes) = 0;
};

// A device buffer of `n` floats, freed on scope exit.
class DevFloats {
 public:
  DevFloats(TestDeviceMemory& m, size_t n) : m_(m), n_(n), p_(m.Alloc(n * sizeof(float) + 64)) {}
  ~DevFloats() { m_.Free(p_); }
  DevFloats(const DevFloats&) = delete;
  DevFloats& operator=(const DevFloats&) = delete;
  float* get() const { return static_cast<float*>(p_); }
  bool ok() const { return p_ != nullptr; }
  Status Set(const std::vector<float>& v) { return m_.Upload(p_, v.data(), v.size() * sizeof(float)); }
  StatusOr<std::vector<float>> Get() const {
    std::vector<float> v(n_);
    CIUIC_RETURN_IF_ERROR(m_.Download(v.data(), p_, n_ * sizeof(float)));
    return v;
  }

 private:
  TestDeviceMemory& m_;
  size_t n_;
  void* p_;
};

inline float DevInput(int r, size_t i, int salt) { return static_cast<float>(((i * 7 + r * 13 + salt) % 11) + 1); }

#define CIUIC_DEV_EXPECT(cond, what)                                                                 \
  do {                                                                                               \
    if (!(cond)) return InternalError("rank " + std::to_string(rank) + ": " + std::string(what)); \
  } while (0)

// Every collective (blocking and async; out of place and in place), f32,
// `count` elements per rank, buffers from `m`.
inline Status CheckCollectivesOnDevice(Communicator& c, TestDeviceMemory& m, size_t count, int salt) {
  const int rank = c.rank(), n = c.size();
  const size_t N = count * static_cast<size_t>(n);
  auto input = [&](int r, size_t len) {
    std::vector<float> v(len);
    for (size_t i = 0; i < len; ++i) v[i] = DevInput(r, i, salt);
    return v;
  };
  auto sum = [&](size_t i) {
    float s = 0;
    for (int r = 0; r < n; ++r) s += DevInput(r, i, salt);
    return s;
  };
  auto same = [](const std::vector<float>& a, const std::vector<float>& b) { return a == b; };
  std::vector<float> want_sum(N);
  for (size_t i = 0; i < N; ++i) want_sum[i] = sum(i);
  // All-reduce out of place, in place, and async.
  {
    DevFloats in(m, count), out(m, count);
    CIUIC_DEV_EXPECT(in.ok() && out.ok(), "device allocation failed");
    CIUIC_RETURN_IF_ERROR(in.Set(input(rank, count)));
    CIUIC_RETURN_IF_ERROR(c.AllReduce(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum));
    CIUIC_ASSIGN_OR_RETURN(auto got, out.Get());
    CIUIC_DEV_EXPECT(same(got, std::vector<float>(want_sum.begin(), want_sum.begin() + count)), "allreduce");
    CIUIC_ASSIGN_OR_RETURN(auto kept, in.Get());
    CIUIC_DEV_EXPECT(same(kept, input(rank, count)), "allreduce modified its input");
    CIUIC_RETURN_IF_ERROR(c.AllReduce(in.get(), in.get(), count, DataType::kFloat32, ReduceOp::kMax));
    CIUIC_ASSIGN_OR_RETURN(got, in.Get());
    for (size_t i = 0; i < count; ++i) {
      float mx = DevInput(0, i, salt);
      for (int r = 1; r < n; ++r) mx = std::max(mx, DevInput(r, i, salt));
      CIUIC_DEV_EXPECT(got[i] == mx, "allreduce max in place, element " + std::to_string(i));
    }
    CIUIC_RETURN_IF_ERROR(in.Set(input(rank, count)));
    CIUIC_ASSIGN_OR_RETURN(Request req, c.IAllReduce(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kAvg));
    CIUIC_RETURN_IF_ERROR(req.Wait());
    CIUIC_ASSIGN_OR_RETURN(got, out.Get());
    for (size_t i = 0; i < count; ++i) {
      CIUIC_DEV_EXPECT(got[i] == want_sum[i] / static_cast<float>(n), "iallreduce avg, element " + std::to_string(i));
    }
  }
  // Broadcast from the last rank, in its buffer.
  {
    DevFloats buf(m, count);
    CIUIC_RETURN_IF_ERROR(buf.Set(input(rank, count)));
    CIUIC_RETURN_IF_ERROR(c.Broadcast(buf.get(), count, DataType::kFloat32, n - 1));
    CIUIC_ASSIGN_OR_RETURN(auto got, buf.Get());
    CIUIC_DEV_EXPECT(same(got, input(n - 1, count)), "broadcast");
  }
  // Reduce to rank 0.
  {
    DevFloats in(m, count), out(m, count);
    CIUIC_RETURN_IF_ERROR(in.Set(input(rank, count)));
    CIUIC_RETURN_IF_ERROR(out.Set(std::vector<float>(count, -1)));
    CIUIC_RETURN_IF_ERROR(c.Reduce(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum, 0));
    CIUIC_ASSIGN_OR_RETURN(auto got, out.Get());
    CIUIC_DEV_EXPECT(same(got, rank == 0 ? std::vector<float>(want_sum.begin(), want_sum.begin() + count)
                                         : std::vector<float>(count, -1)),
                     "reduce");
    // Off the root the output is unused: a host pointer there changes
    // nothing (the route follows the input).
    float unused = 0;
    CIUIC_RETURN_IF_ERROR(c.Reduce(in.get(), rank == 0 ? static_cast<void*>(out.get()) : &unused, count,
                                   DataType::kFloat32, ReduceOp::kSum, 0));
    CIUIC_ASSIGN_OR_RETURN(got, out.Get());
    if (rank == 0) CIUIC_DEV_EXPECT(same(got, std::vector<float>(want_sum.begin(), want_sum.begin() + count)), "reduce, host output off the root");
    CIUIC_DEV_EXPECT(unused == 0, "reduce wrote the unused output off the root");
  }
  // All-gather out of place and in place (input inside the output).
  {
    std::vector<float> want(N);
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) want[r * count + i] = DevInput(r, i, salt);
    DevFloats in(m, count), out(m, N);
    CIUIC_RETURN_IF_ERROR(in.Set(input(rank, count)));
    CIUIC_RETURN_IF_ERROR(c.AllGather(in.get(), out.get(), count, DataType::kFloat32));
    CIUIC_ASSIGN_OR_RETURN(auto got, out.Get());
    CIUIC_DEV_EXPECT(same(got, want), "allgather");
    std::vector<float> mine(N, -1);
    for (size_t i = 0; i < count; ++i) mine[rank * count + i] = DevInput(rank, i, salt);
    CIUIC_RETURN_IF_ERROR(out.Set(mine));
    CIUIC_RETURN_IF_ERROR(c.AllGather(out.get() + rank * count, out.get(), count, DataType::kFloat32));
    CIUIC_ASSIGN_OR_RETURN(got, out.Get());
    CIUIC_DEV_EXPECT(same(got, want), "allgather in place");
  }
  // Reduce-scatter out of place and in place (output inside the input).
  {
    DevFloats in(m, N), out(m, count);
    CIUIC_RETURN_IF_ERROR(in.Set(input(rank, N)));
    CIUIC_RETURN_IF_ERROR(c.ReduceScatter(in.get(), out.get(), count, DataType::kFloat32, ReduceOp::kSum));
    CIUIC_ASSIGN_OR_RETURN(auto got, out.Get());
    const std::vector<float> want(want_sum.begin() + rank * count, want_sum.begin() + (rank + 1) * count);
    CIUIC_DEV_EXPECT(same(got, want), "reduce_scatter");
    CIUIC_RETURN_IF_ERROR(c.ReduceScatter(in.get(), in.get() + rank * count, count, DataType::kFloat32, ReduceOp::kSum));
    CIUIC_ASSIGN_OR_RETURN(auto all, in.Get());
    CIUIC_DEV_EXPECT(same(std::vector<float>(all.begin() + rank * count, all.begin() + (rank + 1) * count), want),
                     "reduce_scatter in place");
  }
  // V-collectives (rank r has count + r elements) and all-to-all.
  {
    std::vector<size_t> counts(n), off(n, 0);
    size_t total = 0;
    for (int r = 0; r < n; ++r) total += counts[r] = count + r;
    for (int r = 1; r < n; ++r) off[r] = off[r - 1] + counts[r - 1];
    DevFloats mine(m, counts[rank]), all(m, total);
    CIUIC_RETURN_IF_ERROR(mine.Set(input(rank, counts[rank])));
    CIUIC_RETURN_IF_ERROR(c.AllGatherV(mine.get(), all.get(), counts.data(), DataType::kFloat32));
    CIUIC_ASSIGN_OR_RETURN(auto got, all.Get());
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < counts[r]; ++i) CIUIC_DEV_EXPECT(got[off[r] + i] == DevInput(r, i, salt), "allgatherv");
    CIUIC_RETURN_IF_ERROR(all.Set(input(rank, total)));
    CIUIC_RETURN_IF_ERROR(c.ReduceScatterV(all.get(), mine.get(), counts.data(), DataType::kFloat32, ReduceOp::kSum));
    CIUIC_ASSIGN_OR_RETURN(got, mine.Get());
    for (size_t i = 0; i < counts[rank]; ++i) CIUIC_DEV_EXPECT(got[i] == sum(off[rank] + i), "reduce_scatterv");
    DevFloats a(m, N), b(m, N);
    std::vector<float> blocks(N);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i) blocks[p * count + i] = static_cast<float>(rank * 1000 + p * 10 + i % 10);
    CIUIC_RETURN_IF_ERROR(a.Set(blocks));
    CIUIC_RETURN_IF_ERROR(c.AllToAll(a.get(), b.get(), count, DataType::kFloat32));
    CIUIC_ASSIGN_OR_RETURN(got, b.Get());
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i)
        CIUIC_DEV_EXPECT(got[p * count + i] == static_cast<float>(p * 1000 + rank * 10 + i % 10), "alltoall");
  }
  CIUIC_RETURN_IF_ERROR(c.Barrier());
  // Send/recv around a ring, both posted before either is waited for.
  if (n > 1) {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    DevFloats out(m, count), in(m, count);
    CIUIC_RETURN_IF_ERROR(out.Set(input(rank, count)));
    CIUIC_ASSIGN_OR_RETURN(Request rs, c.ISend(out.get(), count, DataType::kFloat32, next));
    CIUIC_ASSIGN_OR_RETURN(Request rr, c.IRecv(in.get(), count, DataType::kFloat32, prev));
    CIUIC_RETURN_IF_ERROR(rs.Wait());
    CIUIC_RETURN_IF_ERROR(rr.Wait());
    CIUIC_ASSIGN_OR_RETURN(auto got, in.Get());
    CIUIC_DEV_EXPECT(same(got, input(prev, count)), "send/recv");
  }
  // Host input, device output (and the reverse).
  {
    std::vector<float> host_in = input(rank, count), host_out(count, -1);
    DevFloats dev(m, count);
    CIUIC_RETURN_IF_ERROR(c.AllReduce(host_in.data(), dev.get(), count, DataType::kFloat32, ReduceOp::kSum));
    CIUIC_ASSIGN_OR_RETURN(auto got, dev.Get());
    CIUIC_DEV_EXPECT(same(got, std::vector<float>(want_sum.begin(), want_sum.begin() + count)), "allreduce host to device");
    CIUIC_RETURN_IF_ERROR(dev.Set(input(rank, count)));
    CIUIC_RETURN_IF_ERROR(c.AllReduce(dev.get(), host_out.data(), count, DataType::kFloat32, ReduceOp::kSum));
    CIUIC_DEV_EXPECT(same(host_out, std::vector<float>(want_sum.begin(), want_sum.begin() + count)), "allreduce device to host");
  }
  // A fusion bucket of GPU tensors: packed on the host, the oversized one
  // all-reduced on its own, results back in device memory.
  {
    const size_t sizes[] = {3, 100, 1, 5000, 77};  // 5000 floats > the 8 KiB capacity
    std::vector<std::unique_ptr<DevFloats>> tensors;
    FusionBucket bucket(c, DataType::kFloat32, ReduceOp::kSum, 8 << 10);
    for (size_t k = 0; k < std::size(sizes); ++k) {
      tensors.push_back(std::make_unique<DevFloats>(m, sizes[k]));
      CIUIC_RETURN_IF_ERROR(tensors.back()->Set(input(rank + static_cast<int>(k), sizes[k])));
      CIUIC_RETURN_IF_ERROR(bucket.Add(tensors.back()->get(), sizes[k]));
    }
    CIUIC_RETURN_IF_ERROR(bucket.Wait());
    for (size_t k = 0; k < std::size(sizes); ++k) {
      CIUIC_ASSIGN_OR_RETURN(auto got, tensors[k]->Get());
      for (size_t i = 0; i < sizes[k]; ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += DevInput(r + static_cast<int>(k), i, salt);
        CIUIC_DEV_EXPECT(got[i] == want, "fusion bucket tensor " + std::to_string(k) + " element " + std::to_string(i));
      }
    }
  }
  return Status::Ok();
}

#undef CIUIC_DEV_EXPECT

}  // namespace ciuic::testing

#endif  // CIUIC_TESTS_UTIL_DEVICE_COLLECTIVES_H_
