// The tcp transport's decoders of what a peer sends: endpoint and region
// descriptions (through the store), the hello of a connecting socket and
// frame headers. Whatever decodes re-encodes to a fixed point, and a hello's
// MAC matches only its canonical encoding.
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "transport/backend.h"
#include "transport/tcp/tcp_wire.h"

using namespace ciuic::transport::tcp;
using ciuic::transport::Digest;

static const Digest& FuzzKey() {
  static const Digest key = DataKey("fuzz-secret", "job-1");
  return key;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = SeedDir();
  if (dir == nullptr) return 0;
  EndpointInfo e;
  e.rank = 1;
  e.peer = 2;
  e.tag = 7;
  e.nsocks = 2;
  e.instance = 99;
  e.address = {127, 0, 0, 1};
  e.port = 4242;
  e.job_id = "job-1";
  WriteSeed(dir, "endpoint4", EncodeEndpoint(e));
  e.family = 6;
  e.address = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  WriteSeed(dir, "endpoint6", EncodeEndpoint(e));
  RegionInfo r;
  r.rank = 3;
  r.instance = 5;
  r.id = 1;
  r.key = 0xabcdef;
  r.size = 1 << 20;
  WriteSeed(dir, "region", EncodeRegion(r));
  Hello h;
  h.rank = 1;
  h.tag = 3;
  h.socket_index = 1;
  h.nsocks = 2;
  h.job_id = "job-1";
  WriteSeed(dir, "hello", EncodeHello(h, FuzzKey()));
  uint8_t frame[kFrameHeaderBytes];
  FrameHeader f;
  f.type = kFrameWrite;
  f.flags = kFlagLast;
  f.length = 4096;
  f.offset = 1 << 16;
  f.seq = 1;
  EncodeFrameHeader(f, frame);
  WriteSeed(dir, "frame_write", std::string(reinterpret_cast<char*>(frame), sizeof(frame)));
  f.type = kFrameMessage;
  f.length = 8;
  EncodeFrameHeader(f, frame);
  WriteSeed(dir, "frame_message", std::string(reinterpret_cast<char*>(frame), sizeof(frame)));
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string s = FuzzText(data, size);
  if (auto e = DecodeEndpoint(s); e.ok()) {
    const std::string once = EncodeEndpoint(*e);
    auto again = DecodeEndpoint(once);
    FUZZ_CHECK(again.ok() && EncodeEndpoint(*again) == once);
    FUZZ_CHECK(!EndpointAddress(*e).empty());
  }
  if (auto r = DecodeRegion(s); r.ok()) {
    const std::string once = EncodeRegion(*r);
    auto again = DecodeRegion(once);
    FUZZ_CHECK(again.ok() && EncodeRegion(*again) == once);
  }
  if (size >= kHelloFixedBytes) {
    // Exactly the fixed part, in its own allocation: a read past it is an
    // ASan report.
    std::vector<uint8_t> fixed(data, data + kHelloFixedBytes);
    Hello h;
    size_t job_id_len = 0;
    if (DecodeHelloFixed(fixed.data(), &h, &job_id_len).ok()) {
      FUZZ_CHECK(h.nsocks >= 1 && h.socket_index >= 0 && h.socket_index < h.nsocks);
      h.job_id = s.substr(kHelloFixedBytes, job_id_len);
      if (h.job_id.size() == job_id_len) {
        const std::string enc = EncodeHello(h, FuzzKey());
        Hello back;
        size_t back_len = 0;
        FUZZ_CHECK(enc.size() == kHelloFixedBytes + job_id_len + kMacBytes &&
                   DecodeHelloFixed(reinterpret_cast<const uint8_t*>(enc.data()), &back, &back_len).ok());
        FUZZ_CHECK(back.rank == h.rank && back.tag == h.tag && back.nsocks == h.nsocks && back_len == job_id_len);
        FUZZ_CHECK(HelloMacMatches(FuzzKey(), reinterpret_cast<const uint8_t*>(enc.data()), enc.size() - kMacBytes));
        if (size >= enc.size()) {
          // A MAC the input carries matches only if the input is the
          // canonical encoding (fields and job id) under the key.
          std::vector<uint8_t> whole(data, data + enc.size());
          if (HelloMacMatches(FuzzKey(), whole.data(), enc.size() - kMacBytes)) {
            FUZZ_CHECK(std::memcmp(whole.data(), enc.data(), enc.size()) == 0);
          }
        }
        FUZZ_CHECK(EncodeAcceptProof(h, FuzzKey()).size() == kAcceptProofBytes);
      }
    }
  }
  if (size >= kFrameHeaderBytes) {
    FrameHeader h;
    if (DecodeFrameHeader(data, &h)) {
      uint8_t out[kFrameHeaderBytes];
      EncodeFrameHeader(h, out);
      FUZZ_CHECK(std::memcmp(out, data, kFrameHeaderBytes) == 0);
      // What the receiver acts on: a known type, bounded lengths, the
      // sequence it expects and no stray fields.
      if (CheckFrameHeader(h, h.seq).empty()) {
        FUZZ_CHECK(h.type == kFrameWrite || h.type == kFrameMessage || h.type == kFrameGoodbye);
        FUZZ_CHECK(h.type != kFrameWrite || (h.length <= kPieceBytes && (h.flags & ~kFlagLast) == 0));
        FUZZ_CHECK(h.type != kFrameMessage || (h.length <= ciuic::transport::kMaxMessageBytes && h.flags == kFlagLast &&
                                               h.region_id == 0 && h.region_key == 0 && h.offset == 0));
        FUZZ_CHECK(h.type != kFrameGoodbye || h.length == 0);
        FUZZ_CHECK(!CheckFrameHeader(h, h.seq + 1).empty());
      }
    }
  }
  return 0;
}
