// NCCL, loaded at run time, for collectives on GPU buffers (nccl.h).
#include "collectives/nccl.h"

#include <thread>

#include "common/log.h"

#ifdef CIUIC_COLLECTIVES_NCCL
#include <dlfcn.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "collectives/cuda_driver.h"
#endif

namespace ciuic::collectives {

#ifndef CIUIC_COLLECTIVES_NCCL

struct NcclComm::Impl {};

StatusOr<std::string> NcclComm::Load(const std::string&) {
  return UnavailableError("this build has no NCCL (CIUIC_WITH_NCCL=OFF or no nccl.h)");
}
StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(transport::Store&, const std::string&, int, int, int,
                                                     Clock::time_point) {
  return UnavailableError("this build has no NCCL (CIUIC_WITH_NCCL=OFF or no nccl.h)");
}
NcclComm::~NcclComm() = default;
bool NcclComm::Supports(const OpDesc&) const { return false; }
Status NcclComm::Run(const OpDesc&, int, int, Clock::time_point, const std::atomic<bool>*) {
  return UnavailableError("this build has no NCCL");
}

#else

namespace {

struct NcclApi {
  decltype(&::ncclGetVersion) GetVersion = nullptr;
  decltype(&::ncclGetUniqueId) GetUniqueId = nullptr;
  decltype(&::ncclCommInitRankConfig) CommInitRankConfig = nullptr;
  decltype(&::ncclCommInitRank) CommInitRank = nullptr;
  decltype(&::ncclCommGetAsyncError) CommGetAsyncError = nullptr;
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclCommAbort) CommAbort = nullptr;
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;
  decltype(&::ncclGetLastError) GetLastError = nullptr;
  decltype(&::ncclAllReduce) AllReduce = nullptr;
  decltype(&::ncclBroadcast) Broadcast = nullptr;
  decltype(&::ncclReduce) Reduce = nullptr;
  decltype(&::ncclAllGather) AllGather = nullptr;
  decltype(&::ncclReduceScatter) ReduceScatter = nullptr;
  decltype(&::ncclSend) Send = nullptr;
  decltype(&::ncclRecv) Recv = nullptr;
  decltype(&::ncclGroupStart) GroupStart = nullptr;
  decltype(&::ncclGroupEnd) GroupEnd = nullptr;
  std::string version;
};

template <typename F>
bool Sym(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

std::mutex g_load_mu;
NcclApi* g_api = nullptr;

ncclDataType_t NcclType(DataType t) {
  switch (t) {
    case DataType::kInt8: return ncclInt8;
    case DataType::kUint8: return ncclUint8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kUint32: return ncclUint32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kUint64: return ncclUint64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kBool: return ncclUint8;  // bytes: sum -> max, prod -> min (NcclOp)
    default: break;  // int16, uint16, fp8: not offered to NCCL (NcclComm::Supports)
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op, DataType t) {
  if (t == DataType::kBool && op == ReduceOp::kSum) return ncclMax;
  if (t == DataType::kBool && op == ReduceOp::kProd) return ncclMin;
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kProd: return ncclProd;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kAvg: return ncclAvg;
    default: break;  // bitwise, premul_sum: not offered to NCCL
  }
  return ncclSum;
}

}  // namespace

struct NcclComm::Impl {
  NcclApi* api = nullptr;
  CudaDriver* cuda = nullptr;
  ncclComm_t comm = nullptr;
  CUstream stream = nullptr;
  bool failed = false;

  Status Error(const char* call, ncclResult_t r) const {
    std::string last = comm != nullptr && api->GetLastError != nullptr ? api->GetLastError(comm) : "";
    return InternalError(std::string("NCCL ") + call + ": " + api->GetErrorString(r) +
                         (last.empty() ? "" : " (" + last + ")"));
  }
  // Waits until the communicator is no longer busy with a non-blocking
  // call (init, or an enqueue that returned ncclInProgress).
  Status Settle(const char* call, Clock::time_point deadline, const std::atomic<bool>* aborted) {
    for (;;) {
      ncclResult_t async = ncclSuccess;
      const ncclResult_t r = api->CommGetAsyncError(comm, &async);
      if (r != ncclSuccess) return Fail(Error(call, r));
      if (async == ncclSuccess) return Status::Ok();
      if (async != ncclInProgress) return Fail(Error(call, async));
      if (aborted != nullptr && aborted->load()) return Fail(AbortedError("communicator aborted"));
      if (Clock::now() >= deadline) {
        return Fail(DeadlineExceededError(std::string("NCCL ") + call +
                                          " did not finish within CIUIC_TIMEOUT_MS (a rank may have died or stopped)"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  // After a failure the peers may be gone or out of step: abort now
  // (local), which also stops kernels still waiting on them.
  Status Fail(Status s) {
    failed = true;
    if (comm != nullptr) (void)api->CommAbort(comm);
    comm = nullptr;
    return s;
  }
};

StatusOr<std::string> NcclComm::Load(const std::string& lib) {
  std::lock_guard<std::mutex> lock(g_load_mu);
  if (g_api != nullptr) return g_api->version;
  void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    return UnavailableError("cannot load NCCL '" + lib + "' (CIUIC_NCCL_LIB): " + (e ? e : "?"));
  }
  auto* a = new NcclApi();
  const bool ok = Sym(h, "ncclGetVersion", &a->GetVersion) && Sym(h, "ncclGetUniqueId", &a->GetUniqueId) &&
                  Sym(h, "ncclCommInitRankConfig", &a->CommInitRankConfig) &&
                  Sym(h, "ncclCommInitRank", &a->CommInitRank) &&
                  Sym(h, "ncclCommGetAsyncError", &a->CommGetAsyncError) && Sym(h, "ncclCommDestroy", &a->CommDestroy) &&
                  Sym(h, "ncclCommAbort", &a->CommAbort) && Sym(h, "ncclGetErrorString", &a->GetErrorString) &&
                  Sym(h, "ncclGetLastError", &a->GetLastError) && Sym(h, "ncclAllReduce", &a->AllReduce) &&
                  Sym(h, "ncclBroadcast", &a->Broadcast) && Sym(h, "ncclReduce", &a->Reduce) &&
                  Sym(h, "ncclAllGather", &a->AllGather) && Sym(h, "ncclReduceScatter", &a->ReduceScatter) &&
                  Sym(h, "ncclSend", &a->Send) && Sym(h, "ncclRecv", &a->Recv) &&
                  Sym(h, "ncclGroupStart", &a->GroupStart) && Sym(h, "ncclGroupEnd", &a->GroupEnd);
  int v = 0;
  if (!ok || a->GetVersion(&v) != ncclSuccess) {
    delete a;
    dlclose(h);
    return UnavailableError("'" + lib + "' (CIUIC_NCCL_LIB) is not a usable NCCL (an entry point is missing)");
  }
  // 2.28.9 is 22809 (since 2.9; before, 2803 meant 2.8.3).
  if (v < 21000) {
    delete a;
    dlclose(h);
    return UnavailableError("NCCL " + std::to_string(v) + " from '" + lib + "' is older than 2.10 (no ncclAvg)");
  }
  a->version = std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  g_api = a;  // kept for the life of the process
  return a->version;
}

StatusOr<std::unique_ptr<NcclComm>> NcclComm::Create(transport::Store& store, const std::string& key, int rank,
                                                     int nranks, int device, Clock::time_point deadline) {
  {
    std::lock_guard<std::mutex> lock(g_load_mu);
    if (g_api == nullptr) return FailedPreconditionError("NCCL is not loaded");
  }
  CIUIC_ASSIGN_OR_RETURN(CudaDriver * cuda, CudaDriver::Get());
  std::unique_ptr<NcclComm> c(new NcclComm());
  c->impl_ = std::make_unique<Impl>();
  Impl& im = *c->impl_;
  im.api = g_api;
  im.cuda = cuda;
  c->device_ = device;
  CudaDriver::Scope scope(*cuda, device);
  if (!scope.status().ok()) return scope.status();
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (rank == 0) {
    const ncclResult_t r = im.api->GetUniqueId(&id);
    if (r != ncclSuccess) return im.Error("ncclGetUniqueId", r);
    CIUIC_RETURN_IF_ERROR(store.Set(key, std::string(reinterpret_cast<const char*>(&id), sizeof(id))));
  } else {
    CIUIC_ASSIGN_OR_RETURN(std::string v, store.Get(key, std::max(timeout, std::chrono::milliseconds(1))));
    if (v.size() != sizeof(id)) return DataLossError("rank 0's NCCL id under '" + key + "' has the wrong size");
    std::memcpy(&id, v.data(), sizeof(id));
  }
  // Non-blocking: init and calls are polled against the deadline.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t r = im.api->CommInitRankConfig(&im.comm, nranks, id, rank, &config);
  if (r == ncclInvalidArgument) {
    // A library older than our nccl.h may refuse its config: the blocking
    // init then (every rank has just published its record, so all are here).
    CIUIC_LOG(kInfo, "NCCL refused the non-blocking config (%s); blocking init", im.api->GetErrorString(r));
    im.comm = nullptr;
    r = im.api->CommInitRank(&im.comm, nranks, id, rank);
  }
  if (r != ncclSuccess && r != ncclInProgress) {
    im.comm = nullptr;
    return im.Error("ncclCommInitRank", r);
  }
  CIUIC_RETURN_IF_ERROR(im.Settle("ncclCommInitRankConfig", deadline, nullptr));
  // A blocking stream: NCCL's work waits for what the caller queued on the
  // legacy default stream (a cudaMemcpy from pageable memory returns before
  // its DMA is done, so a non-blocking stream would read stale input).
  const CUresult cr = cuda->StreamCreate(&im.stream, CU_STREAM_DEFAULT);
  if (cr != CUDA_SUCCESS) return cuda->Error("cuStreamCreate", cr);
  return c;
}

NcclComm::~NcclComm() {
  if (impl_ == nullptr || impl_->comm == nullptr) return;
  CudaDriver::Scope scope(*impl_->cuda, device_);
  if (impl_->api->CommDestroy(impl_->comm) == ncclInProgress) {
    (void)impl_->Settle("ncclCommDestroy", Clock::now() + std::chrono::seconds(10), nullptr);
  }
}

bool NcclComm::Supports(const OpDesc& d) const {
  if (impl_ == nullptr || impl_->failed) return false;
  switch (d.coll) {
    case Collective::kBarrier:
    case Collective::kSend:
    case Collective::kRecv:
      return false;  // no buffers / matched by the host queue: host copies
    default:
      break;
  }
  // Types and ops NCCL has no exact counterpart for run on host copies
  // with ciuic's kernels (int16, uint16; fp8 rounded as ciuic rounds it;
  // bitwise ops; premul_sum's factor).
  switch (d.dtype) {
    case DataType::kInt16:
    case DataType::kUint16:
    case DataType::kFloat8E4M3:
    case DataType::kFloat8E5M2: return false;
    default: break;
  }
  switch (d.op) {
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
    case ReduceOp::kPremulSum: return false;
    default: break;
  }
  // Both buffers on our device (a buffer a rank does not use, reduce's
  // output off the root, counts as such).
  const bool send_ok = d.send_device == device_ || d.send == nullptr;
  const bool recv_ok = d.recv_device == device_ || d.recv == nullptr;
  return send_ok && recv_ok;
}

Status NcclComm::Run(const OpDesc& d, int rank, int nranks, Clock::time_point deadline,
                     const std::atomic<bool>* aborted) {
  Impl& im = *impl_;
  NcclApi& a = *im.api;
  CudaDriver::Scope scope(*im.cuda, device_);
  CIUIC_RETURN_IF_ERROR(scope.status());
  const ncclDataType_t t = NcclType(d.dtype);
  const ncclRedOp_t op = NcclOp(d.op, d.dtype);
  const size_t es = DataTypeSize(d.dtype);
  auto* s = static_cast<cudaStream_t>(static_cast<void*>(im.stream));
  const char* send = static_cast<const char*>(d.send);
  char* recv = static_cast<char*>(d.recv);
  ncclResult_t r = ncclSuccess;
  const char* call = "";
  // Grouped calls: every ncclResult is checked after the group.
  auto group = [&](auto&& body) {
    ncclResult_t g = a.GroupStart();
    if (g != ncclSuccess) return g;
    const ncclResult_t b = body();
    g = a.GroupEnd();
    return b != ncclSuccess ? b : g;
  };
  switch (d.coll) {
    case Collective::kAllReduce:
      call = "ncclAllReduce";
      r = a.AllReduce(send, recv, d.count, t, op, im.comm, s);
      break;
    case Collective::kBroadcast:
      call = "ncclBroadcast";
      r = a.Broadcast(send, recv, d.count, t, d.root, im.comm, s);
      break;
    case Collective::kReduce:
      call = "ncclReduce";
      r = a.Reduce(send, rank == d.root ? recv : nullptr, d.count, t, op, d.root, im.comm, s);
      break;
    case Collective::kAllGather:
      call = "ncclAllGather";
      r = a.AllGather(send, recv, d.count, t, im.comm, s);
      break;
    case Collective::kReduceScatter:
      call = "ncclReduceScatter";
      r = a.ReduceScatter(send, recv, d.count, t, op, im.comm, s);
      break;
    case Collective::kAllToAll:
      call = "ncclSend/ncclRecv (all-to-all)";
      r = group([&] {
        const size_t block = d.count * es;
        for (int p = 0; p < nranks; ++p) {
          ncclResult_t x = a.Send(send + p * block, d.count, t, p, im.comm, s);
          if (x == ncclSuccess || x == ncclInProgress) x = a.Recv(recv + p * block, d.count, t, p, im.comm, s);
          if (x != ncclSuccess && x != ncclInProgress) return x;
        }
        return ncclSuccess;
      });
      break;
    case Collective::kAllGatherv:
      call = "ncclBroadcast (all-gatherv)";
      r = group([&] {
        size_t off = 0;
        for (int p = 0; p < nranks; ++p) {
          const ncclResult_t x = a.Broadcast(p == rank ? send : recv + off * es, recv + off * es, d.counts[p], t, p,
                                             im.comm, s);
          if (x != ncclSuccess && x != ncclInProgress) return x;
          off += d.counts[p];
        }
        return ncclSuccess;
      });
      break;
    case Collective::kReduceScatterv:
      call = "ncclReduce (reduce-scatterv)";
      r = group([&] {
        size_t off = 0;
        for (int p = 0; p < nranks; ++p) {
          const ncclResult_t x = a.Reduce(send + off * es, p == rank ? recv : nullptr, d.counts[p], t, op, p,
                                          im.comm, s);
          if (x != ncclSuccess && x != ncclInProgress) return x;
          off += d.counts[p];
        }
        return ncclSuccess;
      });
      break;
    default:
      return InternalError("NCCL cannot run this collective");
  }
  if (r != ncclSuccess && r != ncclInProgress) return im.Fail(im.Error(call, r));
  CIUIC_RETURN_IF_ERROR(im.Settle(call, deadline, aborted));
  // Wait for the stream, watching NCCL's error state and our deadline.
  for (;;) {
    const CUresult q = im.cuda->StreamQuery(im.stream);
    if (q == CUDA_SUCCESS) return Status::Ok();
    if (q != CUDA_ERROR_NOT_READY) return im.Fail(im.cuda->Error("cuStreamQuery", q));
    CIUIC_RETURN_IF_ERROR(im.Settle(call, deadline, aborted));
    if (Clock::now() >= deadline) {
      return im.Fail(DeadlineExceededError(std::string(call) +
                                           " did not complete within CIUIC_TIMEOUT_MS (a rank may have died or stopped)"));
    }
    std::this_thread::yield();
  }
}

#endif  // CIUIC_COLLECTIVES_NCCL

}  // namespace ciuic::collectives
