// Private: how the ranks of a new communicator agree on what it is. Every
// rank publishes its process identity (for liveness checks) and a host
// record (host name and the CPUs it may run on); rank 0 reads every rank's
// record, decides the transport and whether some host runs more ranks than
// CPUs, and publishes that decision with a fresh job id and the id of its
// tuning file; every rank reads it back. So every rank builds the same
// communicator from the same decision.
//
// Thread contract: pure values and one blocking function, called from the
// thread creating the communicator.
#ifndef CIUIC_COLLECTIVES_BOOTSTRAP_H_
#define CIUIC_COLLECTIVES_BOOTSTRAP_H_

#include <chrono>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/status.h"
#include "ciuic/store.h"
#include "collectives/bootstrap_wire.h"
#include "collectives/topology_plan.h"
#include "transport/backend_kind.h"

namespace ciuic::collectives {

// The store key where a rank that failed in Communicator creation leaves
// its error for the ranks waiting to connect to it.
inline std::string InitFailedKey(const std::string& prefix, int rank) {
  return prefix + "/init_failed/" + std::to_string(rank);
}

// The id of a tuning file's contents (its canonical text's hash), or
// "none".
std::string TuningId(const std::string* canonical_text);

// The knobs that shape every schedule, as CommDecision::knobs carries them:
// "CIUIC_ALGO=<AlgoKnob::Canonical>;CIUIC_NCHANNELS=<n>;CIUIC_KNOMIAL_RADIX=<k>;
// CIUIC_PAT_AGGREGATION=<a>;CIUIC_SCRATCH_MAX=<bytes>" (it decides whether
// a gathering schedule runs), each by meaning (radix 0 is written as the
// default it stands for). Errors: CIUIC_ALGO's
// parse error (the communicator reports it).
StatusOr<std::string> ScheduleKnobs(const Config& config);

// kInvalidArgument naming the first knob where `mine` differs from rank
// 0's `theirs` ("rank 1: CIUIC_NCHANNELS=2 differs from rank 0's 1: ..."),
// else Ok.
Status SameScheduleKnobs(const std::string& mine, const std::string& theirs, int rank);

// Rank 0's decision from every rank's host record: hosts by their records'
// keys, CIUIC_TRANSPORT for every pair when it is not auto, else each
// pair's kind by PairKind (shm inside a host, verbs between hosts where both
// ranks can open a device, tcp otherwise). Pure.
CommDecision Decide(const std::vector<HostRecord>& hosts, const Config& config, int world_size,
                    const std::string& tuning_id);

// Whether the transport CIUIC_TRANSPORT forced can join every pair: shm
// only ranks of one machine (boot id and pid namespace; simulated hosts and
// CIUIC_HOST_ID split a machine, not its memory). Errors: kInvalidArgument
// naming CIUIC_TRANSPORT and which ranks are on which machine.
Status ForcedTransportReachesEveryPair(const std::vector<HostRecord>& hosts, const CommDecision& d);

// Whether this process can open a verbs device with `config`'s device and
// GID knobs (what each rank publishes under auto). Probed once per process
// and value of those knobs.
bool VerbsUsableHere(const Config& config, int world_size);

// The whole exchange through `store` under `prefix` (keys process/<r>,
// host/<r>, local/<host index>, transport): publishes this rank's identity and host record, and
// returns rank 0's decision. Errors: the store's (kDeadlineExceeded naming
// the key of a rank that never came), kDataLoss (a malformed record),
// kInvalidArgument naming CIUIC_TRANSPORT (an unknown name; on every rank
// when rank 0 finds the forced kind cannot join the ranks' hosts) or
// CIUIC_TUNING_FILE (this rank's file differs from rank 0's).
// `local` (optional) gets the ranks of this host and their CPUs (key
// local/<host index>, published by rank 0 with its decision).
StatusOr<CommDecision> AgreeOnCommunicator(transport::Store& store, const std::string& prefix, int rank, int size,
                                           const Config& config, const std::string& tuning_id,
                                           std::chrono::milliseconds timeout, LocalRanks* local = nullptr);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_BOOTSTRAP_H_
