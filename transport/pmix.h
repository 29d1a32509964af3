// Private: the PMIx bootstrap. When a launcher runs a PMIx server (Open MPI's
// mpirun, srun --mpi=pmix, prterun) it puts PMIX_NAMESPACE and PMIX_RANK
// into each process's environment; through the server we learn rank, size
// and local rank, and rank 0 hands the address of the TCP store it serves
// (and a fresh secret) to the others, so no CIUIC_STORE_ADDR is needed.
//
// Rendezvous data (PMIx_Put by rank 0 with scope PMIX_GLOBAL, committed, then
// one PMIx_Fence with PMIX_COLLECT_DATA over the namespace; the others
// PMIx_Get them from rank 0 of the namespace):
//   "ciuic.store"   string "host:port" (host: IPv4 dotted quad or IPv6 text
//                   without brackets; the port follows the last ':')
//   "ciuic.secret"  string: a fresh secret (64 hex digits) when rank 0 had no
//                   CIUIC_SECRET / CIUIC_SECRET_FILE, else "" (every rank is
//                   then expected to have the same configured secret).
// PMIx data stays inside the job (the launcher's server), so publishing the
// secret there is as private as the job's own environment.
//
// Built with CIUIC_WITH_PMIX: pmix.cc; without it pmix_unavailable.cc, whose
// functions return kUnimplemented. pmix_common.cc holds the parts that need
// no PMIx library (tested in tests/unit/transport/pmix_test.cc).
#ifndef CIUIC_TRANSPORT_PMIX_H_
#define CIUIC_TRANSPORT_PMIX_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ciuic/status.h"
#include "transport/transport.h"

namespace ciuic::transport::pmix {

using Lookup = std::function<const char*(const char*)>;

// Keys of the rendezvous data (see above).
inline constexpr const char kStoreKey[] = "ciuic.store";
inline constexpr const char kSecretKey[] = "ciuic.secret";

// True when `lookup` shows both PMIX_NAMESPACE and PMIX_RANK, i.e. a PMIx
// launcher started this process. Thread contract: calls `lookup` only.
bool VariablesPresent(const Lookup& lookup);

// Whether this build has the PMIx client (CIUIC_WITH_PMIX).
bool Available();

// What the launcher's PMIx server says about this process.
struct Identity {
  int rank = 0;
  int world_size = 1;
  int local_rank = -1;  // -1 = the server did not say
};

// Connects to the launcher's PMIx server (PMIx_Init once per process;
// PMIx_Finalize runs at exit) and reads rank, job size (PMIX_JOB_SIZE of the
// namespace) and local rank (PMIX_LOCAL_RANK, optional). The PMIx client
// reads its server's contact from the real process environment, so `lookup`
// must agree with it: a PMIX_NAMESPACE that only `lookup` shows (a test's
// fake environment) is kUnavailable without touching PMIx.
// Errors: kUnimplemented (built without PMIx), kUnavailable (no server:
// PMIx_Init failed, or PMIX_NAMESPACE is not in the process environment),
// kInternal (the server did not give the job size, or a value of an
// unexpected type). Thread contract: thread-safe (serialised internally).
StatusOr<Identity> Discover(const Lookup& lookup);

// The store rendezvous for a job found through Discover (job->launcher ==
// "pmix") without CIUIC_STORE_ADDR. Rank 0 starts a TcpStoreServer on every
// interface (port 0) with job->secret, or with a fresh random secret that it
// also stores in job->secret when that is empty, and publishes its address:
// the interface chosen by `socket_ifname` (CIUIC_SOCKET_IFNAME rules, see
// tcp/tcp_iface.h) and the real port; then every rank joins one fence
// (bounded by job->timeout) and ranks other than 0 read the address (and the
// secret, when theirs is empty). On return job->store_host/store_port (and
// maybe job->secret) are filled in on every rank.
// Returns: on rank 0 the running server, which the caller keeps alive for as
// long as the store is used (and must not start another one); nullptr on the
// other ranks. Errors: kUnimplemented (built without PMIx), kFailedPrecondition
// (Discover did not succeed first), kUnavailable (no usable interface, the
// server could not start, the fence failed or timed out, naming PMIx's error),
// kDataLoss (rank 0's published address is malformed).
// Thread contract: one call per process at a time, collective over the job.
StatusOr<std::unique_ptr<TcpStoreServer>> Rendezvous(JobInfo* job, const std::string& socket_ifname);

// --- Helpers without PMIx (pmix_common.cc) ---------------------------------

// "host:port" as published under kStoreKey.
std::string FormatStoreAddress(const std::string& host, uint16_t port);

// Splits a kStoreKey value at its last ':'. Errors: kDataLoss naming the
// value (no ':', empty host, port not in 1..65535).
Status ParseStoreAddress(const std::string& value, std::string* host, uint16_t* port);

// A fresh secret: 32 random bytes as 64 lowercase hex digits.
// Errors: kUnavailable (no randomness from the kernel).
StatusOr<std::string> MakeSecret();

// The address other hosts should use to reach a store listening on every
// interface: the numeric address of the interface `socket_ifname` selects
// (first up, non-loopback IPv4 by default; loopback when that is all there
// is). Errors: those of tcp::SelectInterface / ListInterfaces.
StatusOr<std::string> AdvertisedHost(const std::string& socket_ifname);

}  // namespace ciuic::transport::pmix

#endif  // CIUIC_TRANSPORT_PMIX_H_
