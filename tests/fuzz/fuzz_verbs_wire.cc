// The verbs transport's decoders: CIUIC_IB_HCA values, and the endpoint,
// region and hello a peer sends (through the store and the connection
// exchange). Whatever decodes re-encodes to a fixed point, and a hello's
// MAC matches only its own encoding under the key and nonces.
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "transport/verbs/verbs_wire.h"

using namespace ciuic::transport::verbs;
using ciuic::transport::Digest;

static const uint8_t kNonceA[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t kNonceB[16] = {16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1};

static const Digest& FuzzKey() {
  static const Digest key = DataKey("fuzz-secret", "job-1");
  return key;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = SeedDir();
  if (dir == nullptr) return 0;
  WriteSeed(dir, "hca_list", "mlx5_0:1,mlx5_1");
  WriteSeed(dir, "hca_exclude_exact", "^=rxe0:1");
  EndpointInfo e;
  e.link_layer = kLinkEthernet;
  e.mtu = 3;
  e.port = 1;
  e.gid[10] = 0xff;
  e.gid[11] = 0xff;
  e.gid[12] = 10;
  e.gid[15] = 15;
  e.rank = 0;
  e.peer = 1;
  e.tag = 2;
  e.job_hash = 0x1234;
  e.probe = {17, 100};
  e.keepalive_addr = 0x7f0000001000;
  e.keepalive_rkey = 9;
  e.qps = {{18, 200}, {19, 300}};
  WriteSeed(dir, "endpoint", EncodeEndpoint(e));
  RegionInfo r;
  r.rkey = 5;
  r.addr = 0x7f0000000000;
  r.size = 1 << 20;
  r.job_hash = 0x1234;
  r.rank = 1;
  WriteSeed(dir, "region", EncodeRegion(r));
  Hello h;
  h.rank = 0;
  h.peer = 1;
  h.tag = 2;
  h.job_hash = 0x1234;
  h.nqps = 2;
  uint8_t out[kHelloBytes];
  EncodeHello(h, FuzzKey(), kNonceA, kNonceB, out);
  WriteSeed(dir, "hello", std::string(reinterpret_cast<char*>(out), sizeof(out)));
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string s = FuzzText(data, size);
  if (auto spec = ParseHcaSpec(s); spec.ok()) {
    for (const HcaEntry& e : spec->entries) {
      FUZZ_CHECK(!e.name.empty() && (e.port == -1 || (e.port >= 1 && e.port <= 255)));
      (void)HcaAllows(*spec, e.name, e.port < 0 ? 1 : e.port);
    }
  }
  if (auto e = DecodeEndpoint(s); e.ok()) {
    FUZZ_CHECK(!e->qps.empty() && e->qps.size() <= kMaxQpsPerPeer);
    const std::string once = EncodeEndpoint(*e);
    auto again = DecodeEndpoint(once);
    FUZZ_CHECK(again.ok() && EncodeEndpoint(*again) == once);
  }
  if (auto r = DecodeRegion(s); r.ok()) {
    FUZZ_CHECK(r->size > 0 && r->addr + r->size > r->addr);
    const std::string once = EncodeRegion(*r);
    auto again = DecodeRegion(once);
    FUZZ_CHECK(again.ok() && EncodeRegion(*again) == once);
  }
  if (auto h = DecodeHello(data, size); h.ok()) {
    uint8_t out[kHelloBytes];
    EncodeHello(*h, FuzzKey(), kNonceA, kNonceB, out);
    auto again = DecodeHello(out, kHelloBytes);
    FUZZ_CHECK(again.ok() && again->rank == h->rank && again->peer == h->peer && again->tag == h->tag &&
               again->job_hash == h->job_hash && again->nqps == h->nqps);
    FUZZ_CHECK(HelloMacMatches(out, FuzzKey(), kNonceA, kNonceB));
    FUZZ_CHECK(!HelloMacMatches(out, FuzzKey(), kNonceB, kNonceA));
    // An input's MAC matches only if the input is the encoding itself.
    std::vector<uint8_t> in(data, data + size);
    if (HelloMacMatches(in.data(), FuzzKey(), kNonceA, kNonceB)) {
      FUZZ_CHECK(std::memcmp(in.data(), out, kHelloBytes) == 0);
    }
  }
  return 0;
}
