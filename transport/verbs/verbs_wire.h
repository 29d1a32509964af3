// Private to the verbs backend: the parts that need no RDMA device, split out
// so the unit test checks them on machines without one. The CIUIC_IB_HCA
// syntax, the byte layouts exchanged between ranks (endpoint description,
// region description, connection handshake) and the rule that stripes one
// write over several queue pairs.
//
// All integers on the wire are little-endian. Every blob starts with a
// 4-byte magic and carries the job's hash and the ranks it belongs to, so a
// blob of another backend, another job or another pair of ranks is refused
// with kInvalidArgument instead of being misused.
//
// Endpoint description (Endpoint::Describe), 88 + 8 * nqps bytes:
//    0 u32 magic "CVE1"          4 u16 version (2)
//    6 u8  link layer (1 InfiniBand, 2 Ethernet = RoCE)
//    7 u8  active MTU (enum ibv_mtu: 1 = 256 B ... 5 = 4096 B)
//    8 u8  port number            9 u8  nqps (data QPs, >= 1)
//   10 u16 LID (InfiniBand; 0 on RoCE)
//   12 u8[16] GID (RoCE: the one chosen by CIUIC_IB_GID_INDEX or auto)
//   28 i32 rank of the owner     32 i32 rank it was made for
//   36 u32 tag                   40 u64 job hash (FNV-1a of job_id)
//   48 u32 stripe threshold (kStripeMinPart; both sides must agree)
//   52 u32 probe QPN             56 u32 probe initial PSN
//   60 u64 keepalive address     68 u32 keepalive rkey
//   72 u8[16] nonce (random per endpoint)
//   88 nqps x { u32 QPN, u32 initial PSN }
//
// Region description (MemoryRegion::Describe), 36 bytes:
//    0 u32 magic "CVR1"   4 u32 rkey   8 u64 address   16 u64 size
//   24 u64 job hash      32 i32 owner rank
//
// Handshake message (sent on the probe QP by Connect, both ways), 60 bytes:
//    0 u32 magic "CVH2"   4 i32 sender rank   8 i32 receiver rank
//   12 u32 tag           16 u64 job hash     24 u32 nqps
//   28 u8[32] HMAC-SHA256(data key, bytes 0..27, sender's nonce,
//                         receiver's nonce)
//   The data key is DataPlaneKey(job secret, "ciuic verbs data v2", job id)
//   (transport/crypto.h): each side proves the secret over nonces fresh per
//   endpoint, and a connection exists only once the peer's proof checked
//   out. Without a secret the key is public (the store is then the only
//   gate).
//
// Thread contract: pure functions; thread-safe.
#ifndef CIUIC_TRANSPORT_VERBS_VERBS_WIRE_H_
#define CIUIC_TRANSPORT_VERBS_VERBS_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ciuic/status.h"
#include "transport/crypto.h"

namespace ciuic::transport::verbs {

// ---- CIUIC_IB_HCA ----------------------------------------------------------

// One `name[:port]` of the list; port -1 = every port.
struct HcaEntry {
  std::string name;
  int port = -1;
};

// The parsed list: "^" in front excludes the listed devices instead of
// selecting them, "=" (after a "^" if both) makes names match exactly
// instead of as prefixes (the NCCL_IB_HCA syntax).
struct HcaSpec {
  bool exclude = false;
  bool exact = false;
  std::vector<HcaEntry> entries;  // empty = every device
};

// Parses a CIUIC_IB_HCA value. Errors: kInvalidArgument naming CIUIC_IB_HCA
// (an empty entry or name, a port that is not 1..255).
StatusOr<HcaSpec> ParseHcaSpec(const std::string& text);

// Whether port `port` of device `name` may be used under `spec`.
bool HcaAllows(const HcaSpec& spec, const std::string& name, int port);

// ---- Striping ---------------------------------------------------------------

// The most QPs one connection stripes over (CIUIC_IB_QPS_PER_PEER).
inline constexpr size_t kMaxQpsPerPeer = 16;

// With nqps > 1 QPs, a write of at least kStripeMinPart bytes is split over
// all nqps QPs; anything shorter goes whole on QP 0. Each part is posted as
// one or more WRs on its QP, the last of them an RDMA WRITE WITH IMMEDIATE
// (so the receiver sees one completion per part, and that completion
// implies the part's earlier WRs have landed: RC executes a QP's writes in
// order). The receiver tells striped from unstriped writes by the length of
// the last WR of the part on QP 0 (the "head"), which verbs reports as the
// work completion's byte_len for RDMA WRITE WITH IMMEDIATE: the sender makes
// that WR at least kStripeMinPart long for a striped write, and an unstriped
// write is shorter than that as a whole.
inline constexpr uint32_t kStripeMinPart = 64u << 10;

struct WritePart {
  int qp = 0;           // QP index; part 0 is the head on QP 0
  uint64_t offset = 0;  // within the write
  uint64_t len = 0;
};

// The parts of a `len`-byte write over `nqps` (1..kMaxQpsPerPeer) QPs,
// head first, written to parts[0..n); returns n: 1 when unstriped, else
// nqps. Each secondary part is len / nqps rounded down to 4 KiB, but
// smaller (possibly empty) when that would leave the head shorter than
// kStripeMinPart; the head takes the rest. No allocation (hot path).
int SplitWrite(uint64_t len, int nqps, WritePart* parts);

// Whether a head whose last WR carried `last_len` bytes belongs to a
// striped write, i.e. one part of it arrives on each of the other QPs.
inline bool HeadIsStriped(uint64_t last_len, int nqps) {
  return nqps > 1 && last_len >= kStripeMinPart;
}

// The WR lengths of a `len`-byte part when one WR may carry at most
// `max_msg` bytes (the port's max_msg_sz, >= kStripeMinPart): the last WR
// is as long as possible (min(len, max_msg)), the others take the rest in
// pieces of max_msg, the first being the shortest. A 0-byte part is one
// 0-byte WR.
std::vector<uint64_t> ChunkPart(uint64_t len, uint64_t max_msg);

// ---- Blobs ------------------------------------------------------------------

// 64-bit FNV-1a of the job id (identifies the job in blobs).
uint64_t JobHash(const std::string& job_id);

struct QpAddress {
  uint32_t qpn = 0;
  uint32_t psn = 0;
};

struct EndpointInfo {
  uint8_t link_layer = 0;  // 1 InfiniBand, 2 Ethernet
  uint8_t mtu = 0;         // enum ibv_mtu
  uint8_t port = 0;
  uint16_t lid = 0;
  uint8_t gid[16] = {};
  int32_t rank = -1;
  int32_t peer = -1;
  uint32_t tag = 0;
  uint64_t job_hash = 0;
  uint32_t stripe_min = kStripeMinPart;
  QpAddress probe;
  uint64_t keepalive_addr = 0;
  uint32_t keepalive_rkey = 0;
  uint8_t nonce[16] = {};
  std::vector<QpAddress> qps;  // data QPs, at least one
};

inline constexpr uint8_t kLinkInfiniBand = 1;
inline constexpr uint8_t kLinkEthernet = 2;

std::string EncodeEndpoint(const EndpointInfo& info);
// Errors: kInvalidArgument (wrong magic/version/length, no QPs or more than
// kMaxQpsPerPeer, an MTU or link layer out of range).
StatusOr<EndpointInfo> DecodeEndpoint(const std::string& blob);

struct RegionInfo {
  uint32_t rkey = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t job_hash = 0;
  int32_t rank = -1;
};

std::string EncodeRegion(const RegionInfo& info);
// Errors: kInvalidArgument (wrong magic or length, size 0, address range
// wrapping around).
StatusOr<RegionInfo> DecodeRegion(const std::string& blob);

struct Hello {
  int32_t rank = -1;
  int32_t peer = -1;
  uint32_t tag = 0;
  uint64_t job_hash = 0;
  uint32_t nqps = 0;
};

inline constexpr size_t kHelloFieldBytes = 28;
inline constexpr size_t kHelloBytes = kHelloFieldBytes + 32;
// The handshake's key (see above).
Digest DataKey(const std::string& secret, const std::string& job_id);
// Writes the hello and its MAC over the two endpoints' nonces.
void EncodeHello(const Hello& hello, const Digest& key, const uint8_t sender_nonce[16],
                 const uint8_t receiver_nonce[16], uint8_t out[kHelloBytes]);
// Whether the hello at `data` (kHelloBytes) carries the MAC of a sender
// with `sender_nonce` under `key`.
bool HelloMacMatches(const uint8_t* data, const Digest& key, const uint8_t sender_nonce[16],
                     const uint8_t receiver_nonce[16]);
// Errors: kInvalidArgument (wrong magic or length; the MAC is not checked).
StatusOr<Hello> DecodeHello(const uint8_t* data, size_t len);

// "::ffff:10.0.2.15" style text of a GID.
std::string GidText(const uint8_t gid[16]);
// True for an IPv4-mapped GID (::ffff:a.b.c.d), the form RoCE v2 uses for an
// interface's IPv4 address.
bool GidIsIpv4Mapped(const uint8_t gid[16]);
bool GidIsZero(const uint8_t gid[16]);

}  // namespace ciuic::transport::verbs

#endif  // CIUIC_TRANSPORT_VERBS_VERBS_WIRE_H_
