// The communicator's agreement: host records, rank 0's decision (bootstrap.h).
#include "collectives/bootstrap.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "collectives/selection.h"
#include "common/log.h"
#include "transport/backend.h"
#include "transport/transport.h"

namespace ciuic::collectives {
namespace {

std::string RandomHex(int bytes) {
  std::random_device rd;
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < bytes; ++i) {
    const unsigned v = rd() & 0xff;
    s += kHex[v >> 4];
    s += kHex[v & 15];
  }
  return s;
}

}  // namespace

HostRecord HostRecord::OfThisProcess(const std::string& host_id, bool verbs) {
  HostRecord r;
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  r.host = buf;
  if (r.host.empty()) r.host = "unnamed";
  // ProcessIdentity is "<boot id> <pid ns> <pid> <start>": its first two
  // fields, where /proc has them.
  const std::string id = transport::ProcessIdentity();
  const size_t sp1 = id.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? sp1 : id.find(' ', sp1 + 1);
  r.key = sp2 == std::string::npos ? r.host : id.substr(0, sp1) + "/" + id.substr(sp1 + 1, sp2 - sp1 - 1) + "/" + r.host;
  if (!host_id.empty()) r.key += "/" + host_id;
  r.verbs = verbs;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) r.cpus.push_back(c);
    }
  }
  return r;
}

std::string TuningId(const std::string* canonical_text) {
  return canonical_text == nullptr ? "none" : std::to_string(std::hash<std::string>()(*canonical_text));
}

StatusOr<std::string> ScheduleKnobs(const Config& config) {
  CIUIC_ASSIGN_OR_RETURN(AlgoKnob algo, AlgoKnob::Parse(config.algo));
  return "CIUIC_ALGO=" + algo.Canonical() + ";CIUIC_NCHANNELS=" + std::to_string(config.nchannels) +
         ";CIUIC_KNOMIAL_RADIX=" + std::to_string(config.knomial_radix != 0 ? config.knomial_radix : kDefaultRadix) +
         ";CIUIC_PAT_AGGREGATION=" + std::to_string(config.pat_aggregation) +
         ";CIUIC_SCRATCH_MAX=" + std::to_string(config.scratch_max_bytes);
}

Status SameScheduleKnobs(const std::string& mine, const std::string& theirs, int rank) {
  if (mine == theirs) return Status::Ok();
  auto split = [](const std::string& text) {
    std::map<std::string, std::string> out;
    for (size_t at = 0; at <= text.size();) {
      const size_t end = std::min(text.find(';', at), text.size());
      const std::string item = text.substr(at, end - at);
      const size_t eq = item.find('=');
      if (eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
      at = end + 1;
    }
    return out;
  };
  const std::map<std::string, std::string> a = split(mine), b = split(theirs);
  for (const auto& [name, value] : a) {
    auto it = b.find(name);
    const std::string other = it == b.end() ? "(not set)" : LogSafe(it->second, 256);
    if (it == b.end() || it->second != value) {
      return InvalidArgumentError("rank " + std::to_string(rank) + ": " + name + "=" + value + " differs from rank 0's " +
                                  other + ": every rank must use the same (ranks would run different schedules)");
    }
  }
  return InvalidArgumentError("rank " + std::to_string(rank) + ": the schedule knobs '" + LogSafe(mine, 256) +
                              "' differ from rank 0's '" + LogSafe(theirs, 256) + "': every rank must use the same");
}

CommDecision Decide(const std::vector<HostRecord>& hosts, const Config& config, int world_size,
                    const std::string& tuning_id) {
  (void)world_size;
  CommDecision d;
  d.job_id = RandomHex(8);
  d.tuning_id = tuning_id;
  d.accumulate = config.accumulate;
  // A CIUIC_ALGO that does not parse fails in the communicator on every rank.
  if (StatusOr<std::string> knobs = ScheduleKnobs(config); knobs.ok()) d.knobs = *knobs;
  // Hosts by key in order of first appearance. Ranks and the union of
  // their CPUs per machine (the key's boot id): simulated hosts and
  // CIUIC_HOST_ID split a machine, not its CPUs.
  std::map<std::string, int> index;
  std::map<std::string, std::pair<int, std::set<int>>> per_machine;
  bool all_verbs = true;
  for (const HostRecord& h : hosts) {
    auto [it, added] = index.emplace(h.key, static_cast<int>(index.size()));
    d.host_of.push_back(it->second);
    d.verbs.push_back(h.verbs);
    all_verbs &= h.verbs;
    auto& e = per_machine[h.key.substr(0, h.key.find('/'))];
    ++e.first;
    e.second.insert(h.cpus.begin(), h.cpus.end());
  }
  bool every_affinity = true;
  for (const HostRecord& h : hosts) every_affinity &= !h.cpus.empty();
  for (const auto& [machine, e] : per_machine) {
    if (!e.second.empty() && static_cast<int>(e.second.size()) < e.first) d.ranks_outnumber_cpus = true;
    if (per_machine.size() == 1 && every_affinity) d.machine_cpus = static_cast<int>(e.second.size());
  }
  StatusOr<transport::BackendKind> forced = transport::ParseBackendKind(config.transport);
  if (config.transport != "auto" && forced.ok()) {
    d.forced = true;
    d.transport = *forced;
  } else if (index.size() <= 1) {
    d.transport = transport::BackendKind::kShm;
  } else {
    d.transport = all_verbs ? transport::BackendKind::kVerbs : transport::BackendKind::kTcp;
  }
  return d;
}

namespace {

// "rank 2" / "ranks 2, 3 and 5", at most 16 listed.
std::string RankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  const size_t shown = std::min<size_t>(ranks.size(), 16);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += (i + 1 == ranks.size()) ? " and " : ", ";
    out += std::to_string(ranks[i]);
  }
  if (shown < ranks.size()) out += " and " + std::to_string(ranks.size() - shown) + " more";
  return out;
}

// The machine part of a host key: boot id and pid namespace where /proc
// gave them ("<boot>/<ns>/<name>[/<id>]"), else the host name.
std::string MachineOf(const std::string& key) {
  const size_t first = key.find('/');
  const size_t second = first == std::string::npos ? first : key.find('/', first + 1);
  return second == std::string::npos ? key.substr(0, first) : key.substr(0, second);
}

}  // namespace

Status ForcedTransportReachesEveryPair(const std::vector<HostRecord>& hosts, const CommDecision& d) {
  if (!d.forced || d.transport != transport::BackendKind::kShm) return Status::Ok();
  std::vector<std::string> machines;
  std::vector<std::vector<int>> ranks;
  for (size_t r = 0; r < hosts.size(); ++r) {
    const std::string m = MachineOf(hosts[r].key);
    const size_t i = static_cast<size_t>(std::find(machines.begin(), machines.end(), m) - machines.begin());
    if (i == machines.size()) {
      machines.push_back(m);
      ranks.emplace_back();
    }
    ranks[i].push_back(static_cast<int>(r));
  }
  if (machines.size() <= 1) return Status::Ok();
  std::string where;
  const size_t shown = std::min<size_t>(machines.size(), 8);
  for (size_t i = 0; i < shown; ++i) {
    where += (i == 0 ? "" : i + 1 == machines.size() ? " and " : ", ") + RankList(ranks[i]) + " on " +
             LogSafe(hosts[static_cast<size_t>(ranks[i][0])].host);
  }
  if (shown < machines.size()) where += " and " + std::to_string(machines.size() - shown) + " more machines";
  return InvalidArgumentError("CIUIC_TRANSPORT=shm joins only ranks of one machine (one boot id and pid namespace), "
                              "but " + where + " are on " + std::to_string(machines.size()) +
                              " different ones: unset it (auto: shm inside each machine, the network between) or "
                              "name tcp or verbs");
}

bool VerbsUsableHere(const Config& config, int world_size) {
  // Probed once per process and value of the knobs the probe reads
  // (CIUIC_IB_HCA, CIUIC_IB_GID_INDEX): opening a device takes milliseconds,
  // and a process may create many communicators. Without a device the
  // probe is libibverbs' sysfs scan (0.02 ms here), so it needs no
  // shortcut of its own.
  static std::mutex mu;
  static std::map<std::string, bool> known;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = config.ib_hca + '\n' + std::to_string(config.ib_gid_index);
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  transport::BackendOptions probe;
  probe.config = config;
  probe.world_size = world_size;
  std::string why;
  const bool ok = transport::BackendAvailable(transport::BackendKind::kVerbs, probe, &why);
  if (!ok) CIUIC_LOG(kInfo, "verbs unusable on this rank: %s", why.c_str());
  known.emplace(key, ok);
  return ok;
}

namespace {

// At a rendezvous timeout: the ranks whose host record never arrived, as
// "rank 2" / "ranks 2, 3 and 5" ("" if none is missing).
std::string MissingRanks(transport::Store& store, const std::string& prefix, int size) {
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    if (!store.Get(prefix + "/host/" + std::to_string(r), std::chrono::milliseconds(0)).ok()) missing.push_back(r);
  }
  return missing.empty() ? "" : RankList(missing);
}

// A rendezvous wait that timed out, naming who never joined.
Status NotJoined(transport::Store& store, const std::string& prefix, int size, std::chrono::milliseconds timeout,
                 const Status& waited) {
  if (waited.code() != StatusCode::kDeadlineExceeded) return waited;
  const std::string missing = MissingRanks(store, prefix, size);
  if (missing.empty()) return waited;
  return DeadlineExceededError(missing + " of " + std::to_string(size) + " did not join the communicator within " +
                               std::to_string(timeout.count()) + " ms (no record under '" + prefix +
                               "/host/'): failed before reaching the store, or not started");
}

}  // namespace

StatusOr<CommDecision> AgreeOnCommunicator(transport::Store& store, const std::string& prefix, int rank, int size,
                                           const Config& config, const std::string& tuning_id,
                                           std::chrono::milliseconds timeout, LocalRanks* local) {
  if (config.transport != "auto") {
    StatusOr<transport::BackendKind> kind = transport::ParseBackendKind(config.transport);
    if (!kind.ok()) return InvalidArgumentError("CIUIC_TRANSPORT: " + kind.status().message());
  }
  // The identity before the host record: every rank has set both once any
  // rank is past this point (rank 0 reads all host records first).
  CIUIC_RETURN_IF_ERROR(store.Set(prefix + "/process/" + std::to_string(rank), transport::ProcessIdentity()));
  // Only auto asks the network's kind per pair; a probe costs little where
  // there is no device (no sysfs entries).
  const bool verbs = config.transport == "auto" && VerbsUsableHere(config, size);
  const HostRecord mine = HostRecord::OfThisProcess(config.host_id, verbs);
  CIUIC_RETURN_IF_ERROR(store.Set(prefix + "/host/" + std::to_string(rank), mine.Encode()));
  if (rank == 0) {
    std::vector<HostRecord> hosts;
    for (int r = 0; r < size; ++r) {
      StatusOr<std::string> v = store.Get(prefix + "/host/" + std::to_string(r), timeout);
      if (!v.ok()) return NotJoined(store, prefix, size, timeout, v.status());
      StatusOr<HostRecord> h = HostRecord::Decode(*v);
      if (!h.ok()) return DataLossError("rank " + std::to_string(r) + ": " + h.status().message());
      hosts.push_back(std::move(*h));
    }
    const CommDecision decided = Decide(hosts, config, size, tuning_id);
    if (Status s = ForcedTransportReachesEveryPair(hosts, decided); !s.ok()) {
      // Every rank reads the refusal in place of a decision, at once.
      (void)store.Set(prefix + "/transport", std::string(CommDecision::kRefused) + s.message());
      return s;
    }
    // Each host's ranks and their CPUs, before the decision: every rank
    // finds its host's once it has the decision.
    std::vector<LocalRanks> per_host(static_cast<size_t>(decided.nhosts()));
    std::vector<std::string> names(per_host.size());
    for (int r = 0; r < size; ++r) {
      const auto h = static_cast<size_t>(decided.host_of[static_cast<size_t>(r)]);
      per_host[h].ranks.push_back(r);
      per_host[h].cpus.push_back(hosts[static_cast<size_t>(r)].cpus);
      if (names[h].empty()) {
        const std::string id = hosts[static_cast<size_t>(r)].HostId();
        names[h] = hosts[static_cast<size_t>(r)].host + (id.empty() ? std::string() : "[" + id + "]");
      }
    }
    for (size_t h = 0; h < per_host.size(); ++h) {
      CIUIC_RETURN_IF_ERROR(store.Set(prefix + "/local/" + std::to_string(h), per_host[h].Encode()));
    }
    if (size > 1) CIUIC_LOG(kInfo, "transports: %s", DescribeRoutes(decided, names).c_str());
    CIUIC_RETURN_IF_ERROR(store.Set(prefix + "/transport", decided.Encode()));
  }
  StatusOr<std::string> text = store.Get(prefix + "/transport", timeout);
  if (!text.ok()) {
    // Rank 0 decides once every rank has joined: name who has not, or
    // rank 0's own failure.
    if (StatusOr<std::string> failed = store.Get(InitFailedKey(prefix, 0), std::chrono::milliseconds(0)); failed.ok()) {
      return UnavailableError("rank 0 failed to initialise: " + *failed);
    }
    return NotJoined(store, prefix, size, timeout, text.status());
  }
  StatusOr<CommDecision> d = CommDecision::Decode(*text, size);
  if (!d.ok() && d.status().code() == StatusCode::kInvalidArgument) return d.status();  // rank 0's refusal
  if (!d.ok()) return Status(d.status().code(), "rank " + std::to_string(rank) + ": " + d.status().message());
  if (d->tuning_id != tuning_id) {
    return InvalidArgumentError("rank " + std::to_string(rank) + ": CIUIC_TUNING_FILE (" +
                                (config.tuning_file.empty() ? std::string("unset") : "'" + config.tuning_file + "'") +
                                ") differs from rank 0's: every rank must use the same tuning file");
  }
  if (d->accumulate != config.accumulate) {
    // Ranks that widen differently would send each other different types.
    return InvalidArgumentError("rank " + std::to_string(rank) + ": CIUIC_ACCUMULATE=" + config.accumulate +
                                " differs from rank 0's " + d->accumulate + ": every rank must use the same");
  }
  if (StatusOr<std::string> knobs = ScheduleKnobs(config); knobs.ok() && d->knobs != "-") {
    CIUIC_RETURN_IF_ERROR(SameScheduleKnobs(*knobs, d->knobs, rank));
  }
  if (local != nullptr) {
    CIUIC_ASSIGN_OR_RETURN(std::string l, store.Get(prefix + "/local/" +
                                                        std::to_string(d->host_of[static_cast<size_t>(rank)]),
                                                    timeout));
    StatusOr<LocalRanks> decoded = LocalRanks::Decode(l);
    if (!decoded.ok()) return decoded.status();
    // The host's ranks must be the decision's, this rank among them.
    const int h = d->host_of[static_cast<size_t>(rank)];
    std::vector<int> want;
    for (int r = 0; r < size; ++r) {
      if (d->host_of[static_cast<size_t>(r)] == h) want.push_back(r);
    }
    if (decoded->ranks != want) {
      return DataLossError("rank " + std::to_string(rank) + ": rank 0's local ranks of host " + std::to_string(h) +
                           " (" + RankList(decoded->ranks) + ") are not its decision's (" + RankList(want) + ")");
    }
    *local = std::move(*decoded);
  }
  return d;
}

}  // namespace ciuic::collectives
