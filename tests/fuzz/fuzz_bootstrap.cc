// The communicator's agreement records, read from the store at creation:
// each rank's host record, rank 0's decision and the local ranks of a host.
// Host records and decisions have one encoding, so what decodes re-encodes
// to the input itself; local ranks (CPU lists as ranges) decode again to the
// same value. Numbers stay in range and no short text makes a huge list.
#include <algorithm>
#include <climits>

#include "collectives/bootstrap.h"
#include "fuzz_check.h"

using namespace ciuic::collectives;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* dir = SeedDir();
  if (dir == nullptr) return 0;
  WriteSeed(dir, "host", HostRecord{"node17", "b0a1/pid:[4026531836]/node17", true, {0, 1, 5}}.Encode());
  WriteSeed(dir, "host_bare", HostRecord{"node17", "node17", false, {}}.Encode());
  CommDecision d;
  d.transport = ciuic::transport::BackendKind::kTcp;
  d.job_id = "0123abcd";
  d.ranks_outnumber_cpus = true;
  d.tuning_id = "1234567";
  d.host_of = {0, 1, 0, 2};
  d.verbs = {true, false, true, true};
  d.knobs = "CIUIC_ALGO=allreduce:ring;CIUIC_NCHANNELS=2;CIUIC_KNOMIAL_RADIX=4;CIUIC_PAT_AGGREGATION=0";
  WriteSeed(dir, "decision", d.Encode());
  WriteSeed(dir, "refused", std::string(CommDecision::kRefused) + "CIUIC_TRANSPORT=shm joins only ranks of one machine");
  LocalRanks l;
  l.ranks = {0, 2, 5};
  l.cpus = {{0, 1, 2, 3}, {8}, {}};
  WriteSeed(dir, "local", l.Encode());
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string s = FuzzText(data, size);
  if (auto h = HostRecord::Decode(s); h.ok()) {
    FUZZ_CHECK(h->Encode() == s);
    FUZZ_CHECK(!h->host.empty() && h->cpus.size() <= static_cast<size_t>(kMaxCpuNumber) + 1);
    for (int c : h->cpus) FUZZ_CHECK(c >= 0 && c <= kMaxCpuNumber);
  }
  // Rank 0's refusal is an error of its own kind, never a decision.
  if (s.rfind(CommDecision::kRefused, 0) == 0) {
    FUZZ_CHECK(CommDecision::Decode(s, 1).status().code() == ciuic::StatusCode::kInvalidArgument);
  }
  // The size a well-formed record of s would have: its verbs list's length
  // (the field before the last, the knobs).
  const size_t last = s.rfind(' ');
  const size_t before = last == std::string::npos || last == 0 ? std::string::npos : s.rfind(' ', last - 1);
  const size_t verbs_len = before == std::string::npos ? 0 : last - before - 1;
  const int nranks = static_cast<int>(std::min<size_t>(verbs_len, 1 << 20));
  if (auto d = CommDecision::Decode(s, nranks); d.ok()) {
    FUZZ_CHECK(static_cast<int>(d->host_of.size()) == nranks);
    FUZZ_CHECK(!CommDecision::Decode(s, nranks + 1).ok());
    FUZZ_CHECK(d->Encode() == s);
    // Hosts in order of first appearance; pair kinds symmetric.
    FUZZ_CHECK(!d->host_of.empty() && d->host_of[0] == 0 && d->verbs.size() == d->host_of.size());
    int seen = 0;
    for (int h : d->host_of) {
      FUZZ_CHECK(h >= 0 && h <= seen);
      if (h == seen) ++seen;
    }
    FUZZ_CHECK(d->nhosts() == seen);
    const int n = static_cast<int>(std::min<size_t>(d->host_of.size(), 8));
    for (int a = 0; a < n; ++a) {
      for (int b = 0; b < n; ++b) FUZZ_CHECK(PairKind(*d, a, b) == PairKind(*d, b, a));
    }
    FUZZ_CHECK(!d->KindsInUse().empty());
  }
  if (auto l = LocalRanks::Decode(s); l.ok()) {
    FUZZ_CHECK(l->ranks.size() == l->cpus.size());
    size_t total = 0;
    for (size_t i = 0; i < l->ranks.size(); ++i) {
      FUZZ_CHECK(l->ranks[i] >= 0);
      total += l->cpus[i].size();
      for (int c : l->cpus[i]) FUZZ_CHECK(c >= 0 && c <= kMaxCpuNumber);
    }
    FUZZ_CHECK(total <= static_cast<size_t>(kMaxCpuNumber) + 1);
    // A rank's CPUs are a set: Encode writes them sorted, as ranges.
    auto again = LocalRanks::Decode(l->Encode());
    FUZZ_CHECK(again.ok() && again->ranks == l->ranks);
    for (size_t i = 0; i < l->cpus.size(); ++i) {
      std::vector<int> set = l->cpus[i];
      std::sort(set.begin(), set.end());
      set.erase(std::unique(set.begin(), set.end()), set.end());
      FUZZ_CHECK(again->cpus[i] == set);
    }
  }
  return 0;
}
