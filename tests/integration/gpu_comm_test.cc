// Collectives on CUDA device buffers, with forked ranks on one machine's
// GPU(s): through host copies when ranks share a GPU, through NCCL when a
// rank has its own; CIUIC_GPU=nccl names the ranks that share one. Skips
// with the reason where there is no GPU (CIUIC_TEST_REQUIRE_CUDA=1 makes
// that a failure). CUDA is used only in the forked ranks: a process that
// initialised CUDA cannot use it in a child.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "ciuic/collectives.h"
#include "collectives/nccl.h"
#include "tests/util/device_collectives.h"
#include "tests/util/multiproc.h"

namespace ciuic {
namespace {

using std::chrono::milliseconds;

class CudaMemory final : public testing::TestDeviceMemory {
 public:
  void* Alloc(size_t bytes) override {
    void* p = nullptr;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
  }
  void Free(void* p) override { cudaFree(p); }
  Status Upload(void* dev, const void* host, size_t bytes) override { return Check(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice)); }
  Status Download(void* host, const void* dev, size_t bytes) override { return Check(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost)); }

 private:
  static Status Check(cudaError_t e) { return e == cudaSuccess ? Status::Ok() : InternalError(cudaGetErrorString(e)); }
};

std::string Describe(const std::vector<testing::RankResult>& results) {
  std::string s;
  for (const auto& r : results) s += r.Describe() + "\n";
  return s;
}

// Why there is no usable GPU ("" when there is one), asked in a child.
std::string NoGpuReason() {
  auto results = testing::RunRanks(1, [](int, transport::Store&) -> Status {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) return UnavailableError(std::string("no usable CUDA device: ") + cudaGetErrorString(e));
    if (n == 0) return UnavailableError("no CUDA device");
    return Status::Ok();
  }, milliseconds(60000));
  return results[0].ok() ? "" : results[0].message;
}

class GpuCollectives : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = NoGpuReason();
    if (why.empty()) return;
    const char* req = std::getenv("CIUIC_TEST_REQUIRE_CUDA");
    if (req != nullptr && std::string(req) == "1") FAIL() << "CIUIC_TEST_REQUIRE_CUDA=1 but " << why;
    GTEST_SKIP() << why;
  }
};

StatusOr<std::unique_ptr<Communicator>> MakeComm(int rank, int n, transport::Store& store, const std::string& transport,
                                                 const std::string& gpu) {
  CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
  config.transport = transport;
  config.gpu = gpu;
  config.timeout_ms = 60000;
  std::shared_ptr<transport::Store> s(&store, [](transport::Store*) {});
  return Communicator::CreateWithStore(rank, n, s, config);
}

// Ranks on one GPU: NCCL cannot take them, so calls run on host copies.
TEST_F(GpuCollectives, RanksSharingAGpuRunOnHostCopies) {
  for (const char* transport : {"shm", "tcp"}) {
    auto results = testing::RunRanks(3, [&](int rank, transport::Store& store) -> Status {
      if (cudaSetDevice(0) != cudaSuccess) return InternalError("cudaSetDevice(0) failed");
      CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 3, store, transport, "auto"));
      CudaMemory mem;
      for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
        CIUIC_RETURN_IF_ERROR(testing::CheckCollectivesOnDevice(*comm, mem, count, static_cast<int>(count % 5)));
        if (comm->last_algorithm().rfind("nccl", 0) == 0) return InternalError("NCCL ran for ranks sharing a GPU");
      }
      return Status::Ok();
    }, milliseconds(240000));
    for (const auto& r : results) EXPECT_TRUE(r.ok()) << transport << "\n" << Describe(results);
  }
}

// CIUIC_GPU=nccl with ranks sharing a GPU: every rank is told which.
TEST_F(GpuCollectives, NcclModeNamesTheRanksSharingAGpu) {
  auto results = testing::RunRanks(2, [&](int rank, transport::Store& store) -> Status {
    if (cudaSetDevice(0) != cudaSuccess) return InternalError("cudaSetDevice(0) failed");
    StatusOr<std::unique_ptr<Communicator>> comm = MakeComm(rank, 2, store, "shm", "nccl");
    if (!comm.ok()) {
      // No NCCL on this machine: the creation names the knob.
      if (comm.status().message().find("CIUIC_GPU=nccl") == std::string::npos) return comm.status();
      return Status::Ok();
    }
    CudaMemory mem;
    testing::DevFloats buf(mem, 16);
    Status s = (*comm)->AllReduce(buf.get(), buf.get(), 16, DataType::kFloat32, ReduceOp::kSum);
    if (s.ok()) return InternalError("NCCL accepted two ranks on one GPU");
    if (s.message().find("share GPU") == std::string::npos || s.message().find("ranks 0 and 1") == std::string::npos) {
      return InternalError("the error does not name the ranks sharing the GPU: " + s.ToString());
    }
    return Status::Ok();
  }, milliseconds(120000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << Describe(results);
}

// One rank with a GPU of its own: NCCL runs every collective it has (the
// only NCCL case one GPU allows; several ranks need several GPUs).
TEST_F(GpuCollectives, NcclRunsForARankWithItsOwnGpu) {
  // Skipped with the reason where NCCL does not load (CIUIC_NCCL_LIB), unless
  // CIUIC_TEST_REQUIRE_NCCL=1.
  auto probe = testing::RunRanks(1, [](int, transport::Store&) -> Status {
    CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
    return collectives::NcclComm::Load(config.nccl_lib).status();
  }, milliseconds(60000));
  if (!probe[0].ok()) {
    const char* req = std::getenv("CIUIC_TEST_REQUIRE_NCCL");
    if (req != nullptr && std::string(req) == "1") FAIL() << "CIUIC_TEST_REQUIRE_NCCL=1 but " << probe[0].message;
    GTEST_SKIP() << probe[0].message;
  }
  auto results = testing::RunRanks(1, [&](int rank, transport::Store& store) -> Status {
    if (cudaSetDevice(0) != cudaSuccess) return InternalError("cudaSetDevice(0) failed");
    CIUIC_ASSIGN_OR_RETURN(auto comm, MakeComm(rank, 1, store, "shm", "auto"));
    CudaMemory mem;
    {
      testing::DevFloats probe(mem, 4);
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(probe.get(), probe.get(), 4, DataType::kFloat32, ReduceOp::kSum));
    }
    if (comm->last_algorithm().rfind("nccl", 0) != 0) {
      return InternalError("NCCL loads but did not run: " + comm->last_algorithm());
    }
    for (size_t count : {size_t{1}, size_t{1000}, size_t{1} << 20}) {
      CIUIC_RETURN_IF_ERROR(testing::CheckCollectivesOnDevice(*comm, mem, count, static_cast<int>(count % 5)));
    }
    // Input still being written on the legacy default stream when the call
    // is made (a 1 GiB memset, ~0.3 ms): the call sees all of it.
    const size_t bytes = size_t{1} << 30;
    void* in = mem.Alloc(bytes);
    void* out = mem.Alloc(bytes);
    if (in == nullptr || out == nullptr) return InternalError("cudaMalloc of 2 GiB failed");
    for (int value : {0x11, 0x22}) {
      if (cudaMemsetAsync(in, value, bytes, nullptr) != cudaSuccess) return InternalError("cudaMemsetAsync failed");
      CIUIC_RETURN_IF_ERROR(comm->AllReduce(in, out, bytes, DataType::kUint8, ReduceOp::kMax));
      std::vector<unsigned char> host(bytes);
      CIUIC_RETURN_IF_ERROR(mem.Download(host.data(), out, bytes));
      for (size_t i = 0; i < bytes; i += 4093) {
        if (host[i] != value) {
          return InternalError("byte " + std::to_string(i) + " is " + std::to_string(host[i]) +
                               ": the all-reduce read its input before the memset on the default stream finished");
        }
      }
    }
    mem.Free(in);
    mem.Free(out);
    return Status::Ok();
  }, milliseconds(120000));
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << Describe(results);
}

}  // namespace
}  // namespace ciuic
