#include "transport/link_wire.h"

#include <cstring>

#include "transport/net.h"

namespace ciuic::transport {

namespace {
constexpr char kMagic[4] = {'C', 'I', 'L', 'R'};
constexpr uint8_t kVersion = 1;

std::string Who(int peer) { return "link to rank " + std::to_string(peer) + ": "; }
}  // namespace

std::string EncodeRing(const RingDesc& d) {
  std::string out(kRingHeaderBytes, '\0');
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  p[4] = kVersion;
  net::PutLe64(p + 5, d.slot_size);
  net::PutLe64(p + 13, d.nslots);
  net::PutLe64(p + 21, d.offset);
  return out + d.region;
}

StatusOr<RingDesc> DecodeRing(const std::string& blob, int peer, uint64_t slot_size, uint64_t nslots) {
  if (blob.size() < kRingHeaderBytes || std::memcmp(blob.data(), kMagic, sizeof(kMagic)) != 0) {
    return DataLossError(Who(peer) + "its ring description is not one (" + std::to_string(blob.size()) +
                         " bytes, not starting with CILR: every rank must run the same ciuic)");
  }
  const auto* p = reinterpret_cast<const uint8_t*>(blob.data());
  if (p[4] != kVersion) {
    return DataLossError(Who(peer) + "ring description version " + std::to_string(p[4]) + ", this rank reads " +
                         std::to_string(kVersion) + " (every rank must run the same ciuic)");
  }
  RingDesc d;
  d.slot_size = net::GetLe64(p + 5);
  d.nslots = net::GetLe64(p + 13);
  d.offset = net::GetLe64(p + 21);
  if (d.slot_size != slot_size || d.nslots != nslots) {
    return InvalidArgumentError(Who(peer) + "it uses " + std::to_string(d.nslots) + " slots of " +
                                std::to_string(d.slot_size) + " B, this rank " + std::to_string(nslots) + " of " +
                                std::to_string(slot_size) +
                                " B (CIUIC_CHUNK_SIZE / CIUIC_BUFFER_SIZE must match on all ranks)");
  }
  if (!RingShapeOk(slot_size, nslots)) {
    return InvalidArgumentError(Who(peer) + "a ring of " + std::to_string(nslots) + " slots of " +
                                std::to_string(slot_size) + " B is outside 2.." + std::to_string(kMaxSlots) +
                                " slots of 1 B..1 GiB");
  }
  d.region = blob.substr(kRingHeaderBytes);
  return d;
}

Status CheckRingInRegion(const RingDesc& d, uint64_t region_size, int peer) {
  const uint64_t bytes = RingBytes(d.slot_size, d.nslots);
  if (d.offset > region_size || bytes > region_size - d.offset) {
    return DataLossError(Who(peer) + "its ring (" + std::to_string(bytes) + " B at offset " +
                         std::to_string(d.offset) + ") lies outside its region of " + std::to_string(region_size) +
                         " B");
  }
  return Status::Ok();
}

}  // namespace ciuic::transport
