// Staging of GPU-buffer calls through host mirrors (device.h).
#include "collectives/device.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "collectives/algorithms.h"
#include "collectives/nccl.h"

namespace ciuic::collectives {

namespace {
std::mutex g_testing_mu;
std::shared_ptr<DeviceMemory> g_testing;
}  // namespace

void SetDeviceMemoryForTesting(std::shared_ptr<DeviceMemory> m) {
  std::lock_guard<std::mutex> lock(g_testing_mu);
  g_testing = std::move(m);
}

std::shared_ptr<DeviceMemory> DeviceMemoryForTesting() {
  std::lock_guard<std::mutex> lock(g_testing_mu);
  return g_testing;
}

MirrorCache::~MirrorCache() {
  for (Buf& b : bufs_) {
    if (b.pinned) {
      mem_->FreeHost(b.p);
    } else {
      std::free(b.p);
    }
  }
}

StatusOr<char*> MirrorCache::Get(size_t slot, size_t bytes, int device) {
  if (slot >= bufs_.size()) bufs_.resize(slot + 1);
  Buf& b = bufs_[slot];
  if (b.bytes >= bytes && b.p != nullptr) return b.p;
  if (b.pinned) {
    mem_->FreeHost(b.p);
  } else {
    std::free(b.p);
  }
  b = Buf{};
  // Grow by half again, so a slowly growing size does not reallocate per call.
  const size_t want = std::max(bytes, b.bytes + b.bytes / 2);
  b.p = static_cast<char*>(mem_->AllocHost(want, device));
  b.pinned = b.p != nullptr;
  if (b.p == nullptr) b.p = static_cast<char*>(std::malloc(want));
  if (b.p == nullptr) {
    return Status(StatusCode::kResourceExhausted, "no host memory for a " + std::to_string(want) +
                                                      "-byte mirror of a GPU buffer");
  }
  b.bytes = want;
  return b.p;
}

void ClassifyBuffers(DeviceMemory& mem, OpDesc* d) {
  d->send_device = d->send != nullptr ? mem.DeviceOf(d->send) : -1;
  if (d->recv == d->send) {
    d->recv_device = d->send_device;
  } else {
    d->recv_device = d->recv != nullptr ? mem.DeviceOf(d->recv) : -1;
  }
}

StatusOr<Staged> StageIn(DeviceMemory& mem, MirrorCache& cache, size_t index, const OpDesc& d, int rank,
                         int nranks) {
  const CollectiveArgs args = ArgsFor(d, rank, nranks, 1);
  // The in-place layout: where a collective's input sits inside its output
  // (or the reverse) when it runs in place.
  CIUIC_ASSIGN_OR_RETURN(const BufferLayout layout, LayoutFor(args, true));
  const size_t es = DataTypeSize(d.dtype);
  const size_t in_bytes = layout.input_count * es;
  const size_t out_bytes = layout.output_count * es;
  Staged s;
  s.host = d;
  s.host.send_device = s.host.recv_device = -1;
  const bool send_dev = d.send_device >= 0 && in_bytes > 0;
  const bool recv_dev = d.recv_device >= 0 && out_bytes > 0;
  const auto sa = reinterpret_cast<uintptr_t>(d.send);
  const auto ra = reinterpret_cast<uintptr_t>(d.recv);
  const bool overlap = send_dev && recv_dev && (sa == ra || (sa < ra + out_bytes && ra < sa + in_bytes));
  if (overlap) {
    // One mirror over both ranges, at the same offsets: the host path sees
    // the aliasing the caller asked for.
    const uintptr_t lo = std::min(sa, ra);
    const uintptr_t hi = std::max(sa + in_bytes, ra + out_bytes);
    CIUIC_ASSIGN_OR_RETURN(char* m, cache.Get(2 * index, hi - lo, d.send_device));
    CIUIC_RETURN_IF_ERROR(mem.ToHost(m + (sa - lo), d.send, in_bytes, d.send_device));
    s.host.send = m + (sa - lo);
    s.host.recv = m + (ra - lo);
  } else if (send_dev && recv_dev && layout.alias != BufferLayout::Alias::kNone &&
             d.coll != Collective::kAllToAll) {
    // Both on the device, apart: the host runs the call in place on one
    // mirror (half the host memory, and no host copy from input to output).
    const bool input_inside = layout.alias == BufferLayout::Alias::kInputInOutput;
    const size_t at = layout.alias_offset * es;
    CIUIC_ASSIGN_OR_RETURN(char* m, cache.Get(2 * index, input_inside ? out_bytes : in_bytes, d.send_device));
    char* in = input_inside ? m + at : m;
    CIUIC_RETURN_IF_ERROR(mem.ToHost(in, d.send, in_bytes, d.send_device));
    s.host.send = in;
    s.host.recv = input_inside ? m : m + at;
  } else {
    if (send_dev) {
      CIUIC_ASSIGN_OR_RETURN(char* m, cache.Get(2 * index, in_bytes, d.send_device));
      CIUIC_RETURN_IF_ERROR(mem.ToHost(m, d.send, in_bytes, d.send_device));
      s.host.send = m;
    }
    if (recv_dev) {
      CIUIC_ASSIGN_OR_RETURN(char* m, cache.Get(2 * index + 1, out_bytes, d.recv_device));
      s.host.recv = m;
    }
  }
  // A buffer that is both input and output (broadcast's, in place) stays
  // one buffer on the host side too.
  if (d.send == d.recv && !send_dev && recv_dev) s.host.send = s.host.recv;
  if (d.send == d.recv && send_dev && !recv_dev) s.host.recv = const_cast<void*>(s.host.send);
  if (recv_dev) {
    s.device_out = d.recv;
    s.mirror_out = static_cast<const char*>(s.host.recv);
    s.out_bytes = out_bytes;
    s.out_device = d.recv_device;
  }
  return s;
}

size_t StagingChunkBytes(size_t bytes, size_t elem) {
  const size_t c = std::clamp<size_t>(bytes / 8, size_t{512} << 10, size_t{8} << 20);
  return std::max(elem, c / elem * elem);
}

Status CopyBack(DeviceMemory& mem, const Staged& s) {
  if (s.device_out == nullptr || s.out_bytes == 0) return Status::Ok();
  return mem.ToDevice(s.device_out, s.mirror_out, s.out_bytes, s.out_device);
}

GpuSupport DescribeGpuSupport(const Config& config) {
  GpuSupport g;
  if (config.gpu == "off") return g;
  g.looked = true;
  std::string why;
  g.driver = OpenCudaDeviceMemory(&why) != nullptr;
  g.driver_text = g.driver ? "usable" : why;
  StatusOr<std::string> v = NcclComm::Load(config.nccl_lib);
  g.nccl = v.ok();
  g.nccl_text = v.ok() ? *v + " (" + config.nccl_lib + ")" : v.status().message();
  return g;
}

#ifndef CIUIC_COLLECTIVES_CUDA
std::shared_ptr<DeviceMemory> OpenCudaDeviceMemory(std::string* why) {
  *why = "this build has no CUDA (CIUIC_WITH_CUDA=OFF)";
  return nullptr;
}
#endif

}  // namespace ciuic::collectives
