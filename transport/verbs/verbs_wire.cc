// The verbs backend's device-independent helpers (see verbs_wire.h for the
// layouts).
#include "transport/verbs/verbs_wire.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

namespace ciuic::transport::verbs {

namespace {

constexpr uint32_t kEndpointMagic = 0x31455643;  // "CVE1" little-endian
constexpr uint32_t kRegionMagic = 0x31525643;    // "CVR1"
constexpr uint32_t kHelloMagic = 0x32485643;     // "CVH2"
constexpr uint32_t kOldHelloMagic = 0x31485643;  // "CVH1": no MAC
constexpr uint16_t kEndpointVersion = 2;
constexpr size_t kEndpointFixedBytes = 88;
constexpr size_t kRegionBytes = 36;

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

bool ParsePort(const std::string& text, int* port) {
  if (text.empty() || text.size() > 3) return false;
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < 1 || v > 255) return false;
  *port = v;
  return true;
}

}  // namespace

StatusOr<HcaSpec> ParseHcaSpec(const std::string& text) {
  HcaSpec spec;
  size_t i = 0;
  if (i < text.size() && text[i] == '^') {
    spec.exclude = true;
    ++i;
  }
  if (i < text.size() && text[i] == '=') {
    spec.exact = true;
    ++i;
  }
  const std::string list = text.substr(i);
  if (list.empty()) {
    if (i == 0) return spec;  // empty: every device
    return InvalidArgumentError("CIUIC_IB_HCA='" + text + "': no device after '^' / '='");
  }
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    if (item.empty()) {
      return InvalidArgumentError("CIUIC_IB_HCA='" + text + "': empty entry (expected name[:port],...)");
    }
    HcaEntry entry;
    const size_t colon = item.find(':');
    entry.name = item.substr(0, colon);
    if (entry.name.empty()) {
      return InvalidArgumentError("CIUIC_IB_HCA='" + text + "': entry '" + item + "' has no device name");
    }
    if (colon != std::string::npos && !ParsePort(item.substr(colon + 1), &entry.port)) {
      return InvalidArgumentError("CIUIC_IB_HCA='" + text + "': bad port in '" + item +
                                  "' (expected a number 1..255)");
    }
    spec.entries.push_back(entry);
    start = end + 1;
  }
  return spec;
}

bool HcaAllows(const HcaSpec& spec, const std::string& name, int port) {
  if (spec.entries.empty()) return true;
  bool listed = false;
  for (const HcaEntry& e : spec.entries) {
    const bool name_ok = spec.exact ? name == e.name : name.compare(0, e.name.size(), e.name) == 0;
    if (name_ok && (e.port < 0 || e.port == port)) {
      listed = true;
      break;
    }
  }
  return spec.exclude ? !listed : listed;
}

int SplitWrite(uint64_t len, int nqps, WritePart* parts) {
  if (nqps <= 1 || len < kStripeMinPart) {
    parts[0] = WritePart{0, 0, len};
    return 1;
  }
  const uint64_t n = static_cast<uint64_t>(nqps);
  // Balanced parts when the write is large; otherwise the head keeps
  // kStripeMinPart and the others share what is left.
  const uint64_t balanced = len / n;
  const uint64_t room = (len - kStripeMinPart) / (n - 1);
  const uint64_t per = std::min(balanced, room) & ~uint64_t{4095};
  const uint64_t head = len - per * (n - 1);
  parts[0] = WritePart{0, 0, head};
  for (int q = 1; q < nqps; ++q) {
    parts[q] = WritePart{q, head + per * static_cast<uint64_t>(q - 1), per};
  }
  return nqps;
}

std::vector<uint64_t> ChunkPart(uint64_t len, uint64_t max_msg) {
  if (max_msg == 0 || len <= max_msg) return {len};
  const uint64_t rest = len - max_msg;
  const uint64_t full = rest / max_msg;
  std::vector<uint64_t> out;
  out.reserve(full + 2);
  if (rest % max_msg != 0) out.push_back(rest % max_msg);
  for (uint64_t i = 0; i < full; ++i) out.push_back(max_msg);
  out.push_back(max_msg);
  return out;
}

uint64_t JobHash(const std::string& job_id) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : job_id) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string EncodeEndpoint(const EndpointInfo& info) {
  std::string out(kEndpointFixedBytes + 8 * info.qps.size(), '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  Put32(p, kEndpointMagic);
  Put16(p + 4, kEndpointVersion);
  p[6] = info.link_layer;
  p[7] = info.mtu;
  p[8] = info.port;
  p[9] = static_cast<uint8_t>(info.qps.size());
  Put16(p + 10, info.lid);
  std::memcpy(p + 12, info.gid, 16);
  Put32(p + 28, static_cast<uint32_t>(info.rank));
  Put32(p + 32, static_cast<uint32_t>(info.peer));
  Put32(p + 36, info.tag);
  Put64(p + 40, info.job_hash);
  Put32(p + 48, info.stripe_min);
  Put32(p + 52, info.probe.qpn);
  Put32(p + 56, info.probe.psn);
  Put64(p + 60, info.keepalive_addr);
  Put32(p + 68, info.keepalive_rkey);
  std::memcpy(p + 72, info.nonce, 16);
  for (size_t i = 0; i < info.qps.size(); ++i) {
    Put32(p + kEndpointFixedBytes + 8 * i, info.qps[i].qpn);
    Put32(p + kEndpointFixedBytes + 8 * i + 4, info.qps[i].psn);
  }
  return out;
}

StatusOr<EndpointInfo> DecodeEndpoint(const std::string& blob) {
  const std::string what = "verbs endpoint description";
  // Magic and version first: a peer running another ciuic release sends a
  // description of another length, and "version 1" says why, "too short" not.
  const auto* p = reinterpret_cast<const uint8_t*>(blob.data());
  if (blob.size() >= 6) {
    if (Get32(p) != kEndpointMagic) return InvalidArgumentError(what + ": wrong magic (not a verbs endpoint)");
    if (Get16(p + 4) != kEndpointVersion) {
      return InvalidArgumentError(what + ": version " + std::to_string(Get16(p + 4)) + ", expected " +
                                  std::to_string(kEndpointVersion) + " (ranks running different ciuic releases?)");
    }
  }
  if (blob.size() < kEndpointFixedBytes) {
    return InvalidArgumentError(what + ": " + std::to_string(blob.size()) + " bytes, too short");
  }
  EndpointInfo info;
  info.link_layer = p[6];
  info.mtu = p[7];
  info.port = p[8];
  const size_t nqps = p[9];
  if (nqps == 0 || nqps > kMaxQpsPerPeer) {
    return InvalidArgumentError(what + ": " + std::to_string(nqps) + " QPs (1.." +
                                std::to_string(kMaxQpsPerPeer) + " allowed)");
  }
  if (blob.size() != kEndpointFixedBytes + 8 * nqps) {
    return InvalidArgumentError(what + ": " + std::to_string(blob.size()) + " bytes for " +
                                std::to_string(nqps) + " QPs");
  }
  if (info.link_layer != kLinkInfiniBand && info.link_layer != kLinkEthernet) {
    return InvalidArgumentError(what + ": unknown link layer " + std::to_string(info.link_layer));
  }
  if (info.mtu < 1 || info.mtu > 5) return InvalidArgumentError(what + ": bad MTU code " + std::to_string(info.mtu));
  info.lid = Get16(p + 10);
  std::memcpy(info.gid, p + 12, 16);
  info.rank = static_cast<int32_t>(Get32(p + 28));
  info.peer = static_cast<int32_t>(Get32(p + 32));
  info.tag = Get32(p + 36);
  info.job_hash = Get64(p + 40);
  info.stripe_min = Get32(p + 48);
  info.probe.qpn = Get32(p + 52);
  info.probe.psn = Get32(p + 56);
  info.keepalive_addr = Get64(p + 60);
  info.keepalive_rkey = Get32(p + 68);
  std::memcpy(info.nonce, p + 72, 16);
  info.qps.resize(nqps);
  for (size_t i = 0; i < nqps; ++i) {
    info.qps[i].qpn = Get32(p + kEndpointFixedBytes + 8 * i);
    info.qps[i].psn = Get32(p + kEndpointFixedBytes + 8 * i + 4);
  }
  return info;
}

std::string EncodeRegion(const RegionInfo& info) {
  std::string out(kRegionBytes, '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  Put32(p, kRegionMagic);
  Put32(p + 4, info.rkey);
  Put64(p + 8, info.addr);
  Put64(p + 16, info.size);
  Put64(p + 24, info.job_hash);
  Put32(p + 32, static_cast<uint32_t>(info.rank));
  return out;
}

StatusOr<RegionInfo> DecodeRegion(const std::string& blob) {
  const std::string what = "verbs region description";
  if (blob.size() != kRegionBytes) {
    return InvalidArgumentError(what + ": " + std::to_string(blob.size()) + " bytes, expected " +
                                std::to_string(kRegionBytes));
  }
  const auto* p = reinterpret_cast<const uint8_t*>(blob.data());
  if (Get32(p) != kRegionMagic) return InvalidArgumentError(what + ": wrong magic (not a verbs region)");
  RegionInfo info;
  info.rkey = Get32(p + 4);
  info.addr = Get64(p + 8);
  info.size = Get64(p + 16);
  info.job_hash = Get64(p + 24);
  info.rank = static_cast<int32_t>(Get32(p + 32));
  if (info.size == 0) return InvalidArgumentError(what + ": size 0");
  if (info.addr + info.size < info.addr) return InvalidArgumentError(what + ": address range wraps around");
  return info;
}

Digest DataKey(const std::string& secret, const std::string& job_id) {
  return DataPlaneKey(secret, "ciuic verbs data v2", job_id);
}

namespace {
Digest HelloMac(const uint8_t* fields, const Digest& key, const uint8_t sender_nonce[16],
                const uint8_t receiver_nonce[16]) {
  std::string in(reinterpret_cast<const char*>(fields), kHelloFieldBytes);
  in.append(reinterpret_cast<const char*>(sender_nonce), 16);
  in.append(reinterpret_cast<const char*>(receiver_nonce), 16);
  return HmacSha256(key, in);
}
}  // namespace

void EncodeHello(const Hello& hello, const Digest& key, const uint8_t sender_nonce[16],
                 const uint8_t receiver_nonce[16], uint8_t out[kHelloBytes]) {
  Put32(out, kHelloMagic);
  Put32(out + 4, static_cast<uint32_t>(hello.rank));
  Put32(out + 8, static_cast<uint32_t>(hello.peer));
  Put32(out + 12, hello.tag);
  Put64(out + 16, hello.job_hash);
  Put32(out + 24, hello.nqps);
  const Digest mac = HelloMac(out, key, sender_nonce, receiver_nonce);
  std::memcpy(out + kHelloFieldBytes, mac.data(), mac.size());
}

bool HelloMacMatches(const uint8_t* data, const Digest& key, const uint8_t sender_nonce[16],
                     const uint8_t receiver_nonce[16]) {
  const Digest mac = HelloMac(data, key, sender_nonce, receiver_nonce);
  return ConstantTimeEqual(mac.data(), data + kHelloFieldBytes, mac.size());
}

StatusOr<Hello> DecodeHello(const uint8_t* data, size_t len) {
  if (len >= 4 && Get32(data) == kOldHelloMagic) {
    return InvalidArgumentError("verbs handshake: a hello of the older protocol CVH1 (an older ciuic: no MAC)");
  }
  if (len != kHelloBytes || Get32(data) != kHelloMagic) {
    return InvalidArgumentError("verbs handshake: malformed message (" + std::to_string(len) + " bytes)");
  }
  Hello h;
  h.rank = static_cast<int32_t>(Get32(data + 4));
  h.peer = static_cast<int32_t>(Get32(data + 8));
  h.tag = Get32(data + 12);
  h.job_hash = Get64(data + 16);
  h.nqps = Get32(data + 24);
  return h;
}

std::string GidText(const uint8_t gid[16]) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, gid, buf, sizeof(buf)) == nullptr) return "?";
  return buf;
}

bool GidIsIpv4Mapped(const uint8_t gid[16]) {
  for (int i = 0; i < 10; ++i) {
    if (gid[i] != 0) return false;
  }
  return gid[10] == 0xff && gid[11] == 0xff;
}

bool GidIsZero(const uint8_t gid[16]) {
  for (int i = 0; i < 16; ++i) {
    if (gid[i] != 0) return false;
  }
  return true;
}

}  // namespace ciuic::transport::verbs
