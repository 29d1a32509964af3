// Tuning files: cost-model parameters measured on a machine and the
// algorithm crossovers measured there, written by ciuic-tune and read by the
// communicator from CIUIC_TUNING_FILE.
//
// Format (version 1): UTF-8 text, one statement per line, fields separated
// by spaces or tabs; `#` starts a comment that runs to the end of the line;
// blank lines are ignored. Numbers are decimal (`1.5`, `2e-3`), sizes are
// integers of bytes (K/M/G suffixes = KiB/MiB/GiB accepted). Grammar:
//
//   file    := "ciuic-tuning 1"          first statement, exactly once
//              { meta | backend | exchange_steps | gamma | memory | memory_shared | rule }
//   meta    := "meta" KEY TEXT           KEY [a-z0-9_]+; TEXT = the rest of
//                                        the line (host, date, git, cpu, ...);
//                                        informational, each KEY once
//   backend := "backend" BACKEND [ "between_hosts" ] { FIELD VALUE }
//                                        at least one field, each once; one
//                                        line per (BACKEND, level)
//     BACKEND := shm | tcp | verbs
//     between_hosts: measured between two hosts (tcp or verbs), the network
//     level of a job across hosts; a line without it was measured inside
//     one machine. A job on several hosts takes the between_hosts line for
//     its network, else the plain line unless the file says `meta hosts 1`
//     (then loopback's figures are no network: the defaults stay).
//     alpha_us  VALUE > 0   one-way latency of a small message (8 B ping-pong
//                           over a Link, half the round trip), microseconds:
//                           the model's alpha (per chunk)
//     beta_gbps VALUE > 0   streaming bandwidth of full-slot writes over a
//                           Link, GB/s (1e9 B/s): the model's beta = 1/rate
//     copy_gbps VALUE > 0   local copy rate (slot -> buffer), GB/s
//     beta_dram_gbps, copy_dram_gbps VALUE > 0
//                           the same from buffers far larger than the
//                           caches (streamed from DRAM); see cache
//     exchange_gbps, exchange_dram_gbps VALUE > 0
//                           both ranks of the pair streaming at once: a
//                           rank's bytes sent and received together per
//                           second (in cache, out of DRAM); with cpu_cores
//                           the model's CPU time per byte a rank sends or
//                           receives (CostParams::exchange_s_per_byte; half
//                           of it with pair_cores 1, the pair taking turns
//                           on its core)
//     cpu_gbps VALUE > 0    between hosts: bytes sent + received per second
//                           of the machine's CPU time (all cores, the
//                           kernel's network stack included), the exchange
//                           with waits that sleep; with cpu_cores and hosts
//                           the model's CPU cost of a byte between hosts
//                           (CostParams::net_cpu_s_per_byte), apart from
//                           the link's rate
//     pair_cores 1 | 2      the measured pair shared one core (1) or could
//                           run on two (2)
//   exchange_steps := "exchange_steps" BACKEND [ "between_hosts" ] BYTES GBPS { BYTES GBPS }
//                                        after the backend line of the same
//                                        (BACKEND, level), at most once, by
//                                        increasing BYTES: one step alone,
//                                        both ranks of the pair sending
//                                        BYTES and receiving the other's,
//                                        steps back to back (a collective's
//                                        steps), a rank's bytes sent +
//                                        received per second. A lone step
//                                        that fits the transport's buffers
//                                        runs faster than the stream of
//                                        exchange_gbps (loopback tcp: about
//                                        2x at 512 KiB); with cpu_cores the
//                                        model charges a step of B bytes the
//                                        curve's rate at B (log-linear
//                                        between points, the end points'
//                                        beyond), less the step's alpha, scaled
//                                        with exchange_gbps by the working
//                                        set (CostParams::exchange_steps)
//   gamma   := "gamma" DTYPE OP GBPS [ "dram" GBPS ]
//                                        reduction rate of dst = a OP b at an
//                                        L2-resident size, GB/s of result
//                                        bytes (count x element size / time),
//                                        and with dram at a DRAM size; one
//                                        line per (DTYPE, OP)
//   memory  := "memory" { BYTES GBPS }   at most once, 2 or more pairs by
//                                        increasing BYTES: the local copy
//                                        rate at each working set (source
//                                        and destination bytes); the first
//                                        is a cache's, the last DRAM's. Where
//                                        a call's working set falls on it
//                                        places its rates between the cache
//                                        figures and the dram ones
//                                        (CostParams::memory_curve)
//   memory_shared := "memory_shared" CORES GBPS [ "beyond" BYTES ]
//                                        at most once, CORES >= 2: the copy
//                                        rate out of DRAM of each of CORES
//                                        cores copying at once (DRAM's rate
//                                        shared); with the backend line's
//                                        copy_dram_gbps (one core alone) it
//                                        slows the DRAM rates of ranks that
//                                        share a machine's cores
//                                        (CostParams::dram_shared_*); with
//                                        beyond, the cache those cores share
//                                        (> 0): only the part of a working
//                                        set beyond it reaches DRAM, and the
//                                        slowdown scales with that part;
//                                        beta and exchange (bytes between
//                                        cores) follow the memory curve only
//                                        beyond it (CostParams::
//                                        shared_cache_bytes)
//     DTYPE := i8 u8 i32 u32 i64 u64 f16 bf16 f32 f64;  OP := sum prod min max avg
//   rule    := "rule" COLL BACKEND "ranks" N [ "hosts" H ] "from" BYTES ALGO
//     For collective COLL (allreduce, broadcast, ... as CollectiveName), on
//     BACKEND with exactly N ranks (and with `hosts`, spread over exactly H
//     hosts, 1 <= H <= N), calls of BYTES bytes or more use ALGO, up to the
//     `from` of the next rule of the same (COLL, BACKEND, N, H). Within one
//     group the rules are sorted by strictly increasing `from`; sizes below
//     the first `from` have no rule. A call takes the rule of its host count
//     first, else one without `hosts` (any count), else the cost model
//     decides. BACKEND is the communicator's network kind when its pairs
//     mix kinds (shm inside hosts and tcp between: tcp). ALGO must be a registry entry of COLL (registry.h) that
//     runs on BACKEND: a schedule, or on shm the shared-memory family
//     (`direct`: all-reduce, broadcast, and the small reduce, all-gather,
//     reduce-scatter, all-to-all and barrier); a rule whose algorithm
//     cannot run a call (over the family's limits) leaves it to the model.
//
// Example:
//   ciuic-tuning 1
//   meta host node17
//   backend shm alpha_us 0.35 beta_gbps 14.2 copy_gbps 30.1
//   backend tcp between_hosts alpha_us 48.2 beta_gbps 0.118 copy_gbps 30.1
//   gamma f32 sum 21.5
//   rule allreduce shm ranks 2 from 0 recdoubling
//   rule allreduce shm ranks 2 from 65536 ring
//   rule allreduce tcp ranks 4 hosts 2 from 262144 hier
//
// Any other statement, a missing or repeated field, a value that is not a
// positive finite number, an unknown name, or unsorted or duplicate rules is
// an error naming the origin (file), the line and the problem.
//
// Thread contract: pure functions; a Tuning is a plain value.
#ifndef CIUIC_COLLECTIVES_TUNING_H_
#define CIUIC_COLLECTIVES_TUNING_H_

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ciuic/kernels.h"
#include "ciuic/status.h"
#include "transport/backend_kind.h"
#include "collectives/algorithms.h"
#include "collectives/cost_model.h"

namespace ciuic::collectives {

inline constexpr int kTuningFormatVersion = 1;

// Measured transport parameters of one backend; unset = not in the file.
struct BackendTuning {
  transport::BackendKind backend = transport::BackendKind::kShm;
  std::optional<double> alpha_us;
  std::optional<double> beta_gbps;
  std::optional<double> copy_gbps;
  std::optional<double> beta_dram_gbps;
  std::optional<double> copy_dram_gbps;
  std::optional<double> exchange_gbps;
  std::optional<double> exchange_dram_gbps;
  std::optional<double> cpu_gbps;
  bool between_hosts = false;  // measured between hosts (the network level)
  // The measured pair's cores: 1 where both ranks were bound to one core (a
  // stream's rate is then the sender's and the receiver's costs added), 2
  // where each could run on its own; unset: not said.
  std::optional<int> pair_cores;
  // The exchange_steps statement: (a step's bytes each way, GB/s sent +
  // received), by increasing bytes; empty: none.
  std::vector<std::pair<size_t, double>> exchange_steps;
  int line = 0;  // where it was read (0: built in code)
};

// Which figures of a backend a communicator wants: inside one machine, or
// between hosts (the network level of a job on several hosts).
enum class TuningLevel { kOneMachine, kBetweenHosts };

struct GammaTuning {
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  double gbps = 0;
  std::optional<double> dram_gbps;
  int line = 0;
};

struct TuningRule {
  Collective collective = Collective::kAllReduce;
  transport::BackendKind backend = transport::BackendKind::kShm;
  int nranks = 0;
  int nhosts = 0;  // 0: any host count
  size_t from_bytes = 0;
  std::string algorithm;  // a registry name of `collective`
  int line = 0;
};

struct Tuning {
  std::string origin;  // file name (or what the text came from), for messages
  std::vector<std::pair<std::string, std::string>> meta;  // in file order
  std::vector<BackendTuning> backends;                    // in file order
  std::vector<GammaTuning> gammas;                        // in file order
  std::vector<std::pair<size_t, double>> memory;          // the memory statement: (bytes, GB/s)
  int memory_shared_cores = 0;                            // memory_shared (0: none)
  double memory_shared_gbps = 0;
  size_t memory_shared_beyond = 0;                        // its `beyond` (0: none)
  std::vector<TuningRule> rules;                          // in file order
};

// Parses the text of a tuning file; `origin` names it in errors.
// Errors: kInvalidArgument "<origin>:<line>: <what is wrong>".
StatusOr<Tuning> ParseTuning(const std::string& text, const std::string& origin);

// Reads and parses `path`. Errors (each naming CIUIC_TUNING_FILE and the
// path): kNotFound (no such file), kUnavailable (cannot read it),
// kInvalidArgument (a parse error, with its line).
StatusOr<Tuning> LoadTuningFile(const std::string& path);

// The text of `tuning` in the format above (a short comment header, then
// meta, backend, gamma and rule lines in the order held). Numbers are
// written in their shortest exact form, so ParseTuning(FormatTuning(t))
// gives back the same values. Precondition: `tuning` satisfies the format's
// rules (as every parsed Tuning does); CheckTuning says whether it does.
std::string FormatTuning(const Tuning& tuning);

// Whether `tuning` (e.g. one built in code) satisfies the format's rules.
// Errors: kInvalidArgument naming the offending entry.
Status CheckTuning(const Tuning& tuning);

// One rule as the line that states it ("rule allreduce shm ranks 2 from
// 65536 ring").
std::string FormatRule(const TuningRule& rule);

// Whether the file says it was measured on one machine ("meta hosts 1", as
// ciuic-tune writes when it forks its ranks): its tcp line is then
// loopback's, which is not a network between hosts.
bool MeasuredOnOneMachine(const Tuning& tuning);

// "meta shm_exchange copies_received": the file's shm exchange figures were
// measured with each receiver copying its chunks out of the peer's memory
// (ciuic-tune writes it), so they include that copy; older files' do not,
// and the model then charges a received chunk its copy as before.
inline constexpr const char* kShmExchangeMetaKey = "shm_exchange";
inline constexpr const char* kShmExchangeCopiesReceived = "copies_received";
bool ShmExchangeCopiesReceived(const Tuning& tuning);

// The backend line that holds `backend`'s figures at `level`: kOneMachine
// the plain line; kBetweenHosts the between_hosts line, else the plain one
// unless the file was measured on one machine; nullptr when none applies.
const BackendTuning* FindBackendLine(const Tuning& tuning, transport::BackendKind backend, TuningLevel level);

// Overrides the fields of `params` the file has for `backend` at `level`
// (alpha, beta, copy and their dram figures: FindBackendLine), the gamma
// of (dtype, op) and its dram figure (avg falls back to sum's gamma: the
// executor reduces avg as a sum), the memory curve and memory_shared;
// leaves the others as they are.
void ApplyTuning(const Tuning& tuning, transport::BackendKind backend, CostParams* params,
                 DataType dtype = DataType::kFloat32, ReduceOp op = ReduceOp::kSum,
                 TuningLevel level = TuningLevel::kOneMachine);

// The rule that covers a call of `bytes` bytes of `collective` on `backend`
// with `nranks` ranks on `nhosts` hosts: the one with the largest
// from_bytes <= bytes among the rules for exactly that (collective,
// backend, nranks, nhosts), else among those without a host count; nullptr
// when there is none (no rule for them, or bytes below the first rule).
const TuningRule* FindRule(const Tuning& tuning, Collective collective, transport::BackendKind backend,
                           int nranks, size_t bytes, int nhosts = 1);

// FindRule's algorithm name, or nullopt when no rule applies.
std::optional<std::string> TunedAlgorithm(const Tuning& tuning, Collective collective,
                                          transport::BackendKind backend, int nranks, size_t bytes,
                                          int nhosts = 1);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_TUNING_H_
