// Private: the text records of a communicator's agreement (bootstrap.h),
// as pure functions: each rank's host record, rank 0's decision and the
// ranks of one host with their CPUs. They come from the store, so from other
// processes: every decoder checks what it reads and names what is
// malformed, and is fuzzed (tests/fuzz/fuzz_bootstrap.cc).
//
// Thread contract: pure values and functions.
#ifndef CIUIC_COLLECTIVES_BOOTSTRAP_WIRE_H_
#define CIUIC_COLLECTIVES_BOOTSTRAP_WIRE_H_

#include <string>
#include <vector>

#include "ciuic/status.h"
#include "transport/backend_kind.h"

namespace ciuic::collectives {

// `text` as std::to_string writes a number in [0, max] (no sign, space or
// leading zero): the records below have one encoding each, so what decodes
// re-encodes to the same bytes.
bool ParseCanonicalInt(const std::string& text, int max, int* out);
// The largest CPU number a record may carry (topology::ParseCpuList's).
inline constexpr int kMaxCpuNumber = 1 << 20;

// One rank's host record: "<host name> <host key> <verbs 0|1>[ <cpu>,<cpu>,...]".
struct HostRecord {
  std::string host;
  // What makes two ranks one host (shm between them): "<boot id>/<pid
  // namespace>/<host name>[/<CIUIC_HOST_ID>]" (shm takes its peers' memfds
  // by pidfd_getfd, so a pid namespace is a host); the host name alone
  // without /proc.
  std::string key;
  bool verbs = false;     // this rank can open a verbs device
  std::vector<int> cpus;  // empty: unknown (no affinity)

  // This process's: gethostname, /proc's boot id and pid namespace,
  // `host_id` (CIUIC_HOST_ID, may be empty), sched_getaffinity; `verbs` as
  // given (the caller probes).
  static HostRecord OfThisProcess(const std::string& host_id, bool verbs);
  // The CIUIC_HOST_ID the key carries ("" if none).
  std::string HostId() const;
  std::string Encode() const;
  // Errors: kDataLoss naming what is malformed.
  static StatusOr<HostRecord> Decode(const std::string& text);
};

// What rank 0 decided for the communicator.
struct CommDecision {
  // CIUIC_TRANSPORT when `forced`; else shm on one host, verbs between
  // hosts when every rank can open a device, tcp otherwise. PairKind is
  // what each pair uses.
  transport::BackendKind transport = transport::BackendKind::kShm;
  bool forced = false;            // CIUIC_TRANSPORT named a kind: every pair uses it
  std::vector<int> host_of;       // per rank, its host's index (in order of first appearance)
  std::vector<bool> verbs;        // per rank, whether it can open a verbs device
  // Unique per communicator: names shared segments and tags handshakes, so
  // a stale process of another job cannot connect by mistake.
  std::string job_id;
  // Some host runs more ranks than the CPUs they may use together: waits
  // then yield at once instead of spinning, and selection leaves out
  // algorithms whose many messages each cost a context switch.
  bool ranks_outnumber_cpus = false;
  // All ranks on one machine: the CPUs they may use together (the union of
  // their affinities), whose cores move shm's and loopback tcp's bytes, so
  // selection costs the ranks' work as sharing them (CostParams::cpu_cores).
  // 0: several machines, or an affinity unknown.
  int machine_cpus = 0;
  // The id of rank 0's tuning file ("none" without one): every rank must
  // load the same, or ranks would pick different algorithms for one call.
  std::string tuning_id = "none";
  std::string accumulate = "wire";  // rank 0's CIUIC_ACCUMULATE (all must match)
  // Rank 0's knobs that shape every schedule, "NAME=value;NAME=value"
  // (ScheduleKnobs; all must match: ranks running different schedules
  // would wait on each other until the timeout, or mix their bytes).
  std::string knobs = "-";

  // "<transport> <job id> <0|1>[/<machine cpus>] <tuning id> <accumulate> <forced 0|1>
  // <host_of, comma-separated> <verbs as 0/1 per rank> <knobs>".
  std::string Encode() const;
  // `nranks`: the communicator's size; a record for another size is
  // refused before its lists are read past that many ranks. Errors:
  // kDataLoss naming what is malformed (host indices not in order of first
  // appearance, lists of different lengths or not of nranks entries);
  // kInvalidArgument with rank 0's reason where it refused the communicator
  // (a record of kRefused and that reason).
  static StatusOr<CommDecision> Decode(const std::string& text, int nranks);
  static constexpr const char* kRefused = "refused ";

  int nhosts() const;
  // The kinds the pairs of this communicator use (sorted, one at least).
  std::vector<transport::BackendKind> KindsInUse() const;
  // The kind of the collectives' cost and tuning: the one kind in use, else
  // the network kind (verbs when no pair uses tcp).
  transport::BackendKind CollectiveKind() const;
};

// The kind of the pair (a, b), the same on both sides: CIUIC_TRANSPORT's
// when forced, shm inside a host, verbs between hosts when both ranks can
// open a device, tcp otherwise.
transport::BackendKind PairKind(const CommDecision& d, int a, int b);
// One line for CIUIC_DEBUG=INFO: the hosts and which pairs use what.
std::string DescribeRoutes(const CommDecision& d, const std::vector<std::string>& host_names);

// The ranks of one host and their CPUs, in rank order:
// "<rank>:<cpus>;<rank>:<cpus>;..." (cpus as "0-3,8"; empty: unknown).
struct LocalRanks {
  std::vector<int> ranks;
  std::vector<std::vector<int>> cpus;

  std::string Encode() const;
  // Errors: kDataLoss naming what is malformed.
  static StatusOr<LocalRanks> Decode(const std::string& text);
  // The position of `rank` (its local rank), -1 when it is not here.
  int LocalRankOf(int rank) const;
};

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_BOOTSTRAP_WIRE_H_
