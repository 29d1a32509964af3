// The tcp store's protocol, both sides: a server session fed a client's
// bytes (first byte: bit 0 puts a valid proof of the secret in front, so
// the request parser is reached; the rest picks how the bytes are split),
// and the client's decoders of greeting, verdict and reply header.
// Properties: the split never changes what the server answers or stores;
// its output always parses as greeting, verdict and whole replies; a valid
// proof is never rejected; nothing above the bounds is stored; counters
// parse back from their own text; a unique id has one encoding.
#include <algorithm>
#include <map>
#include <string>

#include "ciuic/store.h"
#include "fuzz_check.h"
#include "transport/net.h"
#include "transport/store_wire.h"

using namespace ciuic::transport::store_wire;
using ciuic::transport::kMaxKeyBytes;
using ciuic::transport::kMaxValueBytes;

namespace {

const std::string kSecret = "fuzz-secret";
const std::string kServerNonce(kNonce, 'S');
const std::string kClientNonce(kNonce, 'C');

struct Run {
  std::map<std::string, std::string> data;
  std::string out;
  ServerSession::State state;
  bool authenticated;
};

Run Serve(const std::string& in, size_t chunk_seed) {
  Run r;
  ServerSession s(kSecret, kServerNonce, &r.data);
  for (size_t pos = 0, k = 0; pos < in.size(); ++k) {
    // chunk_seed 0: everything at once; else sizes cycling through 1..7 * seed.
    const size_t n = chunk_seed == 0 ? in.size() : std::min(in.size() - pos, (k % 7 + 1) * chunk_seed);
    s.Feed(in.data() + pos, n);
    pos += n;
  }
  r.out = s.out();
  r.state = s.state();
  r.authenticated = s.authenticated();
  return r;
}

// The server's output as the client reads it.
void CheckOutput(const Run& r, const std::string& client_nonce, bool valid_proof) {
  FUZZ_CHECK(r.out.size() >= kGreeting);
  auto sn = DecodeGreeting(r.out.data());
  FUZZ_CHECK(sn.ok() && *sn == kServerNonce);
  size_t pos = kGreeting;
  if (pos == r.out.size()) {
    FUZZ_CHECK(!r.authenticated && r.state != ServerSession::State::kRejected);
    return;
  }
  FUZZ_CHECK(r.out.size() - pos >= kVerdict);
  const auto* verdict = reinterpret_cast<const uint8_t*>(r.out.data() + pos);
  const bool accepted = CheckVerdict(verdict, kSecret, kServerNonce, client_nonce).ok();
  FUZZ_CHECK(accepted == r.authenticated);
  if (valid_proof) FUZZ_CHECK(accepted);
  pos += kVerdict;
  if (!accepted) {
    FUZZ_CHECK(r.state == ServerSession::State::kRejected && pos == r.out.size());
    return;
  }
  while (pos < r.out.size()) {
    FUZZ_CHECK(r.out.size() - pos >= kReplyHeader);
    auto h = DecodeReplyHeader(r.out.data() + pos);
    FUZZ_CHECK(h.ok());
    pos += kReplyHeader;
    FUZZ_CHECK(r.out.size() - pos >= h->len);
    pos += h->len;
  }
}

void CheckCounter(const std::string& text) {
  int64_t v = 0;
  if (!ParseCounter(text, &v)) return;
  int64_t again = 0;
  FUZZ_CHECK(ParseCounter(std::to_string(v), &again) && again == v);
  const bool canonical = !(text.size() > 1 && text[0] == '0') && text.rfind("-0", 0) != 0;
  if (canonical) FUZZ_CHECK(std::to_string(v) == text);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = SeedDir();
  if (dir == nullptr) return 0;
  const std::string ops = EncodeRequest(kOpSet, "ciuic/0/host/1", "h1 0-3") +
                          EncodeRequest(kOpGet, "ciuic/0/host/1", "") +
                          EncodeRequest(kOpCheck, "ciuic/0/missing", "") +
                          EncodeRequest(kOpAdd, "ciuic/0/count", std::string("\0\0\0\0\0\0\0\x03", 8)) +
                          EncodeRequest(kOpAdd, "ciuic/0/host/1", std::string(8, '\0'));
  WriteSeed(dir, "requests", std::string(1, '\x01') + ops);
  WriteSeed(dir, "requests_split", std::string(1, '\x03') + ops);
  WriteSeed(dir, "wrong_proof", std::string(1, '\x00') + std::string(kProof, 'x') + ops);
  WriteSeed(dir, "unknown_op", std::string(1, '\x01') + EncodeRequest(9, "k", ""));
  WriteSeed(dir, "absurd_lengths", std::string(1, '\x01') + std::string("\x01\xff\xff\xff\xff\x7f\xff\xff\xff", 9));
  WriteSeed(dir, "counter", "-9223372036854775808");
  std::string id(kIdBytes, '\0');
  if (!EncodeStoreId({"10.0.0.1", 29500, std::string(64, 'a')}, id.data()).ok()) std::exit(1);
  WriteSeed(dir, "unique_id", id);
  EncodeStoreIdError("no usable interface (CIUIC_SOCKET_IFNAME=eth9)", id.data());
  WriteSeed(dir, "unique_id_error", id);
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string s = FuzzText(data, size);
  CheckCounter(s);
  // The client's decoders over the raw bytes, each in its own allocation of
  // exactly the size it reads (a read past it is an ASan report).
  if (size >= kGreeting) {
    const std::string g = s.substr(0, kGreeting);
    auto sn = DecodeGreeting(g.data());
    FUZZ_CHECK(sn.ok() == (g.compare(0, 4, kMagic, 4) == 0 && ciuic::transport::net::GetU32(g.data() + 4) == kVersion));
  }
  if (size >= kVerdict) {
    const std::string v = s.substr(0, kVerdict);
    if (CheckVerdict(reinterpret_cast<const uint8_t*>(v.data()), kSecret, kServerNonce, kClientNonce).ok()) {
      const auto want = ServerProof(kSecret, kServerNonce, kClientNonce);
      FUZZ_CHECK(v[0] == 0 && v.compare(1, 32, reinterpret_cast<const char*>(want.data()), 32) == 0);
    }
  }
  if (size >= kReplyHeader) {
    const std::string h = s.substr(0, kReplyHeader);
    if (auto r = DecodeReplyHeader(h.data()); r.ok()) FUZZ_CHECK(r->status <= kReplyError && r->len <= kMaxValueBytes);
  }
  if (size >= kIdBytes) {
    // A unique id: one encoding per id (decoding and encoding again gives
    // the same bytes); anything else is refused as not an id or as an error
    // id, in printable words.
    const std::string raw = s.substr(0, kIdBytes);
    auto id = DecodeStoreId(raw.data());
    if (id.ok()) {
      std::string again(kIdBytes, '\0');
      FUZZ_CHECK(EncodeStoreId(*id, again.data()).ok());
      FUZZ_CHECK(again == raw);
    } else {
      FUZZ_CHECK(id.status().code() == ciuic::StatusCode::kDataLoss ||
                 id.status().code() == ciuic::StatusCode::kUnavailable);
      for (unsigned char c : id.status().message()) FUZZ_CHECK(c >= 0x20 && c < 0x7f);
    }
  }
  if (size == 0) return 0;
  // The server's side.
  const uint8_t mode = data[0];
  const bool valid_proof = (mode & 1) != 0;
  std::string in = valid_proof ? EncodeProof(kSecret, kServerNonce, kClientNonce) : std::string();
  in += s.substr(1);
  const Run whole = Serve(in, 0);
  CheckOutput(whole, in.substr(0, kNonce), valid_proof);
  const Run split = Serve(in, (mode >> 1) % 16 + 1);
  FUZZ_CHECK(split.out == whole.out && split.state == whole.state && split.data == whole.data);
  for (const auto& [k, v] : whole.data) FUZZ_CHECK(!k.empty() && k.size() <= kMaxKeyBytes && v.size() <= kMaxValueBytes);
  return 0;
}
