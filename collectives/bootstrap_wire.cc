// The agreement's text records (bootstrap_wire.h).
#include "collectives/bootstrap_wire.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>

#include "ciuic/topology.h"
#include "common/log.h"

namespace ciuic::collectives {
namespace {

// The fields of `text` separated by single spaces, or none when a field is
// empty (two spaces, one at either end) or holds a space, tab, newline or
// other control byte: a record has one encoding, Encode's.
std::vector<std::string> Fields(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0;;) {
    const size_t sp = std::min(text.find(' ', at), text.size());
    std::string f = text.substr(at, sp - at);
    if (f.empty() || std::any_of(f.begin(), f.end(), [](char c) {
          const auto u = static_cast<unsigned char>(c);
          return u <= 0x20 || u == 0x7f;
        })) {
      return {};
    }
    out.push_back(std::move(f));
    if (sp == text.size()) return out;
    at = sp + 1;
  }
}

}  // namespace

bool ParseCanonicalInt(const std::string& text, int max, int* out) {
  // Digits only, no sign, no leading zero but "0" itself: what
  // std::to_string writes. Ten digits at most, so the sum cannot overflow.
  if (text.empty() || text.size() > 10 || (text[0] == '0' && text.size() > 1)) return false;
  int64_t v = 0;
  for (char ch : text) {
    if (ch < '0' || ch > '9') return false;
    v = v * 10 + (ch - '0');
  }
  if (v > max) return false;
  *out = static_cast<int>(v);
  return true;
}

std::string HostRecord::Encode() const {
  std::string out = host + " " + key + (verbs ? " 1" : " 0");
  for (size_t i = 0; i < cpus.size(); ++i) out += (i == 0 ? " " : ",") + std::to_string(cpus[i]);
  return out;
}

StatusOr<HostRecord> HostRecord::Decode(const std::string& text) {
  const std::vector<std::string> f = Fields(text);
  if (f.size() < 3 || f.size() > 4 || (f[2] != "0" && f[2] != "1")) {
    return DataLossError("malformed host record '" + LogSafe(text) + "'");
  }
  HostRecord r;
  r.host = f[0];
  r.key = f[1];
  r.verbs = f[2] == "1";
  if (f.size() == 4) {
    for (size_t at = 0;;) {
      const size_t comma = std::min(f[3].find(',', at), f[3].size());
      int c = 0;
      // As many CPUs as a CPU list may name (topology::ParseCpuList).
      if (!ParseCanonicalInt(f[3].substr(at, comma - at), kMaxCpuNumber, &c) ||
          r.cpus.size() > static_cast<size_t>(kMaxCpuNumber)) {
        return DataLossError("malformed CPU list in host record '" + LogSafe(text) + "'");
      }
      r.cpus.push_back(c);
      if (comma == f[3].size()) break;
      at = comma + 1;
    }
  }
  return r;
}

std::string HostRecord::HostId() const {
  // After "<name>/" where /proc gave no boot id, else after the third '/'
  // ("<boot>/<ns>/<name>/").
  if (key.size() > host.size() && key.compare(0, host.size(), host) == 0 && key[host.size()] == '/') {
    return key.substr(host.size() + 1);
  }
  size_t at = 0;
  for (int slashes = 0; slashes < 3; ++slashes) {
    at = key.find('/', at);
    if (at == std::string::npos) return "";
    ++at;
  }
  return key.substr(at);
}

std::string CommDecision::Encode() const {
  std::string hosts, caps;
  for (size_t r = 0; r < host_of.size(); ++r) {
    hosts += (r ? "," : "") + std::to_string(host_of[r]);
    caps += r < verbs.size() && verbs[r] ? '1' : '0';
  }
  const std::string cpus = machine_cpus > 0 ? "/" + std::to_string(machine_cpus) : "";
  return std::string(transport::BackendName(transport)) + " " + job_id + " " + (ranks_outnumber_cpus ? "1" : "0") +
         cpus + " " + tuning_id + " " + accumulate + " " + (forced ? "1" : "0") + " " + hosts + " " + caps + " " +
         knobs;
}

StatusOr<CommDecision> CommDecision::Decode(const std::string& text, int nranks) {
  if (text.rfind(kRefused, 0) == 0) {
    return InvalidArgumentError("rank 0 refused the communicator: " + LogSafe(text.substr(std::strlen(kRefused)), 1024));
  }
  const std::vector<std::string> f = Fields(text);
  const size_t slash = f.size() == 9 ? f[2].find('/') : std::string::npos;
  const std::string outnumber = f.size() == 9 ? f[2].substr(0, slash) : std::string();
  int machine_cpus = 0;
  if (f.size() != 9 || (outnumber != "0" && outnumber != "1") || (f[5] != "0" && f[5] != "1") ||
      (slash != std::string::npos &&
       (!ParseCanonicalInt(f[2].substr(slash + 1), kMaxCpuNumber + 1, &machine_cpus) || machine_cpus == 0))) {
    return DataLossError("malformed decision of rank 0: '" + LogSafe(text) + "'");
  }
  CommDecision d;
  StatusOr<transport::BackendKind> kind = transport::ParseBackendKind(f[0]);
  if (!kind.ok()) return DataLossError("decision of rank 0 '" + LogSafe(text) + "': " + kind.status().message());
  d.transport = *kind;
  d.job_id = f[1];
  d.ranks_outnumber_cpus = outnumber == "1";
  d.machine_cpus = machine_cpus;
  d.tuning_id = f[3];
  d.accumulate = f[4];
  d.forced = f[5] == "1";
  // Host indices in order of first appearance: each is at most one more
  // than the largest before it, so a decision has one encoding.
  int next = 0;
  const size_t want = nranks > 0 ? static_cast<size_t>(nranks) : 0;
  for (size_t at = 0;;) {
    if (d.host_of.size() == want) {
      return DataLossError("decision of rank 0 lists more than " + std::to_string(nranks) +
                           " ranks in its host list, for a communicator of " + std::to_string(nranks));
    }
    const size_t comma = std::min(f[6].find(',', at), f[6].size());
    int h = 0;
    if (!ParseCanonicalInt(f[6].substr(at, comma - at), next, &h)) {
      return DataLossError("decision of rank 0: malformed host list (rank " + std::to_string(d.host_of.size()) + ")");
    }
    if (h == next) ++next;
    d.host_of.push_back(h);
    if (comma == f[6].size()) break;
    at = comma + 1;
  }
  if (d.host_of.size() != want) {
    return DataLossError("decision of rank 0 lists " + std::to_string(d.host_of.size()) +
                         " ranks in its host list, for a communicator of " + std::to_string(nranks));
  }
  if (f[7].size() != d.host_of.size() ||
      std::any_of(f[7].begin(), f[7].end(), [](char c) { return c != '0' && c != '1'; })) {
    return DataLossError("decision of rank 0: " + std::to_string(d.host_of.size()) +
                         " ranks in the host list, but a verbs list of " + std::to_string(f[7].size()) +
                         " characters that are not all 0 or 1");
  }
  for (char c : f[7]) d.verbs.push_back(c == '1');
  d.knobs = f[8];
  return d;
}

int CommDecision::nhosts() const {
  int n = 0;
  for (int h : host_of) n = std::max(n, h + 1);
  return n;
}

std::vector<transport::BackendKind> CommDecision::KindsInUse() const {
  using transport::BackendKind;
  if (forced || host_of.size() < 2) return {transport};
  const int nh = nhosts();
  std::vector<int> ranks(static_cast<size_t>(nh), 0), capable(static_cast<size_t>(nh), 0);
  bool incapable = false;
  for (size_t r = 0; r < host_of.size(); ++r) {
    ++ranks[static_cast<size_t>(host_of[r])];
    if (verbs[r]) {
      ++capable[static_cast<size_t>(host_of[r])];
    } else {
      incapable = true;
    }
  }
  std::vector<BackendKind> out;
  if (std::any_of(ranks.begin(), ranks.end(), [](int m) { return m > 1; })) out.push_back(BackendKind::kShm);
  if (nh > 1) {
    if (incapable) out.push_back(BackendKind::kTcp);
    if (std::count_if(capable.begin(), capable.end(), [](int c) { return c > 0; }) > 1) {
      out.push_back(BackendKind::kVerbs);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

transport::BackendKind CommDecision::CollectiveKind() const {
  const std::vector<transport::BackendKind> kinds = KindsInUse();
  if (kinds.size() == 1) return kinds[0];
  if (std::find(kinds.begin(), kinds.end(), transport::BackendKind::kTcp) != kinds.end()) {
    return transport::BackendKind::kTcp;
  }
  return transport::BackendKind::kVerbs;
}

transport::BackendKind PairKind(const CommDecision& d, int a, int b) {
  const size_t n = d.host_of.size();
  if (d.forced || a < 0 || b < 0 || static_cast<size_t>(a) >= n || static_cast<size_t>(b) >= n) return d.transport;
  if (d.host_of[static_cast<size_t>(a)] == d.host_of[static_cast<size_t>(b)]) return transport::BackendKind::kShm;
  return d.verbs[static_cast<size_t>(a)] && d.verbs[static_cast<size_t>(b)] ? transport::BackendKind::kVerbs
                                                                          : transport::BackendKind::kTcp;
}

std::string DescribeRoutes(const CommDecision& d, const std::vector<std::string>& host_names) {
  const size_t n = d.host_of.size();
  const uint64_t pairs = static_cast<uint64_t>(n) * (n > 0 ? n - 1 : 0) / 2;
  if (d.forced) {
    return std::string(transport::BackendName(d.transport)) + " for all " + std::to_string(pairs) +
           " pairs (CIUIC_TRANSPORT)";
  }
  const int nh = d.nhosts();
  std::vector<std::vector<int>> members(static_cast<size_t>(nh));
  std::vector<uint64_t> capable(static_cast<size_t>(nh), 0);
  for (size_t r = 0; r < n; ++r) {
    members[static_cast<size_t>(d.host_of[r])].push_back(static_cast<int>(r));
    if (d.verbs[r]) ++capable[static_cast<size_t>(d.host_of[r])];
  }
  std::string out = std::to_string(nh) + (nh == 1 ? " host (" : " hosts (");
  const int shown = std::min(nh, 16);
  for (int h = 0; h < shown; ++h) {
    const std::string& name = static_cast<size_t>(h) < host_names.size() ? host_names[static_cast<size_t>(h)] : "?";
    out += (h ? "; " : "") + LogSafe(name) + ": ranks " + topology::FormatCpuList(members[static_cast<size_t>(h)]);
  }
  if (shown < nh) out += "; " + std::to_string(nh - shown) + " more";
  uint64_t inside = 0, verbs_pairs = 0, seen_capable = 0;
  for (int h = 0; h < nh; ++h) {
    const uint64_t m = members[static_cast<size_t>(h)].size();
    inside += m * (m - 1) / 2;
    verbs_pairs += capable[static_cast<size_t>(h)] * seen_capable;
    seen_capable += capable[static_cast<size_t>(h)];
  }
  const uint64_t between = pairs - inside;
  out += "): shm inside hosts (" + std::to_string(inside) + " pairs)";
  if (between > 0) {
    out += ", between hosts tcp (" + std::to_string(between - verbs_pairs) + " pairs) and verbs (" +
           std::to_string(verbs_pairs) + " pairs)";
  }
  return out;
}

std::string LocalRanks::Encode() const {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    out += (i ? ";" : "") + std::to_string(ranks[i]) + ":" + topology::FormatCpuList(cpus[i]);
  }
  return out;
}

StatusOr<LocalRanks> LocalRanks::Decode(const std::string& text) {
  LocalRanks l;
  size_t cpus_total = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t semi = std::min(text.find(';', at), text.size());
    const std::string item = text.substr(at, semi - at);
    at = semi + 1;
    const size_t colon = item.find(':');
    int r = -1;
    if (colon == std::string::npos || !ParseCanonicalInt(item.substr(0, colon), INT_MAX, &r)) {
      return DataLossError("malformed local ranks '" + LogSafe(text) + "'");
    }
    StatusOr<std::vector<int>> c = topology::ParseCpuList(item.substr(colon + 1));
    if (!c.ok()) return DataLossError("malformed local ranks '" + LogSafe(text) + "': " + c.status().message());
    // Each list is bounded (2^20 CPUs); so is their sum, or a short text of
    // many "0-1048576" would make gigabytes.
    cpus_total += c->size();
    if (cpus_total > static_cast<size_t>(kMaxCpuNumber) + 1) {
      return DataLossError("local ranks '" + LogSafe(text) + "': more than 2^20 CPUs in all");
    }
    l.ranks.push_back(r);
    l.cpus.push_back(std::move(*c));
  }
  return l;
}

int LocalRanks::LocalRankOf(int rank) const {
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] == rank) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace ciuic::collectives
