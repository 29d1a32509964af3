// The few CUDA driver entry points the collectives use on GPU buffers,
// resolved from libcuda.so.1 at run time (the library never links the
// driver: it loads on machines without one). Builds with CUDA only.
#ifndef CIUIC_COLLECTIVES_CUDA_DRIVER_H_
#define CIUIC_COLLECTIVES_CUDA_DRIVER_H_

#include <cuda.h>

#include <mutex>
#include <string>
#include <vector>

#include "ciuic/status.h"

namespace ciuic::collectives {

struct CudaDriver {
  decltype(&::cuInit) Init = nullptr;
  decltype(&::cuGetErrorString) GetErrorString = nullptr;
  decltype(&::cuPointerGetAttributes) PointerGetAttributes = nullptr;
  decltype(&::cuDeviceGet) DeviceGet = nullptr;
  decltype(&::cuDeviceGetPCIBusId) DeviceGetPCIBusId = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain = nullptr;
  decltype(&::cuCtxPushCurrent) CtxPushCurrent = nullptr;
  decltype(&::cuCtxPopCurrent) CtxPopCurrent = nullptr;
  decltype(&::cuMemcpyDtoH) MemcpyDtoH = nullptr;
  decltype(&::cuMemcpyHtoD) MemcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoHAsync) MemcpyDtoHAsync = nullptr;
  decltype(&::cuMemcpyHtoDAsync) MemcpyHtoDAsync = nullptr;
  decltype(&::cuMemHostAlloc) MemHostAlloc = nullptr;
  decltype(&::cuMemFreeHost) MemFreeHost = nullptr;
  decltype(&::cuStreamCreate) StreamCreate = nullptr;
  decltype(&::cuStreamQuery) StreamQuery = nullptr;
  decltype(&::cuStreamSynchronize) StreamSynchronize = nullptr;

  // The process's driver, loaded and initialised once. Errors:
  // kUnavailable naming what is missing.
  static StatusOr<CudaDriver*> Get();

  // "cuMemcpyDtoH: an illegal memory access..." for a failed call.
  Status Error(const char* call, CUresult r) const;

  // Makes device `device`'s primary context current on this thread for the
  // scope (retained once per device, for the life of the process).
  class Scope {
   public:
    Scope(CudaDriver& d, int device);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    const Status& status() const { return status_; }

   private:
    CudaDriver& d_;
    bool pushed_ = false;
    Status status_;
  };

 private:
  std::mutex mu_;
  std::vector<CUcontext> contexts_;  // primary context per device, retained
};

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_CUDA_DRIVER_H_
