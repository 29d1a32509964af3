// Tuning files: parser, writer, and how their contents reach the cost model
// and selection (format in tuning.h).
#include "collectives/tuning.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <tuple>

#include "collectives/registry.h"

namespace ciuic::collectives {
namespace {

constexpr const char* kMagic = "ciuic-tuning";
constexpr Collective kAllCollectives[] = {
    Collective::kAllReduce,     Collective::kBroadcast, Collective::kReduce,  Collective::kAllGather,
    Collective::kAllGatherv,    Collective::kReduceScatter, Collective::kReduceScatterv,
    Collective::kAllToAll,      Collective::kBarrier,   Collective::kSend,    Collective::kRecv};
constexpr transport::BackendKind kAllBackends[] = {transport::BackendKind::kShm, transport::BackendKind::kTcp,
                                                   transport::BackendKind::kVerbs};
constexpr const char* kBackendFields =
    "alpha_us, beta_gbps, copy_gbps, beta_dram_gbps, copy_dram_gbps, exchange_gbps, exchange_dram_gbps, cpu_gbps, "
    "pair_cores";
constexpr const char* kBetweenHostsWord = "between_hosts";
// A step's floor against the stream: an alpha larger than a small step's
// measured time would otherwise make its bytes free.
constexpr double kMinExchangeStepFactor = 0.1;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && IsSpace(s[i])) ++i;
    size_t j = i;
    while (j < s.size() && !IsSpace(s[j])) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && IsSpace(s[b])) ++b;
  while (e > b && IsSpace(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// Shortest decimal text that reads back as exactly `v`.
std::string Number(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

bool ParsePositive(const std::string& s, double* out) {
  double v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || !std::isfinite(v) || v <= 0) return false;
  *out = v;
  return true;
}

template <typename Enum, size_t N>
bool FindByName(const std::string& name, const Enum (&all)[N], const char* (*name_of)(Enum), Enum* out) {
  for (Enum e : all) {
    if (name == name_of(e)) {
      *out = e;
      return true;
    }
  }
  return false;
}

template <typename Enum, size_t N>
std::string Names(const Enum (&all)[N], const char* (*name_of)(Enum)) {
  std::string s;
  for (Enum e : all) s += std::string(s.empty() ? "" : ", ") + name_of(e);
  return s;
}

const DataType kAllDataTypes[] = {DataType::kInt8,       DataType::kUint8,      DataType::kInt16,   DataType::kUint16,
                                  DataType::kInt32,      DataType::kUint32,     DataType::kInt64,   DataType::kUint64,
                                  DataType::kBool,       DataType::kFloat16,    DataType::kBFloat16, DataType::kFloat32,
                                  DataType::kFloat64,    DataType::kFloat8E4M3, DataType::kFloat8E5M2};
const ReduceOp kAllOps[] = {ReduceOp::kSum,  ReduceOp::kProd, ReduceOp::kMin,  ReduceOp::kMax,      ReduceOp::kAvg,
                            ReduceOp::kBand, ReduceOp::kBor,  ReduceOp::kBxor, ReduceOp::kPremulSum};

// Whether `name` may be the algorithm of a rule for (collective, backend):
// a registry entry of that collective that runs on that backend; otherwise
// `why` says what is wrong.
bool RuleAlgorithmOk(Collective c, transport::BackendKind backend, const std::string& name, std::string* why) {
  StatusOr<Algorithm> a = ParseAlgorithm(c, name);
  if (!a.ok()) {
    *why = a.status().message();
    return false;
  }
  if (!FindEntry(c, *a)->RunsOn(backend)) {
    *why = std::string("algorithm '") + name + "' for " + CollectiveName(c) + " runs through one host's shared memory: only with backend shm";
    return false;
  }
  return true;
}

bool MetaKeyOk(const std::string& key) {
  if (key.empty()) return false;
  for (char ch : key) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
  }
  return true;
}

using RuleGroup = std::tuple<int, int, int, int>;  // collective, backend, nranks, nhosts
struct RuleMark {
  size_t from_bytes = 0;
  int line = 0;
};

// Checks a rule against the previous one of its group in `last` (updated).
// Returns "" when it is fine, else the problem.
std::string CheckRuleOrder(const TuningRule& r, std::map<RuleGroup, RuleMark>* last) {
  const RuleGroup group{static_cast<int>(r.collective), static_cast<int>(r.backend), r.nranks, r.nhosts};
  auto [it, fresh] = last->emplace(group, RuleMark{r.from_bytes, r.line});
  if (fresh) return "";
  const RuleMark prev = it->second;
  const std::string name = std::string(CollectiveName(r.collective)) + " " + transport::BackendName(r.backend) +
                           " ranks " + std::to_string(r.nranks) +
                           (r.nhosts > 0 ? " hosts " + std::to_string(r.nhosts) : std::string());
  const std::string where = " (line " + std::to_string(prev.line) + ")";
  if (r.from_bytes == prev.from_bytes) {
    return "duplicate rule for " + name + " from " + std::to_string(r.from_bytes) + where;
  }
  if (r.from_bytes < prev.from_bytes) {
    return "rules for " + name + " are not sorted: from " + std::to_string(r.from_bytes) + " after from " +
           std::to_string(prev.from_bytes) + where;
  }
  it->second = RuleMark{r.from_bytes, r.line};
  return "";
}

class Parser {
 public:
  explicit Parser(std::string origin) { tuning_.origin = std::move(origin); }

  StatusOr<Tuning> Run(const std::string& text) {
    std::istringstream in(text);
    std::string raw;
    while (std::getline(in, raw)) {
      ++line_;
      const size_t hash = raw.find('#');
      const std::string body = hash == std::string::npos ? raw : raw.substr(0, hash);
      const std::vector<std::string> f = Split(body);
      if (f.empty()) continue;
      if (!seen_magic_) {
        CIUIC_RETURN_IF_ERROR(Magic(f));
        continue;
      }
      const std::string& kw = f[0];
      if (kw == "meta") {
        CIUIC_RETURN_IF_ERROR(MetaLine(f, body));
      } else if (kw == "backend") {
        CIUIC_RETURN_IF_ERROR(BackendLine(f));
      } else if (kw == "gamma") {
        CIUIC_RETURN_IF_ERROR(GammaLine(f));
      } else if (kw == "exchange_steps") {
        CIUIC_RETURN_IF_ERROR(ExchangeStepsLine(f));
      } else if (kw == "memory") {
        CIUIC_RETURN_IF_ERROR(MemoryLine(f));
      } else if (kw == "memory_shared") {
        CIUIC_RETURN_IF_ERROR(MemorySharedLine(f));
      } else if (kw == "rule") {
        CIUIC_RETURN_IF_ERROR(RuleLine(f));
      } else if (kw == kMagic) {
        return Error("'" + std::string(kMagic) + "' again (only once, first)");
      } else {
        return Error("unknown statement '" + kw +
                     "' (expected meta, backend, exchange_steps, gamma, memory, memory_shared or rule)");
      }
    }
    if (!seen_magic_) {
      return InvalidArgumentError(tuning_.origin + ":" + std::to_string(line_ + 1) + ": no '" + kMagic + " " +
                                  std::to_string(kTuningFormatVersion) + "' line: not a tuning file");
    }
    return std::move(tuning_);
  }

 private:
  Status Error(const std::string& what) const {
    return InvalidArgumentError(tuning_.origin + ":" + std::to_string(line_) + ": " + what);
  }

  Status UnknownBackend(const std::string& name) const {
    return Error("unknown backend '" + name + "' (valid: " + Names(kAllBackends, &transport::BackendName) + ")");
  }

  Status Magic(const std::vector<std::string>& f) {
    if (f[0] != kMagic) {
      return Error("expected '" + std::string(kMagic) + " " + std::to_string(kTuningFormatVersion) +
                   "' first, got '" + f[0] + "': not a tuning file");
    }
    if (f.size() != 2) return Error(std::string(kMagic) + " takes one field, the format version");
    if (f[1] != std::to_string(kTuningFormatVersion)) {
      return Error("unsupported format version '" + f[1] + "' (this build reads " +
                   std::to_string(kTuningFormatVersion) + ")");
    }
    seen_magic_ = true;
    return Status::Ok();
  }

  Status MetaLine(const std::vector<std::string>& f, const std::string& body) {
    if (f.size() < 3) return Error("meta needs a key and a text");
    if (!MetaKeyOk(f[1])) return Error("meta key '" + f[1] + "' is not [a-z0-9_]+");
    for (const auto& [key, value] : tuning_.meta) {
      if (key == f[1]) return Error("meta " + key + " given twice");
    }
    // The text is the rest of the line after the key, spacing kept.
    const size_t key_at = body.find(f[1], body.find("meta") + 4);
    tuning_.meta.emplace_back(f[1], Trim(body.substr(key_at + f[1].size())));
    return Status::Ok();
  }

  Status BackendLine(const std::vector<std::string>& f) {
    if (f.size() < 2) return Error("backend needs a name (shm, tcp, verbs)");
    BackendTuning b;
    b.line = line_;
    if (!FindByName(f[1], kAllBackends, &transport::BackendName, &b.backend)) return UnknownBackend(f[1]);
    size_t first_field = 2;
    if (f.size() > 2 && f[2] == kBetweenHostsWord) {
      if (b.backend == transport::BackendKind::kShm) {
        return Error("backend shm between_hosts: shared memory does not reach between hosts");
      }
      b.between_hosts = true;
      first_field = 3;
    }
    const std::string name = f[1] + (b.between_hosts ? std::string(" ") + kBetweenHostsWord : "");
    for (const BackendTuning& other : tuning_.backends) {
      if (other.backend == b.backend && other.between_hosts == b.between_hosts) {
        return Error("backend " + name + " given twice (first on line " + std::to_string(other.line) + ")");
      }
    }
    if (f.size() < first_field + 2) return Error("backend " + name + " needs at least one of " + kBackendFields);
    if ((f.size() - first_field) % 2 != 0) return Error("backend " + name + ": field '" + f.back() + "' has no value");
    for (size_t i = first_field; i + 1 < f.size(); i += 2) {
      if (f[i] == "pair_cores") {
        if (b.pair_cores) return Error("backend " + name + ": pair_cores given twice");
        if (f[i + 1] != "1" && f[i + 1] != "2") {
          return Error("backend " + name + ": pair_cores '" + f[i + 1] + "' is not 1 or 2");
        }
        b.pair_cores = f[i + 1] == "1" ? 1 : 2;
        continue;
      }
      std::optional<double>* slot = nullptr;
      if (f[i] == "alpha_us") slot = &b.alpha_us;
      else if (f[i] == "beta_gbps") slot = &b.beta_gbps;
      else if (f[i] == "copy_gbps") slot = &b.copy_gbps;
      else if (f[i] == "beta_dram_gbps") slot = &b.beta_dram_gbps;
      else if (f[i] == "copy_dram_gbps") slot = &b.copy_dram_gbps;
      else if (f[i] == "exchange_gbps") slot = &b.exchange_gbps;
      else if (f[i] == "exchange_dram_gbps") slot = &b.exchange_dram_gbps;
      else if (f[i] == "cpu_gbps") slot = &b.cpu_gbps;
      else return Error("unknown key '" + f[i] + "' in backend " + name + " (valid: " + kBackendFields + ")");
      if (slot->has_value()) return Error("backend " + name + ": " + f[i] + " given twice");
      double v = 0;
      if (!ParsePositive(f[i + 1], &v)) {
        return Error("backend " + name + ": " + f[i] + " '" + f[i + 1] + "' is not a positive number");
      }
      *slot = v;
    }
    tuning_.backends.push_back(b);
    return Status::Ok();
  }

  Status GammaLine(const std::vector<std::string>& f) {
    if ((f.size() != 4 && f.size() != 6) || (f.size() == 6 && f[4] != "dram")) {
      return Error("gamma takes a dtype, an op and GB/s, then optionally dram and GB/s (gamma f32 sum 21.5 dram 8)");
    }
    GammaTuning g;
    g.line = line_;
    if (!FindByName(f[1], kAllDataTypes, &DataTypeName, &g.dtype)) {
      return Error("unknown dtype '" + f[1] + "' (valid: " + Names(kAllDataTypes, &DataTypeName) + ")");
    }
    if (!FindByName(f[2], kAllOps, &ReduceOpName, &g.op)) {
      return Error("unknown op '" + f[2] + "' (valid: " + Names(kAllOps, &ReduceOpName) + ")");
    }
    if (!ParsePositive(f[3], &g.gbps)) return Error("gamma " + f[1] + " " + f[2] + ": '" + f[3] + "' is not a positive number");
    if (f.size() == 6) {
      double dram = 0;
      if (!ParsePositive(f[5], &dram)) {
        return Error("gamma " + f[1] + " " + f[2] + ": dram '" + f[5] + "' is not a positive number");
      }
      g.dram_gbps = dram;
    }
    for (const GammaTuning& other : tuning_.gammas) {
      if (other.dtype == g.dtype && other.op == g.op) {
        return Error("gamma " + f[1] + " " + f[2] + " given twice (first on line " + std::to_string(other.line) + ")");
      }
    }
    tuning_.gammas.push_back(g);
    return Status::Ok();
  }

  Status ExchangeStepsLine(const std::vector<std::string>& f) {
    if (f.size() < 2) return Error("exchange_steps needs a backend name (shm, tcp, verbs)");
    transport::BackendKind kind = transport::BackendKind::kShm;
    if (!FindByName(f[1], kAllBackends, &transport::BackendName, &kind)) return UnknownBackend(f[1]);
    const bool between = f.size() > 2 && f[2] == kBetweenHostsWord;
    const size_t first = between ? 3 : 2;
    const std::string name = "exchange_steps " + f[1] + (between ? std::string(" ") + kBetweenHostsWord : "");
    BackendTuning* b = nullptr;
    for (BackendTuning& x : tuning_.backends) {
      if (x.backend == kind && x.between_hosts == between) b = &x;
    }
    if (b == nullptr) {
      return Error(name + ": no backend " + f[1] + (between ? std::string(" ") + kBetweenHostsWord : "") +
                   " line before it");
    }
    if (!b->exchange_steps.empty()) return Error(name + " given twice");
    if (f.size() < first + 2 || (f.size() - first) % 2 != 0) {
      return Error(name + " takes pairs of a step's bytes each way and GB/s (exchange_steps tcp 64K 4.5 1M 9.8)");
    }
    std::vector<std::pair<size_t, double>> curve;
    for (size_t i = first; i + 1 < f.size(); i += 2) {
      StatusOr<uint64_t> bytes = ParseByteSize(f[i]);
      if (!bytes.ok()) return Error(name + " '" + f[i] + "': " + bytes.status().message());
      if (*bytes == 0) return Error(name + ": a step of 0 bytes");
      double gbps = 0;
      if (!ParsePositive(f[i + 1], &gbps)) return Error(name + " " + f[i] + ": '" + f[i + 1] + "' is not a positive number");
      if (!curve.empty() && *bytes <= curve.back().first) {
        return Error(name + ": step sizes must increase ('" + f[i] + "' after " + std::to_string(curve.back().first) +
                     ")");
      }
      curve.emplace_back(static_cast<size_t>(*bytes), gbps);
    }
    b->exchange_steps = curve;
    return Status::Ok();
  }

  Status MemoryLine(const std::vector<std::string>& f) {
    if (f.size() < 5 || f.size() % 2 != 1) {
      return Error("memory takes pairs of a working set in bytes and GB/s, at least two (memory 512K 47 128M 6)");
    }
    if (!tuning_.memory.empty()) return Error("memory given twice");
    std::vector<std::pair<size_t, double>> curve;
    for (size_t i = 1; i + 1 < f.size(); i += 2) {
      StatusOr<uint64_t> bytes = ParseByteSize(f[i]);
      if (!bytes.ok()) return Error("memory '" + f[i] + "': " + bytes.status().message());
      if (*bytes == 0) return Error("memory: a working set of 0 bytes");
      double gbps = 0;
      if (!ParsePositive(f[i + 1], &gbps)) return Error("memory " + f[i] + ": '" + f[i + 1] + "' is not a positive number");
      if (!curve.empty() && *bytes <= curve.back().first) {
        return Error("memory: working sets must increase ('" + f[i] + "' after " + std::to_string(curve.back().first) + ")");
      }
      curve.emplace_back(static_cast<size_t>(*bytes), gbps);
    }
    tuning_.memory = curve;
    return Status::Ok();
  }

  Status MemorySharedLine(const std::vector<std::string>& f) {
    if (f.size() != 3 && !(f.size() == 5 && f[3] == "beyond")) {
      return Error("memory_shared takes a core count and GB/s, then optionally beyond BYTES"
                   " (memory_shared 2 4.7 beyond 32M)");
    }
    if (tuning_.memory_shared_cores != 0) return Error("memory_shared given twice");
    int cores = 0;
    auto pr = std::from_chars(f[1].data(), f[1].data() + f[1].size(), cores);
    if (pr.ec != std::errc() || pr.ptr != f[1].data() + f[1].size() || cores < 2 || cores > 4096) {
      return Error("memory_shared '" + f[1] + "' is not a core count of 2 or more");
    }
    double gbps = 0;
    if (!ParsePositive(f[2], &gbps)) return Error("memory_shared " + f[1] + ": '" + f[2] + "' is not a positive number");
    if (f.size() == 5) {
      StatusOr<uint64_t> beyond = ParseByteSize(f[4]);
      if (!beyond.ok()) return Error("memory_shared beyond '" + f[4] + "': " + beyond.status().message());
      if (*beyond == 0) return Error("memory_shared beyond: a cache of 0 bytes");
      tuning_.memory_shared_beyond = static_cast<size_t>(*beyond);
    }
    tuning_.memory_shared_cores = cores;
    tuning_.memory_shared_gbps = gbps;
    return Status::Ok();
  }

  Status RuleLine(std::vector<std::string> f) {
    int hosts = 0;
    if (f.size() == 10 && f[3] == "ranks" && f[5] == "hosts" && f[7] == "from") {
      auto pr = std::from_chars(f[6].data(), f[6].data() + f[6].size(), hosts);
      if (pr.ec != std::errc() || pr.ptr != f[6].data() + f[6].size() || hosts < 1 || hosts > (1 << 20)) {
        return Error("hosts '" + f[6] + "' is not a host count (an integer >= 1)");
      }
      f.erase(f.begin() + 5, f.begin() + 7);
    }
    if (f.size() != 8 || f[3] != "ranks" || f[5] != "from") {
      return Error("expected 'rule COLLECTIVE BACKEND ranks N [hosts H] from BYTES ALGORITHM'");
    }
    TuningRule r;
    r.line = line_;
    if (!FindByName(f[1], kAllCollectives, &CollectiveName, &r.collective)) {
      return Error("unknown collective '" + f[1] + "' (valid: " + Names(kAllCollectives, &CollectiveName) + ")");
    }
    if (!FindByName(f[2], kAllBackends, &transport::BackendName, &r.backend)) return UnknownBackend(f[2]);
    int n = 0;
    auto pr = std::from_chars(f[4].data(), f[4].data() + f[4].size(), n);
    if (pr.ec != std::errc() || pr.ptr != f[4].data() + f[4].size() || n < 1 || n > (1 << 20)) {
      return Error("ranks '" + f[4] + "' is not a rank count (an integer >= 1)");
    }
    r.nranks = n;
    if (hosts > n) return Error("hosts " + std::to_string(hosts) + " is more than ranks " + std::to_string(n));
    r.nhosts = hosts;
    StatusOr<uint64_t> from = ParseByteSize(f[6]);
    if (!from.ok()) return Error("from '" + f[6] + "': " + from.status().message());
    r.from_bytes = static_cast<size_t>(*from);
    r.algorithm = f[7];
    std::string why;
    if (!RuleAlgorithmOk(r.collective, r.backend, r.algorithm, &why)) return Error(why);
    const std::string order = CheckRuleOrder(r, &last_rule_);
    if (!order.empty()) return Error(order);
    tuning_.rules.push_back(r);
    return Status::Ok();
  }

  Tuning tuning_;
  int line_ = 0;
  bool seen_magic_ = false;
  std::map<RuleGroup, RuleMark> last_rule_;  // the previous rule of each group
};

}  // namespace

StatusOr<Tuning> ParseTuning(const std::string& text, const std::string& origin) {
  return Parser(origin).Run(text);
}

StatusOr<Tuning> LoadTuningFile(const std::string& path) {
  const std::string what = "CIUIC_TUNING_FILE=" + path;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (err == ENOENT) return NotFoundError(what + ": no such file");
    return UnavailableError(what + ": cannot open: " + std::strerror(err));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return UnavailableError(what + ": cannot read");
  StatusOr<Tuning> t = ParseTuning(text.str(), path);
  if (!t.ok()) return Status(t.status().code(), "CIUIC_TUNING_FILE: " + t.status().message());
  return t;
}

Status CheckTuning(const Tuning& t) {
  // A negative host count would be written as none and read back as any.
  for (const TuningRule& r : t.rules) {
    if (r.nhosts < 0) {
      return InvalidArgumentError("rule with hosts " + std::to_string(r.nhosts) + " (0: any, else >= 1)");
    }
  }
  // The writer's checks are the parser's: format, then parse the text back.
  StatusOr<Tuning> back = ParseTuning(FormatTuning(t), t.origin.empty() ? "tuning" : t.origin);
  if (!back.ok()) return back.status();
  // Text that reads back differently (a meta text with '#', spaces around
  // it or a line break) would change on the way through a file.
  if (back->meta != t.meta) return InvalidArgumentError("a meta text has '#', a line break or outer spaces");
  return Status::Ok();
}

std::string FormatRule(const TuningRule& r) {
  return std::string("rule ") + CollectiveName(r.collective) + " " + transport::BackendName(r.backend) + " ranks " +
         std::to_string(r.nranks) + (r.nhosts > 0 ? " hosts " + std::to_string(r.nhosts) : std::string()) + " from " +
         std::to_string(r.from_bytes) + " " + r.algorithm;
}

std::string FormatTuning(const Tuning& t) {
  std::string out;
  out += "# ciuic tuning file: load with CIUIC_TUNING_FILE=<this file>; grammar in README.md (Tuning).\n";
  out += std::string(kMagic) + " " + std::to_string(kTuningFormatVersion) + "\n";
  for (const auto& [key, value] : t.meta) out += "meta " + key + " " + value + "\n";
  if (!t.backends.empty()) {
    out += "# backend NAME [between_hosts] alpha_us (one-way 8 B latency) beta_gbps (streaming) copy_gbps (local "
           "copy); *_dram_gbps: the same out of DRAM; exchange_*: both ways at once, sent + received (shm: each "
           "chunk copied out); cpu_gbps: per second of the machine's CPU; exchange_steps NAME BYTES GB/s ...: one "
           "step of BYTES each way alone, sent + received\n";
  }
  for (const BackendTuning& b : t.backends) {
    out += std::string("backend ") + transport::BackendName(b.backend);
    if (b.between_hosts) out += std::string(" ") + kBetweenHostsWord;
    if (b.alpha_us) out += " alpha_us " + Number(*b.alpha_us);
    if (b.beta_gbps) out += " beta_gbps " + Number(*b.beta_gbps);
    if (b.copy_gbps) out += " copy_gbps " + Number(*b.copy_gbps);
    if (b.beta_dram_gbps) out += " beta_dram_gbps " + Number(*b.beta_dram_gbps);
    if (b.copy_dram_gbps) out += " copy_dram_gbps " + Number(*b.copy_dram_gbps);
    if (b.exchange_gbps) out += " exchange_gbps " + Number(*b.exchange_gbps);
    if (b.exchange_dram_gbps) out += " exchange_dram_gbps " + Number(*b.exchange_dram_gbps);
    if (b.cpu_gbps) out += " cpu_gbps " + Number(*b.cpu_gbps);
    if (b.pair_cores) out += " pair_cores " + std::to_string(*b.pair_cores);
    out += "\n";
    if (!b.exchange_steps.empty()) {
      out += std::string("exchange_steps ") + transport::BackendName(b.backend);
      if (b.between_hosts) out += std::string(" ") + kBetweenHostsWord;
      for (const auto& [bytes, gbps] : b.exchange_steps) out += " " + std::to_string(bytes) + " " + Number(gbps);
      out += "\n";
    }
  }
  if (!t.gammas.empty()) out += "# gamma DTYPE OP GB/s of result bytes, dst = a OP b, L2-resident [dram GB/s]\n";
  for (const GammaTuning& g : t.gammas) {
    out += std::string("gamma ") + DataTypeName(g.dtype) + " " + ReduceOpName(g.op) + " " + Number(g.gbps) +
           (g.dram_gbps ? " dram " + Number(*g.dram_gbps) : std::string()) + "\n";
  }
  if (!t.memory.empty()) {
    out += "# memory WORKING_SET GB/s ...: the local copy rate by working set, cache to DRAM\n";
    out += "memory";
    for (const auto& [bytes, gbps] : t.memory) out += " " + std::to_string(bytes) + " " + Number(gbps);
    out += "\n";
  }
  if (t.memory_shared_cores != 0) {
    out += "# memory_shared CORES GB/s [beyond BYTES]: the copy rate out of DRAM of each of CORES cores copying at"
           " once; only working sets beyond BYTES (the cache they share) reach DRAM\n";
    out += "memory_shared " + std::to_string(t.memory_shared_cores) + " " + Number(t.memory_shared_gbps);
    if (t.memory_shared_beyond != 0) out += " beyond " + std::to_string(t.memory_shared_beyond);
    out += "\n";
  }
  if (!t.rules.empty()) {
    out += "# rule COLLECTIVE BACKEND ranks N [hosts H] from BYTES ALGORITHM (until the next rule's from)\n";
  }
  for (const TuningRule& r : t.rules) out += FormatRule(r) + "\n";
  return out;
}

bool MeasuredOnOneMachine(const Tuning& t) {
  for (const auto& [key, value] : t.meta) {
    if (key == "hosts") return value == "1";
  }
  return false;
}

bool ShmExchangeCopiesReceived(const Tuning& t) {
  for (const auto& [key, value] : t.meta) {
    if (key == kShmExchangeMetaKey) return value == kShmExchangeCopiesReceived;
  }
  return false;
}

const BackendTuning* FindBackendLine(const Tuning& t, transport::BackendKind backend, TuningLevel level) {
  const BackendTuning* plain = nullptr;
  const BackendTuning* between = nullptr;
  for (const BackendTuning& b : t.backends) {
    if (b.backend != backend) continue;
    (b.between_hosts ? between : plain) = &b;
  }
  if (level == TuningLevel::kOneMachine) return plain;
  if (between != nullptr) return between;
  // A plain line measured on one machine is loopback's: no network.
  return MeasuredOnOneMachine(t) ? nullptr : plain;
}

void ApplyTuning(const Tuning& t, transport::BackendKind backend, CostParams* p, DataType dtype, ReduceOp op,
                 TuningLevel level) {
  if (const BackendTuning* b = FindBackendLine(t, backend, level)) {
    if (b->alpha_us) p->alpha_s = *b->alpha_us * 1e-6;
    if (b->beta_gbps) p->beta_s_per_byte = 1.0 / (*b->beta_gbps * 1e9);
    if (b->copy_gbps) p->copy_s_per_byte = 1.0 / (*b->copy_gbps * 1e9);
    if (b->beta_dram_gbps) p->dram_beta_s_per_byte = 1.0 / (*b->beta_dram_gbps * 1e9);
    if (b->copy_dram_gbps) p->dram_copy_s_per_byte = 1.0 / (*b->copy_dram_gbps * 1e9);
    // A pair on one core took turns: each rank's own cost is half the time.
    const double turns = b->pair_cores == 1 ? 0.5 : 1.0;
    if (b->exchange_gbps) p->exchange_s_per_byte = turns / (*b->exchange_gbps * 1e9);
    if (b->exchange_dram_gbps) p->dram_exchange_s_per_byte = turns / (*b->exchange_dram_gbps * 1e9);
    p->exchange_steps.clear();
    // ciuic-tune's shm receivers copy each chunk out of the peer's memory
    // (files that say so).
    p->exchange_copies_received =
        b->exchange_gbps && backend == transport::BackendKind::kShm && ShmExchangeCopiesReceived(t);
    if (b->exchange_gbps) {
      // Each point as a factor on the stream's rate, its alpha taken out:
      // the model charges a step one alpha (its message's) + its bytes x
      // exchange x factor, which the point's own time then equals.
      for (const auto& [bytes, gbps] : b->exchange_steps) {
        const double both = 2.0 * static_cast<double>(bytes);
        const double own = turns * both / (gbps * 1e9) - p->alpha_s;
        p->exchange_steps.emplace_back(static_cast<double>(bytes),
                                       std::max(kMinExchangeStepFactor, own / (both * p->exchange_s_per_byte)));
      }
    }
    if (b->cpu_gbps) p->net_cpu_s_per_byte = 1.0 / (*b->cpu_gbps * 1e9);
  }
  if (t.memory.size() >= 2) {
    p->memory_curve.clear();
    for (const auto& [bytes, gbps] : t.memory) p->memory_curve.emplace_back(static_cast<double>(bytes), 1e-9 / gbps);
  }
  if (t.memory_shared_cores != 0) {
    p->dram_shared_cores = t.memory_shared_cores;
    p->dram_shared_copy_s_per_byte = 1e-9 / t.memory_shared_gbps;
    p->shared_cache_bytes = static_cast<double>(t.memory_shared_beyond);
  }
  const GammaTuning* found = nullptr;
  for (const GammaTuning& g : t.gammas) {
    if (g.dtype != dtype) continue;
    if (g.op == op) found = &g;
    if (found == nullptr && op == ReduceOp::kAvg && g.op == ReduceOp::kSum) found = &g;
  }
  if (found != nullptr) p->gamma_s_per_byte = 1.0 / (found->gbps * 1e9);
  if (found != nullptr) p->dram_gamma_s_per_byte = found->dram_gbps ? 1.0 / (*found->dram_gbps * 1e9) : 0;
}

const TuningRule* FindRule(const Tuning& t, Collective collective, transport::BackendKind backend, int nranks,
                           size_t bytes, int nhosts) {
  const TuningRule* exact = nullptr;  // of this host count
  const TuningRule* any = nullptr;    // without one
  for (const TuningRule& r : t.rules) {
    if (r.collective != collective || r.backend != backend || r.nranks != nranks || r.from_bytes > bytes) continue;
    const TuningRule** best = r.nhosts == nhosts ? &exact : r.nhosts == 0 ? &any : nullptr;
    if (best == nullptr) continue;  // another host count
    if (*best == nullptr || r.from_bytes > (*best)->from_bytes) *best = &r;
  }
  return exact != nullptr ? exact : any;
}

std::optional<std::string> TunedAlgorithm(const Tuning& t, Collective collective, transport::BackendKind backend,
                                          int nranks, size_t bytes, int nhosts) {
  const TuningRule* r = FindRule(t, collective, backend, nranks, bytes, nhosts);
  if (r == nullptr) return std::nullopt;
  return r->algorithm;
}

}  // namespace ciuic::collectives
