// Encoders and decoders of the tcp backend's descriptions and hello; the
// formats are documented in tcp_wire.h.
#include "transport/tcp/tcp_wire.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "transport/backend.h"
#include "transport/net.h"

namespace ciuic::transport::tcp {
namespace {

constexpr char kEndpointMagic[4] = {'C', 'T', 'E', '1'};
constexpr char kRegionMagic[4] = {'C', 'T', 'R', '1'};
constexpr char kHelloMagic[4] = {'C', 'T', 'H', '2'};
constexpr char kAcceptMagic[4] = {'C', 'T', 'A', '2'};
constexpr size_t kEndpointFixedBytes = 4 + 4 * 4 + 8 + 16 + 1 + 16 + 2 + 2;
constexpr size_t kRegionBytes = 4 + 4 + 8 + 4 + 4 + 8;

void PutU16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v >> 8));
  s->push_back(static_cast<char>(v));
}
uint16_t GetU16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
void PutBytes(std::string* s, const uint8_t* p, size_t n) {
  s->append(reinterpret_cast<const char*>(p), n);
}

// Reads fields front to back; any read past the end marks the cursor bad.
class Cursor {
 public:
  Cursor(const std::string& s) : p_(reinterpret_cast<const uint8_t*>(s.data())), left_(s.size()) {}
  const uint8_t* Take(size_t n) {
    if (n > left_) {
      bad_ = true;
      return nullptr;
    }
    const uint8_t* r = p_;
    p_ += n;
    left_ -= n;
    return r;
  }
  uint32_t U32() {
    const uint8_t* p = Take(4);
    return p ? net::GetU32(p) : 0;
  }
  uint64_t U64() {
    const uint8_t* p = Take(8);
    return p ? net::GetU64(p) : 0;
  }
  uint16_t U16() {
    const uint8_t* p = Take(2);
    return p ? GetU16(p) : 0;
  }
  bool ok() const { return !bad_; }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
  bool bad_ = false;
};

}  // namespace

std::string EncodeEndpoint(const EndpointInfo& info) {
  std::string s(kEndpointMagic, 4);
  net::PutU32(&s, static_cast<uint32_t>(info.rank));
  net::PutU32(&s, static_cast<uint32_t>(info.peer));
  net::PutU32(&s, info.tag);
  net::PutU32(&s, static_cast<uint32_t>(info.nsocks));
  net::PutU64(&s, info.instance);
  PutBytes(&s, info.nonce.data(), info.nonce.size());
  s.push_back(static_cast<char>(info.family));
  PutBytes(&s, info.address.data(), info.address.size());
  PutU16(&s, info.port);
  PutU16(&s, static_cast<uint16_t>(info.job_id.size()));
  s += info.job_id;
  return s;
}

StatusOr<EndpointInfo> DecodeEndpoint(const std::string& blob) {
  if (blob.size() < kEndpointFixedBytes || std::memcmp(blob.data(), kEndpointMagic, 4) != 0) {
    return InvalidArgumentError("tcp: not a tcp endpoint description (" +
                                std::to_string(blob.size()) + " bytes)");
  }
  Cursor c(blob);
  c.Take(4);
  EndpointInfo info;
  info.rank = static_cast<int>(c.U32());
  info.peer = static_cast<int>(c.U32());
  info.tag = c.U32();
  info.nsocks = static_cast<int>(c.U32());
  info.instance = c.U64();
  std::memcpy(info.nonce.data(), c.Take(16), 16);
  info.family = *c.Take(1);
  std::memcpy(info.address.data(), c.Take(16), 16);
  info.port = c.U16();
  const size_t job_len = c.U16();
  if (!c.ok() || c.left() != job_len || job_len > kMaxJobId) {
    return InvalidArgumentError("tcp: truncated or oversized endpoint description");
  }
  info.job_id.assign(reinterpret_cast<const char*>(c.Take(job_len)), job_len);
  if (info.rank < 0 || info.peer < 0 || info.nsocks < 1 || info.nsocks > kMaxSockets ||
      (info.family != 4 && info.family != 6) || info.port == 0) {
    return InvalidArgumentError("tcp: endpoint description with a bad field (rank " +
                                std::to_string(info.rank) + ", nsocks " +
                                std::to_string(info.nsocks) + ", port " +
                                std::to_string(info.port) + ")");
  }
  return info;
}

std::string EndpointAddress(const EndpointInfo& info) {
  sockaddr_storage ss{};
  if (info.family == 4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, info.address.data(), 4);
    in->sin_port = htons(info.port);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, info.address.data(), 16);
    in6->sin6_port = htons(info.port);
  }
  return net::ToString(reinterpret_cast<const sockaddr*>(&ss));
}

std::string EncodeRegion(const RegionInfo& info) {
  std::string s(kRegionMagic, 4);
  net::PutU32(&s, static_cast<uint32_t>(info.rank));
  net::PutU64(&s, info.instance);
  net::PutU32(&s, info.id);
  net::PutU32(&s, info.key);
  net::PutU64(&s, info.size);
  return s;
}

StatusOr<RegionInfo> DecodeRegion(const std::string& blob) {
  if (blob.size() != kRegionBytes || std::memcmp(blob.data(), kRegionMagic, 4) != 0) {
    return InvalidArgumentError("tcp: not a tcp region description (" +
                                std::to_string(blob.size()) + " bytes)");
  }
  Cursor c(blob);
  c.Take(4);
  RegionInfo info;
  info.rank = static_cast<int>(c.U32());
  info.instance = c.U64();
  info.id = c.U32();
  info.key = c.U32();
  info.size = c.U64();
  return info;
}

Digest DataKey(const std::string& secret, const std::string& job_id) {
  return DataPlaneKey(secret, "ciuic tcp data v2", job_id);
}

std::string EncodeHello(const Hello& hello, const Digest& key) {
  std::string s(kHelloMagic, 4);
  net::PutU32(&s, static_cast<uint32_t>(hello.rank));
  net::PutU32(&s, hello.tag);
  net::PutU32(&s, static_cast<uint32_t>(hello.socket_index));
  net::PutU32(&s, static_cast<uint32_t>(hello.nsocks));
  PutBytes(&s, hello.acceptor_nonce.data(), 16);
  PutBytes(&s, hello.connector_nonce.data(), 16);
  PutU16(&s, static_cast<uint16_t>(hello.job_id.size()));
  s += hello.job_id;
  const Digest mac = HmacSha256(key, s);
  PutBytes(&s, mac.data(), mac.size());
  return s;
}

bool HelloMacMatches(const Digest& key, const uint8_t* p, size_t len) {
  const Digest mac = HmacSha256(key, std::string(reinterpret_cast<const char*>(p), len));
  return ConstantTimeEqual(mac.data(), p + len, kMacBytes);
}

std::string EncodeAcceptProof(const Hello& hello, const Digest& key) {
  std::string in(kAcceptMagic, 4);
  PutBytes(&in, hello.connector_nonce.data(), 16);
  PutBytes(&in, hello.acceptor_nonce.data(), 16);
  net::PutU32(&in, static_cast<uint32_t>(hello.socket_index));
  const Digest mac = HmacSha256(key, in);
  std::string s(kAcceptMagic, 4);
  PutBytes(&s, mac.data(), mac.size());
  return s;
}

Status DecodeHelloFixed(const uint8_t* p, Hello* hello, size_t* job_id_len) {
  if (std::memcmp(p, "CTH1", 4) == 0) {
    return InvalidArgumentError("a hello of the older protocol CTH1 (an older ciuic: its hellos carry no MAC)");
  }
  if (std::memcmp(p, kHelloMagic, 4) != 0) return InvalidArgumentError("not a ciuic tcp hello");
  hello->rank = static_cast<int>(net::GetU32(p + 4));
  hello->tag = net::GetU32(p + 8);
  hello->socket_index = static_cast<int>(net::GetU32(p + 12));
  hello->nsocks = static_cast<int>(net::GetU32(p + 16));
  std::memcpy(hello->acceptor_nonce.data(), p + 20, 16);
  std::memcpy(hello->connector_nonce.data(), p + 36, 16);
  *job_id_len = GetU16(p + 52);
  if (hello->rank < 0 || hello->nsocks < 1 || hello->nsocks > kMaxSockets ||
      hello->socket_index < 0 || hello->socket_index >= hello->nsocks) {
    return InvalidArgumentError("hello with bad counts (rank " + std::to_string(hello->rank) +
                                ", socket " + std::to_string(hello->socket_index) + " of " +
                                std::to_string(hello->nsocks) + ")");
  }
  if (*job_id_len > kMaxJobId) return InvalidArgumentError("hello with an oversized job id");
  return Status::Ok();
}

std::string CheckFrameHeader(const FrameHeader& h, uint32_t expected_seq) {
  if (h.seq != expected_seq) {
    return "sequence " + std::to_string(h.seq) + ", expected " + std::to_string(expected_seq);
  }
  switch (h.type) {
    case kFrameWrite:
      if ((h.flags & ~kFlagLast) != 0) return "unknown flags";
      if (h.length > kPieceBytes) return "write piece of " + std::to_string(h.length) + " bytes";
      return "";
    case kFrameMessage:
      if (h.flags != kFlagLast || h.region_id != 0 || h.region_key != 0 || h.offset != 0) {
        return "message with write fields";
      }
      if (h.length > kMaxMessageBytes) return "message of " + std::to_string(h.length) + " bytes";
      return "";
    case kFrameGoodbye:
      if (h.length != 0) return "goodbye with a payload";
      return "";
    default:
      return "unknown type " + std::to_string(h.type);
  }
}

}  // namespace ciuic::transport::tcp
