// FusionBucket: see include/ciuic/collectives.h.
#include <algorithm>
#include <cstring>

#include "ciuic/collectives.h"
#include "collectives/comm_impl.h"
#include "collectives/device.h"

namespace ciuic {

struct FusionBucket::Pack {
  std::vector<char> data;
  size_t bytes = 0;
  struct Entry {
    void* tensor;
    size_t offset;
    size_t bytes;
    int device;  // GPU ordinal of the tensor, -1 for host memory
  };
  std::vector<Entry> entries;
  Request request;
  bool sent = false;
};

FusionBucket::FusionBucket(Communicator& comm, DataType dtype, ReduceOp op, size_t capacity_bytes)
    : comm_(comm), dtype_(dtype), op_(op), capacity_(capacity_bytes) {
  if (capacity_ == 0) {
    auto config = Config::FromEnv();
    capacity_ = config.ok() ? config->buffer_size : (4u << 20);
  }
  const size_t es = DataTypeSize(dtype_);
  if (es > 0) capacity_ = capacity_ / es * es;
  if (capacity_ == 0) capacity_ = es;
}

FusionBucket::~FusionBucket() { (void)Wait(); }

Status FusionBucket::Add(void* tensor, size_t count) {
  const size_t es = DataTypeSize(dtype_);
  if (es == 0) return InvalidArgumentError("FusionBucket: unknown dtype");
  if (tensor == nullptr && count > 0) return InvalidArgumentError("FusionBucket::Add: tensor is null");
  if (count == 0) return Status::Ok();
  const size_t bytes = count * es;
  if (bytes > capacity_) {
    CIUIC_ASSIGN_OR_RETURN(Request r, comm_.IAllReduce(tensor, tensor, count, dtype_, op_));
    solo_.push_back(std::move(r));
    ++issued_;
    return Status::Ok();
  }
  if (used_ > 0 && !packs_[used_ - 1]->sent && packs_[used_ - 1]->bytes + bytes > capacity_) {
    CIUIC_RETURN_IF_ERROR(Flush());
  }
  if (used_ == 0 || packs_[used_ - 1]->sent) {
    if (used_ == packs_.size()) packs_.push_back(std::make_unique<Pack>());
    Pack& p = *packs_[used_++];
    p.bytes = 0;
    p.entries.clear();
    p.sent = false;
  }
  Pack& p = *packs_[used_ - 1];
  // Packs grow to what they hold (doubling, at most the capacity): a large
  // capacity costs nothing until it is used, and reused packs keep their size.
  if (p.data.size() < p.bytes + bytes) p.data.resize(std::min(capacity_, std::max(p.bytes + bytes, 2 * p.data.size())));
  collectives::DeviceMemory* mem = collectives::CommImpl::Of(comm_).device_memory();
  const int device = mem != nullptr ? mem->DeviceOf(tensor) : -1;
  if (device >= 0) {
    CIUIC_RETURN_IF_ERROR(mem->ToHost(p.data.data() + p.bytes, tensor, bytes, device));
  } else {
    std::memcpy(p.data.data() + p.bytes, tensor, bytes);
  }
  p.entries.push_back({tensor, p.bytes, bytes, device});
  p.bytes += bytes;
  return Status::Ok();
}

Status FusionBucket::Flush() {
  if (used_ == 0) return Status::Ok();
  Pack& p = *packs_[used_ - 1];
  if (p.sent || p.bytes == 0) return Status::Ok();
  const size_t es = DataTypeSize(dtype_);
  CIUIC_ASSIGN_OR_RETURN(p.request, comm_.IAllReduce(p.data.data(), p.data.data(), p.bytes / es, dtype_, op_));
  p.sent = true;
  ++issued_;
  return Status::Ok();
}

Status FusionBucket::Wait() {
  Status first = Flush();
  for (size_t i = 0; i < used_; ++i) {
    Pack& p = *packs_[i];
    if (!p.sent) continue;
    Status s = p.request.Wait();
    if (s.ok()) {
      for (const auto& e : p.entries) {
        if (e.device >= 0) {
          s = collectives::CommImpl::Of(comm_).device_memory()->ToDevice(e.tensor, p.data.data() + e.offset, e.bytes, e.device);
          if (!s.ok() && first.ok()) first = s;
        } else {
          std::memcpy(e.tensor, p.data.data() + e.offset, e.bytes);
        }
      }
    } else if (first.ok()) {
      first = s;
    }
    p.sent = false;
    p.entries.clear();
    p.bytes = 0;
  }
  used_ = 0;
  for (Request& r : solo_) {
    Status s = r.Wait();
    if (!s.ok() && first.ok()) first = s;
  }
  solo_.clear();
  return first;
}

StatusOr<bool> FusionBucket::Test() {
  CIUIC_RETURN_IF_ERROR(Flush());
  // A failed request: every other one is still waited for, as in Wait.
  auto Failed = [this](const Status& s) -> Status {
    Status w = Wait();
    return w.ok() ? s : w;
  };
  auto pending = [](Request& r) -> StatusOr<bool> {
    StatusOr<bool> t = r.Test();
    if (!t.ok()) return t.status();
    return !*t;
  };
  for (size_t i = 0; i < used_; ++i) {
    if (!packs_[i]->sent) continue;
    StatusOr<bool> p = pending(packs_[i]->request);
    if (!p.ok()) return Failed(p.status());
    if (*p) return false;
  }
  for (Request& r : solo_) {
    StatusOr<bool> p = pending(r);
    if (!p.ok()) return Failed(p.status());
    if (*p) return false;
  }
  CIUIC_RETURN_IF_ERROR(Wait());
  return true;
}

}  // namespace ciuic
