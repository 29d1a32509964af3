// The communicator's agreement: host records, rank 0's decision (bootstrap.h).
#include "collectives/bootstrap.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "transport/backend.h"

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

HostRecord HostRecord::OfThisProcess() {
  HostRecord r;
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  r.host = buf;
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

CommDecision Decide(const std::vector<HostRecord>& hosts, const Config& config, int world_size,
                    const std::string& tuning_id) {
  CommDecision d;
  d.job_id = RandomHex(8);
  d.tuning_id = tuning_id;
  d.accumulate = config.accumulate;
  // Ranks and the union of their CPUs per host.
  std::map<std::string, std::pair<int, std::set<int>>> per_host;
  bool one_host = true;
  for (const HostRecord& h : hosts) {
    one_host &= h.host == hosts[0].host;
    auto& e = per_host[h.host];
    ++e.first;
    e.second.insert(h.cpus.begin(), h.cpus.end());
  }
  for (const auto& [host, e] : per_host) {
    if (!e.second.empty() && static_cast<int>(e.second.size()) < e.first) d.ranks_outnumber_cpus = true;
  }
  StatusOr<transport::BackendKind> forced = transport::ParseBackendKind(config.transport);
  if (config.transport != "auto" && forced.ok()) {
    d.transport = *forced;
  } else if (one_host) {
    d.transport = transport::BackendKind::kShm;
  } else {
    transport::BackendOptions probe;
    probe.config = config;
    probe.world_size = world_size;
    std::string why;
    d.transport = transport::BackendAvailable(transport::BackendKind::kVerbs, probe, &why)
                      ? transport::BackendKind::kVerbs
                      : transport::BackendKind::kTcp;
  }
  return d;
}

namespace {

// At a rendezvous timeout: the ranks whose host record never arrived, as
// "rank 2" / "ranks 2, 3 and 5" ("" if none is missing).
std::string MissingRanks(transport::Store& store, const std::string& prefix, int size) {
  std::vector<int> missing;
  for (int r = 0; r < size; ++r) {
    if (!store.Get(prefix + "/host/" + std::to_string(r), std::chrono::milliseconds(0)).ok()) missing.push_back(r);
  }
  if (missing.empty()) return "";
  std::string out = missing.size() == 1 ? "rank " : "ranks ";
  const size_t shown = std::min<size_t>(missing.size(), 16);
  for (size_t i = 0; i < shown; ++i) {
    if (i > 0) out += (i + 1 == missing.size()) ? " and " : ", ";
    out += std::to_string(missing[i]);
  }
  if (shown < missing.size()) out += " and " + std::to_string(missing.size() - shown) + " more";
  return out;
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
  const HostRecord mine = HostRecord::OfThisProcess();
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
    // Each host's ranks and their CPUs, before the decision: every rank
    // finds its host's once it has the decision.
    std::map<std::string, LocalRanks> per_host;
    for (int r = 0; r < size; ++r) {
      LocalRanks& l = per_host[hosts[r].host];
      l.ranks.push_back(r);
      l.cpus.push_back(hosts[r].cpus);
    }
    for (const auto& [host, l] : per_host) CIUIC_RETURN_IF_ERROR(store.Set(prefix + "/local/" + host, l.Encode()));
    CIUIC_RETURN_IF_ERROR(store.Set(prefix + "/transport", Decide(hosts, config, size, tuning_id).Encode()));
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
  StatusOr<CommDecision> d = CommDecision::Decode(*text);
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
  if (local != nullptr) {
    CIUIC_ASSIGN_OR_RETURN(std::string l, store.Get(prefix + "/local/" + mine.host, timeout));
    StatusOr<LocalRanks> decoded = LocalRanks::Decode(l);
    if (!decoded.ok()) return decoded.status();
    *local = std::move(*decoded);
  }
  return d;
}

}  // namespace ciuic::collectives
