// Collectives on GPU buffers: finding device memory among a call's
// buffers, and running such a call on host copies ("staging") when NCCL
// cannot take it.
//
// A call whose buffers the host cannot address (CUDA device memory) runs
// either on NCCL (collectives/nccl.h) or here: the device input is copied
// into a host mirror, the host collective runs on the mirrors, the device
// output is copied back. Mirrors keep the call's aliasing: buffers that
// overlap (in place, all-gather's input inside its output) share one mirror
// at the same offsets, so every in-place convention of the host path holds.
//
// Contract (as CUDA-aware MPI): the device data must be ready when the call
// is made (the caller synchronised the stream that wrote it); the call's
// output is in device memory when it (or its Wait) returns.
#ifndef CIUIC_COLLECTIVES_DEVICE_H_
#define CIUIC_COLLECTIVES_DEVICE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/status.h"
#include "collectives/plan.h"

namespace ciuic::collectives {

// Device memory as the collectives see it: CUDA's driver in the library, a
// fake in the tests. Thread contract: every method may be called from any
// thread.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // The ordinal of the device holding `p` when the host cannot address it;
  // -1 for host memory (also memory the driver does not know, managed
  // memory and page-locked host memory: the host reads those directly).
  virtual int DeviceOf(const void* p) = 0;
  // Blocking copies between device `device` and host memory.
  // Errors: kInternal with the driver's message.
  virtual Status ToHost(void* host, const void* dev, size_t bytes, int device) = 0;
  virtual Status ToDevice(void* dev, const void* host, size_t bytes, int device) = 0;
  // The same, queued on `lane` (0 or 1: one stream per lane and device,
  // ordered after work on the legacy default stream) and finished by
  // WaitLane; `host` must be page-locked (AllocHost) for the copy to run
  // in the background. A driver without queues may copy at once.
  virtual Status ToHostAsync(void* host, const void* dev, size_t bytes, int device, int lane) {
    (void)lane;
    return ToHost(host, dev, bytes, device);
  }
  virtual Status ToDeviceAsync(void* dev, const void* host, size_t bytes, int device, int lane) {
    (void)lane;
    return ToDevice(dev, host, bytes, device);
  }
  // Waits for every copy queued on `lane` of `device`. Errors: the copies'.
  virtual Status WaitLane(int device, int lane) {
    (void)device;
    (void)lane;
    return Status::Ok();
  }
  // Host memory for mirrors, page-locked where the driver can (faster
  // copies); nullptr when none could be had.
  virtual void* AllocHost(size_t bytes, int device) = 0;
  virtual void FreeHost(void* p) = 0;
  // What identifies device `device` across processes (its PCI bus id).
  virtual std::string Identity(int device) = 0;
  virtual std::string name() const = 0;
};

// CUDA's driver (libcuda.so.1, loaded at run time: the library does not
// link it), when this build has CUDA and the machine an NVIDIA driver
// (/dev/nvidiactl or /proc/driver/nvidia). Null otherwise, with the reason
// in *why. Opening initialises the driver (cuInit) but creates no context.
std::shared_ptr<DeviceMemory> OpenCudaDeviceMemory(std::string* why);

// What GPU buffers would get under `config` (for ciuic-info): whether the
// CUDA driver is usable, NCCL's version or why it does not load.
struct GpuSupport {
  bool looked = false;  // false: CIUIC_GPU=off
  bool driver = false;
  std::string driver_text;  // "usable" or why not
  bool nccl = false;
  std::string nccl_text;  // "2.28.9 (libnccl.so.2)" or why not
};
GpuSupport DescribeGpuSupport(const Config& config);

// Tests: communicators created from now on use `m` instead of CUDA (null:
// CUDA again).
void SetDeviceMemoryForTesting(std::shared_ptr<DeviceMemory> m);
std::shared_ptr<DeviceMemory> DeviceMemoryForTesting();

// Host buffers reused across calls (grown, never shrunk).
class MirrorCache {
 public:
  explicit MirrorCache(std::shared_ptr<DeviceMemory> mem) : mem_(std::move(mem)) {}
  ~MirrorCache();
  MirrorCache(const MirrorCache&) = delete;
  MirrorCache& operator=(const MirrorCache&) = delete;
  // Buffer `slot` with at least `bytes`. Errors: kResourceExhausted.
  StatusOr<char*> Get(size_t slot, size_t bytes, int device);

 private:
  struct Buf {
    char* p = nullptr;
    size_t bytes = 0;
    bool pinned = false;
  };
  std::shared_ptr<DeviceMemory> mem_;
  std::vector<Buf> bufs_;
};

// Marks `d->send_device` / `d->recv_device` (the ordinal, or -1) from where
// its buffers live.
void ClassifyBuffers(DeviceMemory& mem, OpDesc* d);

// A call moved onto host mirrors: `host` is the call to run; after it ran,
// CopyBack puts its output where the caller asked.
struct Staged {
  OpDesc host;
  void* device_out = nullptr;  // null: the output is host memory already
  const char* mirror_out = nullptr;
  size_t out_bytes = 0;
  int out_device = -1;
};

// Copies the device input of `d` (rank `rank` of `nranks`) into mirrors
// `2 * index` and `2 * index + 1` of `cache`. Errors: the copies', those of
// LayoutFor.
StatusOr<Staged> StageIn(DeviceMemory& mem, MirrorCache& cache, size_t index, const OpDesc& d, int rank,
                         int nranks);
Status CopyBack(DeviceMemory& mem, const Staged& s);

// Large all-reduces with both buffers on one device are staged in chunks,
// pipelined: chunk i+1 comes to the host while chunk i is all-reduced there
// and chunk i-1 goes back (two copy lanes). Every rank cuts the same
// chunks (a function of the count alone).
constexpr size_t kPipelinedStagingMinBytes = size_t{2} << 20;
// Chunk size for `bytes` of elements of `elem` bytes: bytes/8 within
// [512 KiB, 8 MiB], a multiple of the element size.
size_t StagingChunkBytes(size_t bytes, size_t elem);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_DEVICE_H_
