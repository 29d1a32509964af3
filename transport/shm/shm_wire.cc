#include "transport/shm/shm_wire.h"

#include <algorithm>
#include <climits>

#include "transport/net.h"
#include "transport/shm/shm_ring.h"

namespace ciuic::transport::shm {
namespace {

constexpr char kMagic[4] = {'C', 'I', 'S', 'H'};
constexpr uint8_t kVersion = 1;
constexpr uint8_t kTypeEndpoint = 1;
constexpr uint8_t kTypeRegion = 2;

// Bounds-checked reader of a blob.
class Reader {
 public:
  explicit Reader(const std::string& s) : p_(reinterpret_cast<const uint8_t*>(s.data())), left_(s.size()) {}
  bool U8(uint8_t* v) {
    if (left_ < 1) return false;
    *v = *p_;
    Skip(1);
    return true;
  }
  bool U16(uint16_t* v) {
    if (left_ < 2) return false;
    *v = static_cast<uint16_t>((p_[0] << 8) | p_[1]);
    Skip(2);
    return true;
  }
  bool U32(uint32_t* v) {
    if (left_ < 4) return false;
    *v = net::GetU32(p_);
    Skip(4);
    return true;
  }
  bool I32(int32_t* v) {
    uint32_t u;
    if (!U32(&u)) return false;
    *v = static_cast<int32_t>(u);
    return true;
  }
  bool U64(uint64_t* v) {
    if (left_ < 8) return false;
    *v = net::GetU64(p_);
    Skip(8);
    return true;
  }
  bool Bytes(size_t n, std::string* out) {
    if (left_ < n) return false;
    out->assign(reinterpret_cast<const char*>(p_), n);
    Skip(n);
    return true;
  }
  bool Segment(SegmentDesc* d) { return U32(&d->fd) && U64(&d->bytes) && U64(&d->inode) && U64(&d->seg_id); }
  bool done() const { return left_ == 0; }

 private:
  void Skip(size_t n) {
    p_ += n;
    left_ -= n;
  }
  const uint8_t* p_;
  size_t left_;
};

void PutSegment(std::string* s, const SegmentDesc& d) {
  net::PutU32(s, d.fd);
  net::PutU64(s, d.bytes);
  net::PutU64(s, d.inode);
  net::PutU64(s, d.seg_id);
}

std::string Header(uint8_t type, const std::string& job_id) {
  std::string s(kMagic, sizeof(kMagic));
  s.push_back(static_cast<char>(kVersion));
  s.push_back(static_cast<char>(type));
  const size_t n = std::min<size_t>(job_id.size(), 0xffff);
  s.push_back(static_cast<char>(n >> 8));
  s.push_back(static_cast<char>(n & 0xff));
  s.append(job_id, 0, n);
  return s;
}

Status ReadHeader(Reader* r, uint8_t want_type, const std::string& job_id, const char* what) {
  std::string magic, job;
  uint8_t version = 0, type = 0;
  uint16_t job_len = 0;
  if (!r->Bytes(4, &magic) || magic != std::string(kMagic, 4) || !r->U8(&version) || !r->U8(&type) ||
      !r->U16(&job_len) || !r->Bytes(job_len, &job)) {
    return InvalidArgumentError(std::string("shm: malformed ") + what + " (not an shm blob)");
  }
  if (version != kVersion) {
    return InvalidArgumentError(std::string("shm: ") + what + " has version " + std::to_string(version) +
                                ", expected " + std::to_string(kVersion));
  }
  if (type != want_type) {
    return InvalidArgumentError(std::string("shm: ") + what + " is a " +
                                (type == kTypeEndpoint ? "connection endpoint" :
                                 type == kTypeRegion   ? "memory region" : "unknown") +
                                " description");
  }
  if (job != job_id.substr(0, 0xffff)) {
    // A stranger's job id is bytes from outside.
    return InvalidArgumentError(std::string("shm: ") + what + " belongs to job '" + net::LogSafe(job) + "', this is job '" +
                                net::LogSafe(job_id) + "'");
  }
  return Status::Ok();
}

bool PidPlausible(uint32_t pid) { return pid != 0 && pid <= static_cast<uint32_t>(INT_MAX); }

}  // namespace

std::string EncodeEndpoint(const std::string& job_id, const EndpointDesc& d) {
  std::string s = Header(kTypeEndpoint, job_id);
  net::PutU32(&s, static_cast<uint32_t>(d.rank));
  net::PutU32(&s, static_cast<uint32_t>(d.peer));
  net::PutU32(&s, d.tag);
  net::PutU32(&s, d.pid);
  PutSegment(&s, d.doorbell);
  PutSegment(&s, d.ring);
  net::PutU32(&s, d.ring_entries);
  net::PutU32(&s, d.entry_bytes);
  return s;
}

StatusOr<EndpointDesc> DecodeEndpoint(const std::string& blob, const std::string& job_id) {
  Reader r(blob);
  CIUIC_RETURN_IF_ERROR(ReadHeader(&r, kTypeEndpoint, job_id, "endpoint description"));
  EndpointDesc d;
  if (!r.I32(&d.rank) || !r.I32(&d.peer) || !r.U32(&d.tag) || !r.U32(&d.pid) || !r.Segment(&d.doorbell) ||
      !r.Segment(&d.ring) || !r.U32(&d.ring_entries) || !r.U32(&d.entry_bytes) || !r.done()) {
    return InvalidArgumentError("shm: malformed endpoint description");
  }
  if (d.rank < 0 || d.peer < 0) {
    return InvalidArgumentError("shm: endpoint description names rank " + std::to_string(d.rank) + " to rank " +
                                std::to_string(d.peer));
  }
  if (d.ring_entries != kRingEntries || d.entry_bytes != kEntryBytes || d.ring.bytes < sizeof(RingShared) ||
      d.doorbell.bytes < sizeof(DoorbellShared) || !PidPlausible(d.pid)) {
    return InvalidArgumentError("shm: endpoint description of rank " + std::to_string(d.rank) +
                                " has an incompatible layout (ring " + std::to_string(d.ring_entries) + "x" +
                                std::to_string(d.entry_bytes) + " B, segments " + std::to_string(d.ring.bytes) +
                                "/" + std::to_string(d.doorbell.bytes) + " B, pid " + std::to_string(d.pid) + ")");
  }
  return d;
}

std::string EncodeRegion(const std::string& job_id, const RegionDesc& d) {
  std::string s = Header(kTypeRegion, job_id);
  net::PutU32(&s, static_cast<uint32_t>(d.rank));
  net::PutU32(&s, d.pid);
  net::PutU64(&s, d.size);
  s.push_back(static_cast<char>(d.mode));
  if (d.mode == RegionMode::kSegment) {
    PutSegment(&s, d.segment);
    net::PutU64(&s, d.offset);
  } else {
    net::PutU64(&s, d.address);
  }
  return s;
}

StatusOr<RegionDesc> DecodeRegion(const std::string& blob, const std::string& job_id) {
  Reader r(blob);
  CIUIC_RETURN_IF_ERROR(ReadHeader(&r, kTypeRegion, job_id, "region description"));
  RegionDesc d;
  uint8_t mode = 0;
  bool ok = r.I32(&d.rank) && r.U32(&d.pid) && r.U64(&d.size) && r.U8(&mode);
  if (ok && mode == static_cast<uint8_t>(RegionMode::kSegment)) {
    d.mode = RegionMode::kSegment;
    ok = r.Segment(&d.segment) && r.U64(&d.offset);
  } else if (ok && mode == static_cast<uint8_t>(RegionMode::kCaller)) {
    d.mode = RegionMode::kCaller;
    ok = r.U64(&d.address);
  } else {
    ok = false;
  }
  if (!ok || !r.done()) return InvalidArgumentError("shm: malformed region description");
  if (d.rank < 0 || !PidPlausible(d.pid)) {
    return InvalidArgumentError("shm: region description of rank " + std::to_string(d.rank) + " pid " +
                                std::to_string(d.pid));
  }
  if (d.mode == RegionMode::kSegment &&
      (d.offset > d.segment.bytes || d.size > d.segment.bytes - d.offset)) {
    return InvalidArgumentError("shm: region description of rank " + std::to_string(d.rank) +
                                " exceeds its segment");
  }
  if (d.mode == RegionMode::kCaller && d.address + d.size < d.address) {
    return InvalidArgumentError("shm: region description of rank " + std::to_string(d.rank) +
                                " wraps the address space");
  }
  return d;
}

}  // namespace ciuic::transport::shm
