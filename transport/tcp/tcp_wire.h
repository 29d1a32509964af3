// Private: the byte formats of the tcp backend — the endpoint and region
// descriptions exchanged through the Store, the hello that opens every
// socket, and the frame header that precedes every payload. Kept apart from
// the backend so the white-box test can craft hellos and frames.
// Thread contract: plain values and pure functions.
//
// All integers are big-endian (network order), as in the TCP store.
//
// Endpoint description (Endpoint::Describe, 65 B + job id):
//   "CTE1"  u32 rank  u32 peer  u32 tag  u32 nsocks
//   u64 backend instance (random per Backend)
//   u8[16] nonce (random per Endpoint; a connecting socket must echo it)
//   u8 family (4 or 6)  u8[16] address (IPv4 in the first 4 bytes)  u16 port
//   u16 job_id_len  u8[job_id_len] job_id          (job_id_len <= kMaxJobId)
//
// Region description (MemoryRegion::Describe, 32 B):
//   "CTR1"  u32 owner rank  u64 backend instance  u32 id  u32 key  u64 size
//   The key is random per registration, so a description of a region that
//   was deregistered (its id reused) no longer matches and is rejected.
//
// Hello: the first bytes the connecting side sends on each socket, before
// any frame (86 B + job id):
//   "CTH2"  u32 connector rank  u32 tag  u32 socket index  u32 nsocks
//   u8[16] acceptor nonce (from the acceptor's endpoint description)
//   u8[16] connector nonce (from the connector's own description)
//   u16 job_id_len  u8[job_id_len] job_id
//   u8[32] HMAC-SHA256(data key, every byte above)
// Accept proof: the first bytes the accepting side sends back on each
// socket it keeps, before any frame (36 B):
//   "CTA2"  u8[32] HMAC-SHA256(data key, "CTA2" connector nonce
//                              acceptor nonce  u32 socket index)
//   The data key is HMAC-SHA256(job secret, "ciuic tcp data v2" 0 job_id), so
//   both sides prove the secret over nonces that are fresh per endpoint
//   (each endpoint takes one socket per index, once) without it crossing
//   the wire. The acceptor checks the hello before it keeps the socket; the
//   connector checks the proof before it reads any frame, and does not wait
//   for it in Connect (the acceptor may be busy elsewhere: waiting would
//   tie the two ranks' schedules together). A connection to oneself sends
//   no proof. Without a secret the key is public and only the acceptor
//   nonce (known to readers of the store) stands between the port and a
//   stranger. A rejected socket is closed without a reply.
// Frame header (kFrameHeaderBytes = 32 B), then `length` payload bytes:
//   off  0  u32 magic_type   kFrameMagic (high 16 bits) | type << 8 | flags
//   off  4  u32 region_id    receiver's region table index (writes), else 0
//   off  8  u32 region_key   that region's key (writes), else 0
//   off 12  u32 length       payload bytes that follow this header
//   off 16  u64 offset       byte offset in the region (writes), else 0
//   off 24  u32 imm          the write's immediate (on its last piece)
//   off 28  u32 seq          frame sequence number (low 32 bits)
//   Types: kWrite (one piece of a write; the payload lands in the region at
//   `offset`; flag kLast on the final piece, whose arrival completes the
//   write), kMessage (a two-sided message, length <= kMaxMessageBytes,
//   always kLast), kGoodbye (length 0: the sender destroyed the connection
//   cleanly; no frame follows on this socket).
//   Writes longer than kPieceBytes are cut into kPieceBytes pieces. Frames
//   of one connection are numbered 0, 1, 2, ... in posting order and frame
//   f travels on socket f % nsocks, so each socket carries an arithmetic
//   progression of sequence numbers that the receiver checks, and merging
//   the sockets by sequence restores the posting order.
#ifndef CIUIC_TRANSPORT_TCP_TCP_WIRE_H_
#define CIUIC_TRANSPORT_TCP_TCP_WIRE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "ciuic/status.h"
#include "transport/crypto.h"

namespace ciuic::transport::tcp {

using Nonce = std::array<uint8_t, 16>;

inline constexpr size_t kMaxJobId = 1024;
inline constexpr int kMaxSockets = 16;

// Writes are cut into pieces of this size; the receiver rejects longer ones.
inline constexpr uint32_t kPieceBytes = 512u << 10;

struct EndpointInfo {
  int rank = 0;
  int peer = 0;
  uint32_t tag = 0;
  int nsocks = 1;
  uint64_t instance = 0;
  Nonce nonce{};
  int family = 4;             // 4 or 6
  std::array<uint8_t, 16> address{};
  uint16_t port = 0;
  std::string job_id;
};
std::string EncodeEndpoint(const EndpointInfo& info);
// Errors: kInvalidArgument (wrong magic, truncated, bad field).
StatusOr<EndpointInfo> DecodeEndpoint(const std::string& blob);
// "1.2.3.4:5" / "[::1]:5".
std::string EndpointAddress(const EndpointInfo& info);

struct RegionInfo {
  int rank = 0;
  uint64_t instance = 0;
  uint32_t id = 0;
  uint32_t key = 0;
  uint64_t size = 0;
};
std::string EncodeRegion(const RegionInfo& info);
// Errors: kInvalidArgument (not a tcp region description).
StatusOr<RegionInfo> DecodeRegion(const std::string& blob);

inline constexpr size_t kHelloFixedBytes = 4 + 4 * 4 + 16 + 16 + 2;
inline constexpr size_t kMacBytes = 32;
inline constexpr size_t kAcceptProofBytes = 4 + kMacBytes;
struct Hello {
  int rank = 0;
  uint32_t tag = 0;
  int socket_index = 0;
  int nsocks = 1;
  Nonce acceptor_nonce{};
  Nonce connector_nonce{};
  std::string job_id;
};
// The key both handshakes are MACed with (see above).
Digest DataKey(const std::string& secret, const std::string& job_id);
// The hello with its MAC appended.
std::string EncodeHello(const Hello& hello, const Digest& key);
// Parses the fixed part; *job_id_len gets the length of the job id that
// follows (then kMacBytes of MAC). Errors: kInvalidArgument (wrong magic,
// bad counts).
Status DecodeHelloFixed(const uint8_t* p, Hello* hello, size_t* job_id_len);
// Whether the kMacBytes after the `len` hello bytes at `p` are their MAC.
bool HelloMacMatches(const Digest& key, const uint8_t* p, size_t len);
// The accept proof for the socket that `hello` opened.
std::string EncodeAcceptProof(const Hello& hello, const Digest& key);

inline constexpr size_t kFrameHeaderBytes = 32;
inline constexpr uint32_t kFrameMagic = 0xC17Cu;
enum FrameType : uint8_t { kFrameWrite = 1, kFrameMessage = 2, kFrameGoodbye = 3 };
inline constexpr uint8_t kFlagLast = 1;

struct FrameHeader {
  uint8_t type = 0;
  uint8_t flags = 0;
  uint32_t region_id = 0;
  uint32_t region_key = 0;
  uint32_t length = 0;
  uint64_t offset = 0;
  uint32_t imm = 0;
  uint32_t seq = 0;
};

namespace wire_internal {
inline void Put32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}
inline uint32_t Get32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}
}  // namespace wire_internal

// Inline: both run once per frame on the data path.
inline void EncodeFrameHeader(const FrameHeader& h, uint8_t* out) {
  using wire_internal::Put32;
  Put32(out, (kFrameMagic << 16) | (uint32_t{h.type} << 8) | h.flags);
  Put32(out + 4, h.region_id);
  Put32(out + 8, h.region_key);
  Put32(out + 12, h.length);
  Put32(out + 16, static_cast<uint32_t>(h.offset >> 32));
  Put32(out + 20, static_cast<uint32_t>(h.offset));
  Put32(out + 24, h.imm);
  Put32(out + 28, h.seq);
}
// Returns false when the magic is wrong (the type is checked by the caller).
inline bool DecodeFrameHeader(const uint8_t* p, FrameHeader* h) {
  using wire_internal::Get32;
  const uint32_t mt = Get32(p);
  if ((mt >> 16) != kFrameMagic) return false;
  h->type = static_cast<uint8_t>(mt >> 8);
  h->flags = static_cast<uint8_t>(mt);
  h->region_id = Get32(p + 4);
  h->region_key = Get32(p + 8);
  h->length = Get32(p + 12);
  h->offset = (uint64_t{Get32(p + 16)} << 32) | Get32(p + 20);
  h->imm = Get32(p + 24);
  h->seq = Get32(p + 28);
  return true;
}

// Whether a decoded header is a frame a receiver may act on, expecting
// sequence number `expected_seq` on its socket: "" if so, else why not (for
// the DataLoss error naming the peer). A write's region, offset and length
// are checked against the receiver's region table by the caller.
std::string CheckFrameHeader(const FrameHeader& h, uint32_t expected_seq);

}  // namespace ciuic::transport::tcp

#endif  // CIUIC_TRANSPORT_TCP_TCP_WIRE_H_
