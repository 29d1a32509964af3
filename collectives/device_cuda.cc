// CUDA device memory for the collectives (device.h) through the driver API
// loaded at run time (cuda_driver.h).
#include <dlfcn.h>
#include <sys/stat.h>

#include <map>
#include <utility>

#include "collectives/cuda_driver.h"
#include "collectives/device.h"
#include "common/log.h"

namespace ciuic::collectives {

namespace {
bool Exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

template <typename F>
bool Resolve(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}
}  // namespace

StatusOr<CudaDriver*> CudaDriver::Get() {
  static CudaDriver* driver = nullptr;
  static Status error;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      error = UnavailableError(std::string("cannot load the CUDA driver (libcuda.so.1): ") + (e ? e : "?"));
      return;
    }
    auto* d = new CudaDriver();
    const bool ok = Resolve(lib, "cuInit", &d->Init) && Resolve(lib, "cuGetErrorString", &d->GetErrorString) &&
                    Resolve(lib, "cuPointerGetAttributes", &d->PointerGetAttributes) &&
                    Resolve(lib, "cuDeviceGet", &d->DeviceGet) &&
                    Resolve(lib, "cuDeviceGetPCIBusId", &d->DeviceGetPCIBusId) &&
                    Resolve(lib, "cuDevicePrimaryCtxRetain", &d->DevicePrimaryCtxRetain) &&
                    Resolve(lib, "cuCtxPushCurrent_v2", &d->CtxPushCurrent) &&
                    Resolve(lib, "cuCtxPopCurrent_v2", &d->CtxPopCurrent) &&
                    Resolve(lib, "cuMemcpyDtoH_v2", &d->MemcpyDtoH) && Resolve(lib, "cuMemcpyHtoD_v2", &d->MemcpyHtoD) &&
                    Resolve(lib, "cuMemcpyDtoHAsync_v2", &d->MemcpyDtoHAsync) &&
                    Resolve(lib, "cuMemcpyHtoDAsync_v2", &d->MemcpyHtoDAsync) &&
                    Resolve(lib, "cuMemHostAlloc", &d->MemHostAlloc) && Resolve(lib, "cuMemFreeHost", &d->MemFreeHost) &&
                    Resolve(lib, "cuStreamCreate", &d->StreamCreate) && Resolve(lib, "cuStreamQuery", &d->StreamQuery) &&
                    Resolve(lib, "cuStreamSynchronize", &d->StreamSynchronize);
    if (!ok) {
      error = UnavailableError("the CUDA driver (libcuda.so.1) lacks an entry point the collectives need");
      delete d;
      return;
    }
    const CUresult r = d->Init(0);
    if (r != CUDA_SUCCESS) {
      error = d->Error("cuInit", r);
      error = UnavailableError(error.message());
      delete d;
      return;
    }
    driver = d;  // kept for the life of the process (the driver too)
  });
  if (driver == nullptr) return error;
  return driver;
}

Status CudaDriver::Error(const char* call, CUresult r) const {
  const char* s = nullptr;
  if (GetErrorString == nullptr || GetErrorString(r, &s) != CUDA_SUCCESS || s == nullptr) s = "unknown error";
  return InternalError(std::string(call) + ": " + s + " (CUresult " + std::to_string(static_cast<int>(r)) + ")");
}

CudaDriver::Scope::Scope(CudaDriver& d, int device) : d_(d) {
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> lock(d.mu_);
    if (static_cast<size_t>(device) >= d.contexts_.size()) d.contexts_.resize(device + 1, nullptr);
    ctx = d.contexts_[device];
    if (ctx == nullptr) {
      CUdevice dev = 0;
      CUresult r = d.DeviceGet(&dev, device);
      if (r == CUDA_SUCCESS) r = d.DevicePrimaryCtxRetain(&ctx, dev);
      if (r != CUDA_SUCCESS) {
        status_ = d.Error("cuDevicePrimaryCtxRetain", r);
        return;
      }
      d.contexts_[device] = ctx;
    }
  }
  const CUresult r = d.CtxPushCurrent(ctx);
  if (r != CUDA_SUCCESS) {
    status_ = d.Error("cuCtxPushCurrent", r);
    return;
  }
  pushed_ = true;
}

CudaDriver::Scope::~Scope() {
  if (pushed_) {
    CUcontext popped = nullptr;
    (void)d_.CtxPopCurrent(&popped);
  }
}

namespace {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  explicit CudaDeviceMemory(CudaDriver& d) : d_(d) {}

  int DeviceOf(const void* p) override {
    CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
    unsigned int type = 0;
    unsigned int managed = 0;
    int ordinal = -1;
    void* data[3] = {&type, &managed, &ordinal};
    // Memory the driver does not know gives CUDA_SUCCESS and type 0.
    if (d_.PointerGetAttributes(3, attrs, data, reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS) return -1;
    if (type != CU_MEMORYTYPE_DEVICE || managed != 0) return -1;
    return ordinal;
  }

  Status ToHost(void* host, const void* dev, size_t bytes, int device) override {
    if (bytes == 0) return Status::Ok();
    CudaDriver::Scope scope(d_, device);
    CIUIC_RETURN_IF_ERROR(scope.status());
    const CUresult r = d_.MemcpyDtoH(host, reinterpret_cast<CUdeviceptr>(dev), bytes);
    return r == CUDA_SUCCESS ? Status::Ok() : d_.Error("cuMemcpyDtoH", r);
  }

  Status ToDevice(void* dev, const void* host, size_t bytes, int device) override {
    if (bytes == 0) return Status::Ok();
    CudaDriver::Scope scope(d_, device);
    CIUIC_RETURN_IF_ERROR(scope.status());
    const CUresult r = d_.MemcpyHtoD(reinterpret_cast<CUdeviceptr>(dev), host, bytes);
    return r == CUDA_SUCCESS ? Status::Ok() : d_.Error("cuMemcpyHtoD", r);
  }

  Status ToHostAsync(void* host, const void* dev, size_t bytes, int device, int lane) override {
    if (bytes == 0) return Status::Ok();
    CudaDriver::Scope scope(d_, device);
    CIUIC_RETURN_IF_ERROR(scope.status());
    CIUIC_ASSIGN_OR_RETURN(CUstream s, Lane(device, lane, true));
    const CUresult r = d_.MemcpyDtoHAsync(host, reinterpret_cast<CUdeviceptr>(dev), bytes, s);
    return r == CUDA_SUCCESS ? Status::Ok() : d_.Error("cuMemcpyDtoHAsync", r);
  }

  Status ToDeviceAsync(void* dev, const void* host, size_t bytes, int device, int lane) override {
    if (bytes == 0) return Status::Ok();
    CudaDriver::Scope scope(d_, device);
    CIUIC_RETURN_IF_ERROR(scope.status());
    CIUIC_ASSIGN_OR_RETURN(CUstream s, Lane(device, lane, true));
    const CUresult r = d_.MemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dev), host, bytes, s);
    return r == CUDA_SUCCESS ? Status::Ok() : d_.Error("cuMemcpyHtoDAsync", r);
  }

  Status WaitLane(int device, int lane) override {
    CIUIC_ASSIGN_OR_RETURN(CUstream s, Lane(device, lane, false));
    if (s == nullptr) return Status::Ok();
    CudaDriver::Scope scope(d_, device);
    CIUIC_RETURN_IF_ERROR(scope.status());
    const CUresult r = d_.StreamSynchronize(s);
    return r == CUDA_SUCCESS ? Status::Ok() : d_.Error("cuStreamSynchronize", r);
  }

  void* AllocHost(size_t bytes, int device) override {
    CudaDriver::Scope scope(d_, device < 0 ? 0 : device);
    if (!scope.status().ok()) return nullptr;
    void* p = nullptr;
    if (d_.MemHostAlloc(&p, bytes, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS) return nullptr;
    return p;
  }

  void FreeHost(void* p) override {
    if (p != nullptr) (void)d_.MemFreeHost(p);
  }

  std::string Identity(int device) override {
    CUdevice dev = 0;
    char bus[64] = {0};
    if (d_.DeviceGet(&dev, device) != CUDA_SUCCESS || d_.DeviceGetPCIBusId(bus, sizeof(bus), dev) != CUDA_SUCCESS) {
      return "cuda" + std::to_string(device);
    }
    return bus;
  }

  std::string name() const override { return "cuda"; }

 private:
  // The stream of (device, lane), made on first use (`make`) in the
  // device's primary context (current in the caller's scope): a blocking
  // stream, so its copies come after work on the legacy default stream.
  StatusOr<CUstream> Lane(int device, int lane, bool make) {
    std::lock_guard<std::mutex> lock(mu_);
    CUstream& s = lanes_[{device, lane}];
    if (s == nullptr && make) {
      const CUresult r = d_.StreamCreate(&s, CU_STREAM_DEFAULT);
      if (r != CUDA_SUCCESS) {
        s = nullptr;
        return d_.Error("cuStreamCreate", r);
      }
    }
    return s;
  }

  CudaDriver& d_;
  std::mutex mu_;
  std::map<std::pair<int, int>, CUstream> lanes_;  // kept for the process's life
};

}  // namespace

std::shared_ptr<DeviceMemory> OpenCudaDeviceMemory(std::string* why) {
  if (!Exists("/dev/nvidiactl") && !Exists("/proc/driver/nvidia/version") && !Exists("/dev/dxg")) {
    *why = "no NVIDIA driver on this machine (no /dev/nvidiactl)";
    return nullptr;
  }
  StatusOr<CudaDriver*> d = CudaDriver::Get();
  if (!d.ok()) {
    *why = d.status().message();
    return nullptr;
  }
  return std::make_shared<CudaDeviceMemory>(**d);
}

}  // namespace ciuic::collectives
