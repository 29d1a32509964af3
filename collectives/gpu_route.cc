// GpuRoute: see gpu_route.h.
#include "collectives/gpu_route.h"

#include <unistd.h>

#include <algorithm>
#include <map>

#include "common/log.h"

namespace ciuic::collectives {
namespace {

std::string HostName() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

GpuRoute::GpuRoute(const Config& config, int rank, int size, transport::Store& store, std::string prefix,
                   std::shared_ptr<DeviceMemory> mem)
    : config_(config),
      rank_(rank),
      size_(size),
      store_(store),
      prefix_(std::move(prefix)),
      mem_(mem),
      mirrors_(std::move(mem)) {
  if (config_.gpu == "host") route_ = Route::kHost;
}

StatusOr<std::unique_ptr<GpuRoute>> GpuRoute::Open(const Config& config, int rank, int size, transport::Store& store,
                                                   const std::string& prefix) {
  if (config.gpu == "off") return std::unique_ptr<GpuRoute>();
  std::string why;
  std::shared_ptr<DeviceMemory> mem = DeviceMemoryForTesting();
  if (mem == nullptr) mem = OpenCudaDeviceMemory(&why);
  if (mem == nullptr) {
    if (config.gpu == "nccl") {
      return FailedPreconditionError("rank " + std::to_string(rank) + ": CIUIC_GPU=nccl: " + why);
    }
    CIUIC_LOG(kInfo, "GPU buffers: not looked for: %s", why.c_str());
    return std::unique_ptr<GpuRoute>();
  }
  if (config.gpu == "nccl") {
    StatusOr<std::string> v = NcclComm::Load(config.nccl_lib);
    if (!v.ok()) return FailedPreconditionError("rank " + std::to_string(rank) + ": CIUIC_GPU=nccl: " + v.status().message());
  }
  CIUIC_LOG(kInfo, "GPU buffers: recognised (%s driver); CIUIC_GPU=%s", mem->name().c_str(), config.gpu.c_str());
  return std::unique_ptr<GpuRoute>(new GpuRoute(config, rank, size, store, prefix, std::move(mem)));
}

void GpuRoute::Classify(OpDesc* d, int rank) const {
  ClassifyBuffers(*mem_, d);
  // A reduce's output off the root is unused (may be anything): it takes
  // the input's kind, so every rank with device input picks the same route
  // (NCCL or host copies) as the root.
  if (d->coll == Collective::kReduce && rank != d->root) d->recv_device = d->send_device;
}

Status GpuRoute::Decide(const OpDesc& d, Clock::time_point deadline) {
  // Every rank publishes whether NCCL loads, its host and its GPU; every
  // rank then decides the same from the same records.
  const int dev = d.send_device >= 0 ? d.send_device : d.recv_device;
  StatusOr<std::string> version = NcclComm::Load(config_.nccl_lib);
  if (!version.ok()) CIUIC_LOG(kInfo, "GPU buffers: %s", version.status().message().c_str());
  const std::string mine = std::string(version.ok() ? "1" : "0") + " " + HostName() + "/" + mem_->Identity(dev);
  CIUIC_RETURN_IF_ERROR(store_.Set(prefix_ + "/gpu/" + std::to_string(rank_), mine));
  std::string why_not;
  std::map<std::string, int> holder;  // host/GPU -> first rank on it
  for (int r = 0; r < size_; ++r) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    StatusOr<std::string> v = store_.Get(prefix_ + "/gpu/" + std::to_string(r), std::max(left, std::chrono::milliseconds(1)));
    if (!v.ok()) {
      return Status(v.status().code(), "rank " + std::to_string(r) +
                                            " has not reached this collective on GPU buffers (every rank must pass "
                                            "device memory to the same calls): " + v.status().message());
    }
    // "<0|1> host/gpu", from a peer: anything else is that peer's fault,
    // not a reason to throw.
    if (v->size() < 3 || ((*v)[0] != '0' && (*v)[0] != '1') || (*v)[1] != ' ') {
      return DataLossError("rank " + std::to_string(r) + " published a malformed GPU record (" +
                           std::to_string(v->size()) + " bytes): another ciuic version or a stranger in the job?");
    }
    const std::string where = v->substr(2);
    if (why_not.empty() && (*v)[0] != '1') why_not = "rank " + std::to_string(r) + " cannot load NCCL";
    auto [it, fresh] = holder.emplace(where, r);
    if (why_not.empty() && !fresh) {
      why_not = "ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " share GPU " + where +
                " (NCCL takes one rank per GPU)";
    }
  }
  if (!why_not.empty()) {
    if (config_.gpu == "nccl") return FailedPreconditionError("CIUIC_GPU=nccl: " + why_not);
    CIUIC_LOG(kInfo, "GPU buffers: through host copies: %s", why_not.c_str());
    route_ = Route::kHost;
    return Status::Ok();
  }
  CIUIC_ASSIGN_OR_RETURN(nccl_, NcclComm::Create(store_, prefix_ + "/gpu/nccl-id", rank_, size_, dev, deadline));
  CIUIC_LOG(kInfo, "GPU buffers: NCCL %s on GPU %s", version->c_str(), mine.substr(2).c_str());
  route_ = Route::kNccl;
  return Status::Ok();
}

Status GpuRoute::Execute(const OpDesc& d, Clock::time_point deadline, const std::atomic<bool>* aborted,
                         const HostCollective& host, std::string* ran) {
  if (route_ == Route::kUndecided) CIUIC_RETURN_IF_ERROR(Decide(d, deadline));
  if (nccl_ != nullptr && nccl_->Supports(d)) {
    *ran = std::string("nccl for ") + CollectiveName(d.coll) + ": GPU buffers, every rank on a GPU of its own";
    return nccl_->Run(d, rank_, size_, deadline, aborted);
  }
  const size_t bytes = d.count * DataTypeSize(d.dtype);
  if (d.coll == Collective::kAllReduce && d.send_device >= 0 && d.recv_device == d.send_device &&
      bytes >= kPipelinedStagingMinBytes) {
    return AllReduceStagedPipelined(d, deadline, host);
  }
  CIUIC_ASSIGN_OR_RETURN(Staged st, StageIn(0, d));
  CIUIC_RETURN_IF_ERROR(host(st.host, deadline));
  return CopyBack(st);
}

Status GpuRoute::AllReduceStagedPipelined(const OpDesc& d, Clock::time_point deadline, const HostCollective& host) {
  const size_t es = DataTypeSize(d.dtype);
  const size_t bytes = d.count * es;
  const size_t chunk = StagingChunkBytes(bytes, es);
  const int dev = d.send_device;
  DeviceMemory& mem = *mem_;
  CIUIC_ASSIGN_OR_RETURN(char* m, mirrors_.Get(0, bytes, dev));
  const char* src = static_cast<const char*>(d.send);
  char* dst = static_cast<char*>(d.recv);
  constexpr int kIn = 0, kOut = 1;  // copy lanes
  // Whatever happens, no copy may still run into or out of the mirror
  // when this returns.
  auto drain = [&](Status s) {
    Status a = mem.WaitLane(dev, kIn);
    Status b = mem.WaitLane(dev, kOut);
    if (s.ok()) s = !a.ok() ? a : b;
    return s;
  };
  Status s = mem.ToHostAsync(m, src, std::min(chunk, bytes), dev, kIn);
  for (size_t off = 0; s.ok() && off < bytes; off += chunk) {
    const size_t n = std::min(chunk, bytes - off);
    s = mem.WaitLane(dev, kIn);  // chunk `off` is on the host
    if (s.ok() && off + n < bytes) s = mem.ToHostAsync(m + off + n, src + off + n, std::min(chunk, bytes - off - n), dev, kIn);
    if (!s.ok()) break;
    OpDesc h = d;
    h.send_device = h.recv_device = -1;
    h.send = h.recv = m + off;
    h.count = n / es;
    s = host(h, deadline);
    if (s.ok()) s = mem.ToDeviceAsync(dst + off, m + off, n, dev, kOut);
  }
  return drain(s);
}

}  // namespace ciuic::collectives
