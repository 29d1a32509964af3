// ciuic-sim: predicts what a collective's schedules cost on a network
// model, at any rank count, with the cost model selection uses (one model,
// not two: collectives/cost_model.h). Per algorithm, rank count and size it
// prints the predicted time, algbw and busbw (nccl-tests' definitions), the
// critical path split into latency, bandwidth and compute, the extra time
// shared resources add beyond it (contention), the busiest resource, and
// how the figure was made (every rank's schedule; rank 0's alone under a
// rank symmetry; or an estimate).
//
//   ciuic-sim --coll allreduce --ranks 8,64,65536 --size 8,1M,64M
//             [--algo ring,swing|all] [--net SPEC|FILE] [--ranks-per-host K]
//             [--tuning FILE [--backend tcp|verbs|shm]] [--elem-size E]
//             [--chunk BYTES] [--channels C] [--radix K] [--aggregation A] [--exact-steps N]
//             [--cpu-cores C]
//             [--format table|csv|json]
//
// --net: "flat" (every pair one alpha and one link per rank), "hosts"
// (ranks-per-host ranks share a host: shm figures inside, the network
// between, the host's link shared by its ranks) or "torus" (dims=16x16:
// links between neighbours at gbps, hop_us per hop, dimension-order
// routes, messages sent at the same index of their ranks' sends sharing
// the links they cross; every rank's schedule is costed) or "fattree"
// (down=16,levels=2,oversub=2: leaf switches of 16 ranks, each level
// grouping 16 groups, the groups' links up and down carrying their ranks'
// bandwidth / oversub, shared likewise) or "rail" (with --ranks-per-host
// K: the i-th rank of every host has its own NIC on rail i; leaf=H hosts
// per rail leaf switch, default all; leaves meet at a spine whose links
// carry a leaf's bandwidth / oversub; a message changing rail or leaf
// climbs to the spine) or "dragonfly" (group=G,global=C: groups of G ranks,
// one hop apart inside a group, one global link each way between every
// two groups at C ranks' bandwidth, minimal routes, shared likewise), with
// figures as
// "flat:alpha_us=2,gbps=25,gamma_gbps=20,copy_gbps=33" or a file of
// "key value" lines (model, alpha_us, gbps, intra_alpha_us, intra_gbps,
// gamma_gbps, copy_gbps, net_cpu_gbps, exchange_gbps, intra_exchange_gbps,
// dims, hop_us, down, levels,
// oversub, leaf, group, global; # comments). --tuning takes the figures a
// tuning file (ciuic-tune) has for --backend: the plain line, and between
// hosts the between_hosts line. --cpu-cores C: the ranks share one machine
// of C cores whose CPUs move the bytes (tcp over loopback, shm), so each
// rank's sends, receives and reductions are serial and all ranks' work
// shares the cores; with hosts, a byte between hosts costs the CPU
// net_cpu_gbps (from --tuning: the between_hosts line's cpu_gbps, else the
// backend's plain line's exchange or stream, when the file also has its
// between_hosts line), not the link's rate; any other byte costs
// the CPU exchange_gbps where known (a rank's bytes sent + received per
// second with both ranks of a pair streaming at once; from --tuning: the
// line's exchange_gbps and exchange_dram_gbps), else its link's beta.
// --size is nccl-tests'
// size: the vector (all-reduce, broadcast, reduce), all ranks' blocks
// (all-gather, reduce-scatter), one rank's send buffer (all-to-all).
//
// Exit status: 0 ok, 1 a prediction failed, 2 bad usage (the message names
// the option).
#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/cost_model.h"
#include "collectives/registry.h"
#include "collectives/tuning.h"

namespace {

namespace coll = ciuic::collectives;
using ciuic::Status;
using ciuic::StatusOr;
using transport_kind = ciuic::transport::BackendKind;

constexpr int kUsage = 2;

std::vector<std::string> SplitList(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "64", "4K", "1M", "2G" (powers of 1024; K, KiB, M, MiB, G, GiB or B) or
// "1.5M": digits, an optional fraction, a whole number of bytes at most
// 10^15 ("1.5" and "0.3K" are refused, and so are signs, spaces, exponents).
StatusOr<size_t> ParseBytes(const std::string& opt, const std::string& s) {
  auto bad = [&](const std::string& why) {
    return ciuic::InvalidArgumentError(opt + ": '" + s + "' " + why + " (e.g. 8, 64K, 1.5M, 2G)");
  };
  constexpr uint64_t kMax = 1000000000000000ull;
  size_t i = 0;
  uint64_t whole = 0, frac = 0, scale = 1;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
    if (whole > kMax) return bad("is above 10^15 bytes");
    whole = whole * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  if (i == 0) return bad("is not a size");
  if (i < s.size() && s[i] == '.') {
    const size_t first = ++i;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
      if (i - first >= 9) return bad("has more than 9 decimals");
      frac = frac * 10 + static_cast<uint64_t>(s[i] - '0');
      scale *= 10;
    }
    if (i == first) return bad("is not a size");
  }
  const std::string unit = s.substr(i);
  uint64_t mul = 1;
  if (unit == "K" || unit == "KiB" || unit == "k") {
    mul = uint64_t{1} << 10;
  } else if (unit == "M" || unit == "MiB") {
    mul = uint64_t{1} << 20;
  } else if (unit == "G" || unit == "GiB") {
    mul = uint64_t{1} << 30;
  } else if (!unit.empty() && unit != "B") {
    return bad("is not a size");
  }
  // frac < scale <= 10^9 and mul <= 2^30: the product fits in 64 bits.
  if (frac * mul % scale != 0) return bad("is not a whole number of bytes");
  if (whole > kMax / mul) return bad("is above 10^15 bytes");
  const uint64_t bytes = whole * mul + frac * mul / scale;
  if (bytes > kMax) return bad("is above 10^15 bytes");
  return static_cast<size_t>(bytes);
}

StatusOr<long long> ParseInt(const std::string& opt, const std::string& s, long long lo, long long hi) {
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < lo || v > hi) {
    return ciuic::InvalidArgumentError(opt + ": '" + s + "' is not an integer in [" + std::to_string(lo) + ", " +
                                       std::to_string(hi) + "]");
  }
  return v;
}

// The network model: the cost model's parameters at its two levels.
struct Net {
  std::string model = "flat";  // flat | hosts | torus | fattree | rail | dragonfly
  coll::CostParams params;
};

Status SetNetKey(Net& net, const std::string& origin, const std::string& key, const std::string& value) {
  if (key == "model") {
    if (value != "flat" && value != "hosts" && value != "torus" && value != "fattree" &&
        value != "rail" && value != "dragonfly") {
      return ciuic::InvalidArgumentError(origin + ": model '" + value +
                                         "' is not one of flat, hosts, torus, fattree, rail, dragonfly");
    }
    net.model = value;
    return Status::Ok();
  }
  if (key == "dims") {  // AxBxC
    net.params.torus_dims.clear();
    for (const std::string& d : SplitList(value, 'x')) {
      StatusOr<long long> v = ParseInt(origin + ": dims", d, 1, 1 << 20);
      if (!v.ok()) return v.status();
      net.params.torus_dims.push_back(static_cast<int>(*v));
    }
    if (net.params.torus_dims.empty()) return ciuic::InvalidArgumentError(origin + ": dims '" + value + "' (e.g. 16x16)");
    return Status::Ok();
  }
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || !(v > 0) || !std::isfinite(v)) {
    return ciuic::InvalidArgumentError(origin + ": " + key + " '" + value + "' is not a positive number");
  }
  coll::CostParams& p = net.params;
  // A link's figures given: the measured step curve (relative to the
  // tuning's link, its alpha taken out) no longer describes it.
  if (key == "alpha_us" || key == "gbps") p.exchange_steps.clear();
  if (key == "intra_alpha_us" || key == "intra_gbps") p.intra_exchange_steps.clear();
  if (key == "alpha_us") {
    p.alpha_s = v * 1e-6;
  } else if (key == "gbps") {
    p.beta_s_per_byte = 1e-9 / v;
  } else if (key == "intra_alpha_us") {
    p.intra_alpha_s = v * 1e-6;
  } else if (key == "intra_gbps") {
    p.intra_beta_s_per_byte = 1e-9 / v;
  } else if (key == "gamma_gbps") {
    p.gamma_s_per_byte = 1e-9 / v;
  } else if (key == "copy_gbps") {
    p.copy_s_per_byte = 1e-9 / v;
  } else if (key == "net_cpu_gbps") {
    p.net_cpu_s_per_byte = 1e-9 / v;
  } else if (key == "exchange_gbps") {
    p.exchange_s_per_byte = 1e-9 / v;
    p.dram_exchange_s_per_byte = 0;
    p.exchange_steps.clear();  // a rate given is the rate at every size
    p.exchange_copies_received = false;  // and its receivers' copies are charged apart
  } else if (key == "intra_exchange_gbps") {
    p.intra_exchange_s_per_byte = 1e-9 / v;
    p.dram_intra_exchange_s_per_byte = 0;
    p.intra_exchange_steps.clear();
    p.intra_exchange_copies_received = false;
  } else if (key == "hop_us") {
    p.hop_latency_s = v * 1e-6;
  } else if (key == "down" || key == "levels") {
    if (v != std::floor(v) || v < (key == "down" ? 2 : 1) || v > 1e6) {
      return ciuic::InvalidArgumentError(origin + ": " + key + " '" + value + "' is not an integer >= " +
                                         (key == "down" ? "2" : "1"));
    }
    (key == "down" ? p.fattree_down : p.fattree_levels) = static_cast<int>(v);
  } else if (key == "leaf") {
    if (v != std::floor(v) || v > 1e6) {
      return ciuic::InvalidArgumentError(origin + ": leaf '" + value + "' is not an integer >= 1");
    }
    p.rail_leaf_hosts = static_cast<int>(v);
  } else if (key == "group") {
    if (v != std::floor(v) || v > (1 << 24)) {
      return ciuic::InvalidArgumentError(origin + ": group '" + value + "' is not an integer >= 1");
    }
    p.dragonfly_group = static_cast<int>(v);
  } else if (key == "global") {
    p.dragonfly_global = v;
  } else if (key == "oversub") {  // the fat tree's or the rails' spine, whichever the model is
    if (v < 1) return ciuic::InvalidArgumentError(origin + ": oversub '" + value + "' is below 1");
    p.fattree_oversub = v;
    p.rail_oversub = v;
  } else {
    return ciuic::InvalidArgumentError(origin + ": unknown key '" + key +
                                       "' (model, alpha_us, gbps, intra_alpha_us, intra_gbps, gamma_gbps, "
                                       "copy_gbps, net_cpu_gbps, exchange_gbps, intra_exchange_gbps, dims, hop_us, down, "
                                       "levels, oversub, leaf, group, global)");
  }
  return Status::Ok();
}

// "flat", "hosts:alpha_us=2,gbps=25" or a file of "key value" lines.
Status ParseNet(const std::string& spec, Net& net) {
  const std::string head = spec.substr(0, spec.find(':'));
  if (head == "flat" || head == "hosts" || head == "torus" || head == "fattree" || head == "rail" ||
      head == "dragonfly") {
    net.model = head;
    if (spec.size() == head.size()) return Status::Ok();
    for (const std::string& kv : SplitList(spec.substr(head.size() + 1), ',')) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) return ciuic::InvalidArgumentError("--net: '" + kv + "' is not key=value");
      CIUIC_RETURN_IF_ERROR(SetNetKey(net, "--net", kv.substr(0, eq), kv.substr(eq + 1)));
    }
    return Status::Ok();
  }
  std::ifstream in(spec);
  if (!in) {
    return ciuic::InvalidArgumentError("--net: '" + spec +
                                       "' is neither flat[:...], hosts[:...], torus:dims=AxB[,...], fattree:down=K,levels=L[,...], "
                                       "rail[:...], dragonfly:group=G[,...] "
                                       "nor a readable file");
  }
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string key, value, extra;
    if (!(words >> key)) continue;
    const std::string where = spec + ":" + std::to_string(n);
    if (!(words >> value) || (words >> extra)) return ciuic::InvalidArgumentError(where + ": want 'key value'");
    CIUIC_RETURN_IF_ERROR(SetNetKey(net, where, key, value));
  }
  return Status::Ok();
}

// Collectives whose --size is all ranks' blocks (Predict takes one block),
// as selection counts them.
bool BlockCollective(coll::Collective c) {
  using C = coll::Collective;
  return c == C::kAllGather || c == C::kReduceScatter || c == C::kAllToAll || c == C::kAllGatherv ||
         c == C::kReduceScatterv || c == C::kGather || c == C::kScatter || c == C::kAllToAllv;
}

// nccl-tests' bus bandwidth factor.
double BusFactor(coll::Collective c, int n) {
  const double nd = n;
  if (c == coll::Collective::kAllReduce) return 2 * (nd - 1) / nd;
  return BlockCollective(c) ? (nd - 1) / nd : 1;
}

struct Row {
  std::string algo;
  int ranks = 0;
  size_t bytes = 0;
  coll::Prediction pred;
  double sim_s = 0;
  std::string error;
};

// What shared resources add beyond the critical path.
double Contention(const coll::Prediction& p) {
  // An estimate's split already counts its busiest resource.
  if (p.method == coll::PredictionMethod::kEstimate) return 0;
  return p.contention_s + std::max(0.0, p.seconds - p.critical_path_s);
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// "32 MiB", "512 KiB", "1000 B": the largest unit that divides it.
std::string BytesText(double bytes) {
  const auto b = static_cast<unsigned long long>(bytes);
  if (b != 0 && b % (1ull << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b != 0 && b % (1ull << 10) == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "ciuic-sim: %s\n"
               "usage: ciuic-sim --coll COLLECTIVE --ranks N[,N...] --size S[,S...] [--algo NAME[,NAME]|all]\n"
               "                 [--net flat|hosts|torus|fattree|rail|dragonfly[:key=value,...]|FILE] [--ranks-per-host K]\n"
               "                 [--tuning FILE [--backend tcp|verbs|shm]] [--elem-size E] [--chunk BYTES]\n"
               "                 [--channels C] [--radix K] [--aggregation A] [--exact-steps N] [--cpu-cores C]\n"
               "                 [--format table|csv|json]\n",
               why.c_str());
  return kUsage;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> opt;
  const std::vector<std::string> known = {"--coll",  "--algo",     "--ranks", "--size",  "--net",
                                          "--ranks-per-host", "--tuning", "--backend", "--elem-size",
                                          "--chunk", "--channels", "--radix", "--format", "--exact-steps", "--cpu-cores",
                                          "--aggregation"};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      Usage("predicts collectives' times on a network model");
      return 0;
    }
    if (std::find(known.begin(), known.end(), a) == known.end()) return Usage("unknown option '" + a + "'");
    if (i + 1 >= argc) return Usage(a + " needs a value");
    opt[a] = argv[++i];
  }
  for (const char* need : {"--coll", "--ranks", "--size"}) {
    if (opt.count(need) == 0) return Usage(std::string(need) + " is required");
  }
  StatusOr<coll::Collective> c = coll::ParseCollective(opt["--coll"]);
  if (!c.ok()) return Usage("--coll: " + c.status().message());

  Net net;
  const std::string backend_name = opt.count("--backend") ? opt["--backend"] : "verbs";
  transport_kind backend = transport_kind::kVerbs;
  if (backend_name == "tcp") {
    backend = transport_kind::kTcp;
  } else if (backend_name == "shm") {
    backend = transport_kind::kShm;
  } else if (backend_name != "verbs") {
    return Usage("--backend: '" + backend_name + "' is not one of tcp, verbs, shm");
  }
  net.params = coll::DefaultCostParams(backend);
  if (opt.count("--tuning")) {
    StatusOr<coll::Tuning> t = coll::LoadTuningFile(opt["--tuning"]);
    if (!t.ok()) return Usage("--tuning: " + t.status().message());
    coll::CostParams inter = net.params;
    coll::ApplyTuning(*t, backend, &net.params);
    coll::ApplyTuning(*t, backend, &inter, ciuic::DataType::kFloat32, ciuic::ReduceOp::kSum,
                      coll::TuningLevel::kBetweenHosts);
    // Two levels: shm's figures inside a host, the backend's between.
    coll::CostParams shm = coll::DefaultCostParams(transport_kind::kShm);
    coll::ApplyTuning(*t, transport_kind::kShm, &shm);
    coll::TakeIntraFrom(shm, &net.params);
    if (opt.count("--ranks-per-host")) {
      // The plain line's CPU cost per byte both ways at once (ApplyTuning
      // halves a one-core pair's), before the network's figures replace it.
      const double plain_exchange = net.params.exchange_s_per_byte;
      net.params.alpha_s = inter.alpha_s;
      net.params.beta_s_per_byte = inter.beta_s_per_byte;
      net.params.dram_beta_s_per_byte = inter.dram_beta_s_per_byte;
      net.params.exchange_s_per_byte = inter.exchange_s_per_byte;
      net.params.dram_exchange_s_per_byte = inter.dram_exchange_s_per_byte;
      net.params.exchange_steps = inter.exchange_steps;
      net.params.exchange_copies_received = inter.exchange_copies_received;
      // A file measured across hosts that also has the backend inside one
      // machine (tcp over loopback, which the CPU limits): that is the
      // CPU's cost of the network's bytes, apart from its links' rate.
      const coll::BackendTuning* plain = coll::FindBackendLine(*t, backend, coll::TuningLevel::kOneMachine);
      const coll::BackendTuning* between = coll::FindBackendLine(*t, backend, coll::TuningLevel::kBetweenHosts);
      const bool both_lines = plain != nullptr && between != nullptr && between != plain;
      if (inter.net_cpu_s_per_byte > 0) {
        // Measured between the hosts themselves (cpu_gbps): the machine's
        // CPU time per byte, the path between hosts included.
        net.params.net_cpu_s_per_byte = inter.net_cpu_s_per_byte;
      } else if (both_lines && plain->exchange_gbps) {
        net.params.net_cpu_s_per_byte = plain_exchange;
      } else if (both_lines && plain->beta_gbps) {
        // A pair on one core streamed at the sender's and receiver's costs
        // added; the model charges each side, so half of it per side.
        net.params.net_cpu_s_per_byte = 1e-9 / *plain->beta_gbps * (plain->pair_cores == 1 ? 0.5 : 1.0);
      }
    }
  }
  if (opt.count("--cpu-cores")) {
    StatusOr<long long> k = ParseInt("--cpu-cores", opt["--cpu-cores"], 1, 1 << 20);
    if (!k.ok()) return Usage(k.status().message());
    net.params.cpu_cores = static_cast<double>(*k);
  }
  if (opt.count("--net")) {
    const Status s = ParseNet(opt["--net"], net);
    if (!s.ok()) return Usage(s.message());
  }
  int per_host = 1;
  if (opt.count("--ranks-per-host")) {
    StatusOr<long long> k = ParseInt("--ranks-per-host", opt["--ranks-per-host"], 1, 1 << 20);
    if (!k.ok()) return Usage(k.status().message());
    per_host = static_cast<int>(*k);
    if (!opt.count("--net")) net.model = "hosts";
  }
  if ((net.model == "hosts" || net.model == "rail") && per_host < 2) {
    return Usage("--net " + net.model + " needs --ranks-per-host K of 2 or more");
  }
  if (net.model != "rail" && net.params.rail_leaf_hosts > 0) return Usage("--net: leaf is for the rail model");
  if (net.model != "dragonfly" && net.params.dragonfly_global != 1) return Usage("--net: global is for the dragonfly model");
  if (net.model != "fattree" && net.model != "rail" && net.params.fattree_oversub != 1) {
    return Usage("--net: oversub is for the fattree and rail models");
  }
  if (net.model != "dragonfly" && net.params.dragonfly_group > 0) {
    return Usage("--net: group is for the dragonfly model");
  }
  if (net.model == "dragonfly" && net.params.dragonfly_group < 1) {
    return Usage("--net dragonfly needs group=G (ranks per group)");
  }
  // Rails: one leaf per rail joins every host unless leaf=H says otherwise.
  if (net.model == "rail" && net.params.rail_leaf_hosts == 0) net.params.rail_leaf_hosts = 1 << 20;
  if (net.model != "torus" && !net.params.torus_dims.empty()) return Usage("--net: dims is for the torus model");
  if (net.model != "fattree" && (net.params.fattree_down > 0 || net.params.fattree_levels > 0)) {
    return Usage("--net: down and levels are for the fattree model");
  }
  if (net.model == "flat" && per_host > 1) return Usage("--ranks-per-host needs --net hosts or rail");
  if (net.model == "torus" && net.params.torus_dims.empty()) return Usage("--net torus needs dims=AxB[xC]");
  if (net.model != "torus") net.params.torus_dims.clear();
  if (net.model == "fattree" && (net.params.fattree_down < 2 || net.params.fattree_levels < 1)) {
    return Usage("--net fattree needs down=K (ranks per leaf switch) and levels=L");
  }
  if (net.model != "fattree") net.params.fattree_levels = 0;
  if ((net.model == "torus" || net.model == "fattree" || net.model == "dragonfly") && per_host > 1) {
    return Usage("--net " + net.model + " takes one rank per node");
  }
  struct IntOpt {
    const char* name;
    long long lo, hi;
  };
  // Schedules without a rank symmetry are costed from every rank's up to
  // this many steps in all (about 0.8 GB), estimated beyond.
  net.params.max_exact_steps = 2000000;
  for (const IntOpt& o : {IntOpt{"--elem-size", 1, 64}, IntOpt{"--chunk", 1, 1ll << 40},
                          IntOpt{"--channels", 1, coll::kMaxChannels}, IntOpt{"--radix", 2, coll::kMaxRadix},
                          IntOpt{"--exact-steps", 0, 1ll << 34}, IntOpt{"--aggregation", 0, 1 << 24}}) {
    if (!opt.count(o.name)) continue;
    StatusOr<long long> v = ParseInt(o.name, opt[o.name], o.lo, o.hi);
    if (!v.ok()) return Usage(v.status().message());
    const std::string name = o.name;
    if (name == "--elem-size") net.params.elem_size = static_cast<size_t>(*v);
    if (name == "--chunk") net.params.chunk_bytes = static_cast<size_t>(*v);
    if (name == "--channels") net.params.nchannels = static_cast<int>(*v);
    if (name == "--radix") net.params.radix = static_cast<int>(*v);
    if (name == "--exact-steps") net.params.max_exact_steps = static_cast<size_t>(*v);
    if (name == "--aggregation") {
      if ((*v & (*v - 1)) != 0) return Usage("--aggregation: " + std::to_string(*v) + " is not a power of two (or 0: all)");
      net.params.aggregation = static_cast<int>(*v);
    }
  }
  const std::string format = opt.count("--format") ? opt["--format"] : "table";
  if (format != "table" && format != "csv" && format != "json") {
    return Usage("--format: '" + format + "' is not one of table, csv, json");
  }

  std::vector<int> ranks;
  for (const std::string& s : SplitList(opt["--ranks"], ',')) {
    StatusOr<long long> n = ParseInt("--ranks", s, 1, 1 << 24);
    if (!n.ok()) return Usage(n.status().message());
    ranks.push_back(static_cast<int>(*n));
  }
  std::vector<size_t> sizes;
  for (const std::string& s : SplitList(opt["--size"], ',')) {
    StatusOr<size_t> b = ParseBytes("--size", s);
    if (!b.ok()) return Usage(b.status().message());
    sizes.push_back(*b);
  }
  if (ranks.empty() || sizes.empty()) return Usage("--ranks and --size need at least one value");

  // The schedule algorithms asked for (hier only with hosts of several ranks).
  std::vector<const coll::AlgorithmInfo*> algos;
  const std::string algo_opt = opt.count("--algo") ? opt["--algo"] : "all";
  for (const coll::AlgorithmInfo* e : coll::EntriesFor(*c)) {
    if (e->kind != coll::AlgorithmKind::kSchedule) continue;
    if (algo_opt == "all") {
      if (e->needs_hosts && per_host < 2) continue;
      algos.push_back(e);
    }
  }
  if (algo_opt != "all") {
    for (const std::string& name : SplitList(algo_opt, ',')) {
      StatusOr<coll::Algorithm> a = coll::ParseAlgorithm(*c, name);
      const coll::AlgorithmInfo* e = a.ok() ? coll::FindEntry(*c, *a) : nullptr;
      if (e == nullptr || e->kind != coll::AlgorithmKind::kSchedule) {
        return Usage("--algo: '" + name + "' is not a schedule of " + opt["--coll"] + "; valid: " +
                     coll::AlgorithmNamesFor(*c));
      }
      algos.push_back(e);
    }
  }

  std::vector<Row> rows;
  int failures = 0;
  for (int n : ranks) {
    coll::CostParams p = net.params;
    p.host_of.clear();
    if (per_host > 1) {
      for (int r = 0; r < n; ++r) p.host_of.push_back(r / per_host);
    }
    for (size_t size : sizes) {
      // Predict's size: the vector, or one rank's block.
      const size_t per_call = BlockCollective(*c) ? size / static_cast<size_t>(n) : size;
      for (const coll::AlgorithmInfo* e : algos) {
        Row row;
        row.algo = e->name();
        row.ranks = n;
        row.bytes = size;
        const auto t0 = std::chrono::steady_clock::now();
        StatusOr<coll::Prediction> pred = coll::Predict(*c, e->id, per_call, n, p);
        row.sim_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (pred.ok()) {
          row.pred = *pred;
        } else {
          row.error = pred.status().ToString();
          ++failures;
        }
        rows.push_back(row);
      }
    }
  }

  std::string model_name = net.model;
  for (size_t i = 0; i < net.params.torus_dims.size(); ++i) {
    model_name += (i ? "x" : " ") + std::to_string(net.params.torus_dims[i]);
  }
  if (net.model == "fattree") {
    model_name += " " + std::to_string(net.params.fattree_levels) + " levels of " +
                  std::to_string(net.params.fattree_down) + ", oversubscribed " + Fixed(net.params.fattree_oversub, 1) +
                  ":1";
  }
  if (net.model == "rail") {
    model_name += " of " + std::to_string(per_host) + " rails, " +
                  (net.params.rail_leaf_hosts >= (1 << 20) ? std::string("one leaf per rail")
                                                           : std::to_string(net.params.rail_leaf_hosts) + " hosts per leaf") +
                  ", spine oversubscribed " + Fixed(net.params.rail_oversub, 1) + ":1";
  }
  if (net.model == "dragonfly") {
    model_name += " of groups of " + std::to_string(net.params.dragonfly_group) + ", global links of " +
                  Fixed(net.params.dragonfly_global, 2) + " ranks' bandwidth";
  }
  if (!net.params.torus_dims.empty() || net.model == "fattree" || net.model == "rail" || net.model == "dragonfly") {
    model_name += ", hop " + Fixed(net.params.hop_latency_s * 1e6, 2) + " us";
  }
  const std::string model_line =
      "# ciuic-sim " + opt["--coll"] + " on " + model_name + (per_host > 1 ? " (" + std::to_string(per_host) +
      " ranks per host)" : "") + ": alpha " + Fixed(net.params.alpha_s * 1e6, 2) + " us, " +
      Fixed(1e-9 / net.params.beta_s_per_byte, 2) + " GB/s" +
      (per_host > 1 ? "; inside a host alpha " + Fixed(net.params.intra_alpha_s * 1e6, 2) + " us, " +
                          Fixed(1e-9 / net.params.intra_beta_s_per_byte, 2) + " GB/s"
                    : "") +
      (net.params.cpu_cores > 0 ? "; " + Fixed(net.params.cpu_cores, 0) + " cores" +
                                      (net.params.exchange_s_per_byte > 0 && !(per_host > 1)
                                           ? " (a byte sent or received at " +
                                                 Fixed(1e-9 / net.params.exchange_s_per_byte, 2) + " GB/s of CPU)"
                                           : "") +
                                      (per_host > 1 && net.params.intra_exchange_s_per_byte > 0
                                           ? " (inside a host a byte sent or received at " +
                                                 Fixed(1e-9 / net.params.intra_exchange_s_per_byte, 2) +
                                                 " GB/s of CPU)"
                                           : "") +
                                      (per_host > 1 && net.params.net_cpu_s_per_byte > 0
                                           ? " (the network's bytes at " +
                                                 Fixed(1e-9 / net.params.net_cpu_s_per_byte, 2) + " GB/s of CPU)"
                                           : "") +
                                      (net.params.dram_shared_cores >= 2 && net.params.dram_shared_copy_s_per_byte > 0
                                           ? ", DRAM copy " + Fixed(1e-9 / net.params.dram_shared_copy_s_per_byte, 1) +
                                                 " GB/s each of " + std::to_string(net.params.dram_shared_cores) +
                                                 " at once" +
                                                 (net.params.shared_cache_bytes > 0
                                                      ? " beyond " + BytesText(net.params.shared_cache_bytes) +
                                                            " of shared cache"
                                                      : "")
                                           : "")
                                : "") +
      "; gamma " + Fixed(1e-9 / net.params.gamma_s_per_byte, 1) + " GB/s, copy " +
      Fixed(1e-9 / net.params.copy_s_per_byte, 1) + " GB/s; chunks of at most " +
      std::to_string(net.params.chunk_bytes) + " B (the executor's: a quarter of the call's block, 64 KiB at least)" +
      ", elements of " + std::to_string(net.params.elem_size) + " B";
  auto gbs = [](size_t bytes, double s) { return s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0.0; };
  if (format == "json") {
    std::printf("{\"collective\": %s, \"model\": %s, \"ranks_per_host\": %d, \"alpha_us\": %g, \"gbps\": %g,\n"
                " \"rows\": [\n",
                JsonString(opt["--coll"]).c_str(), JsonString(model_name).c_str(), per_host,
                net.params.alpha_s * 1e6, 1e-9 / net.params.beta_s_per_byte);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      const coll::Prediction& p = r.pred;
      std::printf("  {\"algorithm\": %s, \"ranks\": %d, \"bytes\": %zu, ", JsonString(r.algo).c_str(), r.ranks,
                  r.bytes);
      if (!r.error.empty()) {
        std::printf("\"error\": %s}%s\n", JsonString(r.error).c_str(), i + 1 < rows.size() ? "," : "");
        continue;
      }
      std::printf("\"time_us\": %.6g, \"algbw_gbps\": %.6g, \"busbw_gbps\": %.6g, \"latency_us\": %.6g, "
                  "\"bandwidth_us\": %.6g, \"compute_us\": %.6g, \"contention_us\": %.6g, \"bound_by\": %s, "
                  "\"method\": %s, \"messages_per_rank\": %zu, \"bytes_sent_per_rank\": %zu, \"sim_s\": %.4g}%s\n",
                  p.seconds * 1e6, gbs(r.bytes, p.seconds), gbs(r.bytes, p.seconds) * BusFactor(*c, r.ranks),
                  p.latency_s * 1e6, p.bandwidth_s * 1e6, p.compute_s * 1e6,
                  Contention(p) * 1e6, JsonString(p.busiest).c_str(),
                  JsonString(coll::PredictionMethodName(p.method)).c_str(), p.max_messages_per_rank,
                  p.max_bytes_sent_per_rank, r.sim_s, i + 1 < rows.size() ? "," : "");
    }
    std::printf(" ]}\n");
  } else {
    const bool csv = format == "csv";
    std::printf("%s\n", model_line.c_str());
    if (csv) {
      std::printf("algorithm,ranks,bytes,time_us,algbw_gbps,busbw_gbps,latency_us,bandwidth_us,compute_us,"
                  "contention_us,bound_by,method,messages_per_rank,sim_s\n");
    } else {
      std::printf("%-13s %8s %12s %12s %9s %9s %11s %11s %11s %11s %-10s %s\n", "algorithm", "ranks", "bytes",
                  "time_us", "algbw", "busbw", "latency_us", "bandw_us", "compute_us", "content_us", "method",
                  "bound by");
    }
    for (const Row& r : rows) {
      const coll::Prediction& p = r.pred;
      if (!r.error.empty()) {
        std::printf(csv ? "%s,%d,%zu,error: %s\n" : "%-13s %8d %12zu error: %s\n", r.algo.c_str(), r.ranks, r.bytes,
                    r.error.c_str());
        continue;
      }
      if (csv) {
        std::printf("%s,%d,%zu,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%s,%s,%zu,%.4g\n", r.algo.c_str(), r.ranks, r.bytes,
                    p.seconds * 1e6, gbs(r.bytes, p.seconds), gbs(r.bytes, p.seconds) * BusFactor(*c, r.ranks),
                    p.latency_s * 1e6, p.bandwidth_s * 1e6, p.compute_s * 1e6,
                    Contention(p) * 1e6, p.busiest.c_str(),
                    coll::PredictionMethodName(p.method), p.max_messages_per_rank, r.sim_s);
      } else {
        std::printf("%-13s %8d %12zu %12.2f %9.3f %9.3f %11.2f %11.2f %11.2f %11.2f %-10s %s\n", r.algo.c_str(),
                    r.ranks, r.bytes, p.seconds * 1e6, gbs(r.bytes, p.seconds),
                    gbs(r.bytes, p.seconds) * BusFactor(*c, r.ranks), p.latency_s * 1e6, p.bandwidth_s * 1e6,
                    p.compute_s * 1e6, Contention(p) * 1e6,
                    coll::PredictionMethodName(p.method), p.busiest.c_str());
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
