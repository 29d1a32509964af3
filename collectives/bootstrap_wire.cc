// The agreement's text records (bootstrap_wire.h).
#include "collectives/bootstrap_wire.h"

#include <algorithm>
#include <climits>
#include <cstdint>

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
  std::string out = host;
  for (size_t i = 0; i < cpus.size(); ++i) out += (i == 0 ? " " : ",") + std::to_string(cpus[i]);
  return out;
}

StatusOr<HostRecord> HostRecord::Decode(const std::string& text) {
  const std::vector<std::string> f = Fields(text);
  if (f.empty() || f.size() > 2) return DataLossError("malformed host record '" + LogSafe(text) + "'");
  HostRecord r;
  r.host = f[0];
  if (f.size() == 2) {
    for (size_t at = 0;;) {
      const size_t comma = std::min(f[1].find(',', at), f[1].size());
      int c = 0;
      // As many CPUs as a CPU list may name (topology::ParseCpuList).
      if (!ParseCanonicalInt(f[1].substr(at, comma - at), kMaxCpuNumber, &c) ||
          r.cpus.size() > static_cast<size_t>(kMaxCpuNumber)) {
        return DataLossError("malformed CPU list in host record '" + LogSafe(text) + "'");
      }
      r.cpus.push_back(c);
      if (comma == f[1].size()) break;
      at = comma + 1;
    }
  }
  return r;
}

std::string CommDecision::Encode() const {
  return std::string(transport::BackendName(transport)) + " " + job_id + " " + (ranks_outnumber_cpus ? "1" : "0") +
         " " + tuning_id + " " + accumulate;
}

StatusOr<CommDecision> CommDecision::Decode(const std::string& text) {
  const std::vector<std::string> f = Fields(text);
  if (f.size() != 5 || (f[2] != "0" && f[2] != "1")) {
    return DataLossError("malformed decision of rank 0: '" + LogSafe(text) + "'");
  }
  CommDecision d;
  StatusOr<transport::BackendKind> kind = transport::ParseBackendKind(f[0]);
  if (!kind.ok()) return DataLossError("decision of rank 0 '" + LogSafe(text) + "': " + kind.status().message());
  d.transport = *kind;
  d.job_id = f[1];
  d.ranks_outnumber_cpus = f[2] == "1";
  d.tuning_id = f[3];
  d.accumulate = f[4];
  return d;
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
