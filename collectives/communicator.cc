// ciuic::Communicator, the public C++ API (include/ciuic/collectives.h):
// creation, argument checks, and the hand-off of each call to the
// communicator's implementation (comm_impl.h) to run now (blocking) or to
// queue (the I-forms).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "ciuic/collectives.h"
#include "collectives/comm_impl.h"
#include "collectives/partition.h"
#include "common/log.h"
#include "transport/pmix.h"
#include "transport/store_wire.h"

namespace ciuic {

using collectives::Collective;
using collectives::CommImpl;
using collectives::OpDesc;

Status Request::Wait() {
  if (state_ == nullptr) return InvalidArgumentError("Request::Wait on an empty request");
  return comm_->Wait(*state_);
}

Status Request::Wait(std::chrono::milliseconds timeout) {
  if (state_ == nullptr) return InvalidArgumentError("Request::Wait on an empty request");
  return comm_->Wait(*state_, timeout);
}

StatusOr<bool> Request::Test() {
  if (state_ == nullptr) return InvalidArgumentError("Request::Test on an empty request");
  if (!comm_->Test(*state_)) return false;
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!state_->status.ok()) return state_->status;
  return true;
}

Communicator::Communicator(std::shared_ptr<CommImpl> impl) : impl_(std::move(impl)) {}
Communicator::~Communicator() = default;

StatusOr<std::unique_ptr<Communicator>> Communicator::CreateWithStore(
    int rank, int size, const std::shared_ptr<transport::Store>& store, const Config& config) {
  return CreateWithStore(rank, size, store, config, collectives::NextCommPrefix());
}

StatusOr<std::unique_ptr<Communicator>> Communicator::CreateWithStore(
    int rank, int size, const std::shared_ptr<transport::Store>& store, const Config& config,
    const std::string& prefix) {
  if (prefix.empty()) return InvalidArgumentError("CreateWithStore: an empty store prefix");
  if (size < 1) return InvalidArgumentError("size must be >= 1 (got " + std::to_string(size) + ")");
  if (rank < 0 || rank >= size) {
    return InvalidArgumentError("rank " + std::to_string(rank) + " outside [0, " + std::to_string(size) + ")");
  }
  if (store == nullptr) return InvalidArgumentError("store is null");
  // The process's first communicator names its rank in every log line and
  // its per-rank CIUIC_DEBUG_FILE (%r); the bootstrap's lines included.
  if (Status s = AdoptLogging(config, rank); !s.ok()) {
    (void)store->Set(collectives::InitFailedKey(prefix, rank), s.ToString());  // peers name it, as below
    return s;
  }
  // The data connections prove the secret whichever knob holds it.
  Config resolved = config;
  CIUIC_ASSIGN_OR_RETURN(resolved.secret, transport::ResolveSecret(config));
  resolved.secret_file.clear();
  auto impl = std::make_shared<CommImpl>(rank, size, resolved, store, prefix);
  if (Status s = impl->Init(); !s.ok()) {
    // The ranks waiting to connect to this one name it and why at their
    // next look (LinkTable::CheckPeer), not at their timeout. Best effort.
    (void)store->Set(collectives::InitFailedKey(prefix, rank), s.ToString());
    return s;
  }
  return std::unique_ptr<Communicator>(new Communicator(std::move(impl)));
}

namespace {
StatusOr<std::pair<std::string, uint16_t>> SplitHostPort(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) return InvalidArgumentError("store address '" + addr + "': expected host:port");
  std::string host = addr.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const std::string port = addr.substr(colon + 1);
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || p < 1 || p > 65535) {
    return InvalidArgumentError("store address '" + addr + "': port must be 1..65535");
  }
  return std::make_pair(host, static_cast<uint16_t>(p));
}
}  // namespace


StatusOr<std::unique_ptr<Communicator>> Communicator::Create(int rank, int size,
                                                             const std::string& store_addr,
                                                             const Config& config) {
  CIUIC_ASSIGN_OR_RETURN(auto hp, SplitHostPort(store_addr));
  CIUIC_ASSIGN_OR_RETURN(std::string secret, transport::ResolveSecret(config));
  return CreateTcp(rank, size, hp.first, hp.second, config.store_external, secret, config);
}

StatusOr<std::unique_ptr<Communicator>> Communicator::CreateTcp(int rank, int size, const std::string& host,
                                                                uint16_t port, bool external,
                                                                const std::string& secret,
                                                                const Config& config) {
  std::unique_ptr<transport::TcpStoreServer> server;
  if (rank == 0 && !external) {
    // Listen on every interface unless the address is loopback, so ranks on
    // other hosts reach it.
    const bool loop = host == "127.0.0.1" || host == "localhost" || host == "::1";
    StatusOr<std::unique_ptr<transport::TcpStoreServer>> started =
        transport::TcpStoreServer::Start(loop ? host : "", port, secret);
    if (!started.ok()) {
      return Status(started.status().code(), "rank 0 serving the store at " + host + ":" +
                                                 std::to_string(port) + " (CIUIC_STORE_ADDR): " +
                                                 started.status().message());
    }
    server = std::move(*started);
  }
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<transport::TcpStoreClient> client,
                         transport::TcpStoreClient::Connect(host, port, secret,
                                                            std::chrono::milliseconds(config.timeout_ms)));
  // The secret may have come from a file or the launcher: the data
  // connections prove it too.
  Config with_secret = config;
  with_secret.secret = secret;
  with_secret.secret_file.clear();
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                         CreateWithStore(rank, size, std::shared_ptr<transport::Store>(std::move(client)), with_secret));
  comm->impl_->KeepServer(std::move(server));
  return comm;
}

namespace {

// The store servers of the unique ids this process made, by the id's
// address and secret: the id's server until a communicator made here from
// the id holds it (and every later one made from it shares it while any
// lives).
struct IdServers {
  std::mutex mu;
  struct Entry {
    std::shared_ptr<transport::TcpStoreServer> pending;  // no communicator holds it yet
    std::weak_ptr<transport::TcpStoreServer> taken;
  };
  std::map<std::tuple<std::string, uint16_t, std::string>, Entry> by_id;
};
IdServers& GetIdServers() {
  static IdServers* servers = new IdServers();  // never destroyed: a server may outlive static destruction
  return *servers;
}
std::tuple<std::string, uint16_t, std::string> IdKey(const transport::store_wire::StoreId& id) {
  return {id.host, id.port, id.secret};
}

// The server of an id made here, if any (it stays pending: a failed
// creation can be retried, and the other ranks keep their store).
std::shared_ptr<transport::TcpStoreServer> IdServer(const transport::store_wire::StoreId& id) {
  IdServers& all = GetIdServers();
  std::lock_guard<std::mutex> lock(all.mu);
  auto it = all.by_id.find(IdKey(id));
  if (it == all.by_id.end()) return nullptr;
  if (it->second.pending != nullptr) return it->second.pending;
  std::shared_ptr<transport::TcpStoreServer> server = it->second.taken.lock();
  if (server == nullptr) all.by_id.erase(it);
  return server;
}
// A communicator holds the server now: it lives as long as one does.
void IdServerHeld(const transport::store_wire::StoreId& id) {
  IdServers& all = GetIdServers();
  std::lock_guard<std::mutex> lock(all.mu);
  auto it = all.by_id.find(IdKey(id));
  if (it == all.by_id.end() || it->second.pending == nullptr) return;
  it->second.taken = it->second.pending;
  it->second.pending.reset();
}

// Store servers that ranks of other processes may still need after every
// communicator here is gone: a communicator that was split hands its server
// here, because the splits of other processes meet (and make their links,
// and name faults) through it whatever this process does with its own.
// Kept to the end of the process, and the process's exit waits (up to the
// communicator's timeout) until no other process is connected to them: a
// rank 0 that finishes first (the store's host under mpirun or srun) would
// otherwise take the store from splits it is not in, which still make
// their links through it.
struct KeptServers {
  std::mutex mu;
  std::vector<std::shared_ptr<transport::TcpStoreServer>> servers;
  std::chrono::milliseconds timeout{0};
  pid_t pid = 0;  // the process that registered the exit wait (not a fork child)
};
KeptServers& GetKeptServers() {
  static auto* kept = new KeptServers();  // leaked: used by the exit handler
  return *kept;
}

void WaitForStoreUsersAtExit() {
  KeptServers& kept = GetKeptServers();
  std::vector<std::shared_ptr<transport::TcpStoreServer>> servers;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard<std::mutex> lock(kept.mu);
    if (kept.pid != getpid()) return;  // a fork child: the server thread is its parent's
    servers = kept.servers;
    timeout = kept.timeout;
  }
  for (const auto& server : servers) {
    if (server->WaitForOtherProcesses(std::chrono::milliseconds(0)) == 0) continue;
    CIUIC_LOG(kInfo, "exit: waiting up to %lld ms for the other ranks to finish with the store this process serves "
              "(port %u)", static_cast<long long>(timeout.count()), static_cast<unsigned>(server->port()));
    const size_t left = server->WaitForOtherProcesses(timeout);
    if (left > 0) {
      CIUIC_LOG(kWarn, "exit: %zu connection(s) of other processes to the store on port %u still open after %lld ms; "
                "their communicators lose the store", left, static_cast<unsigned>(server->port()),
                static_cast<long long>(timeout.count()));
    }
  }
}

void KeepServerToTheEnd(std::shared_ptr<transport::TcpStoreServer> server, std::chrono::milliseconds timeout) {
  KeptServers& kept = GetKeptServers();
  std::lock_guard<std::mutex> lock(kept.mu);
  kept.timeout = std::max(kept.timeout, timeout);
  if (kept.pid != getpid()) {
    // First here, or a fork child: its parent's servers have no thread here.
    kept.servers.clear();
    kept.pid = getpid();
    std::atexit(WaitForStoreUsersAtExit);
  }
  for (const auto& s : kept.servers) {
    if (s == server) return;
  }
  kept.servers.push_back(std::move(server));
}

}  // namespace

Status Communicator::MakeUniqueId(const Config& config, UniqueId* id) {
  if (id == nullptr) return InvalidArgumentError("id is null");
  namespace sw = transport::store_wire;
  static_assert(UniqueId::kBytes == sw::kIdBytes, "the id's size is the wire's");
  Status s = [&]() -> Status {
    CIUIC_ASSIGN_OR_RETURN(std::string secret, transport::ResolveSecret(config));
    if (secret.empty()) {
      CIUIC_ASSIGN_OR_RETURN(secret, transport::pmix::MakeSecret());
    }
    CIUIC_ASSIGN_OR_RETURN(std::string host, transport::pmix::AdvertisedHost(config.socket_ifname));
    // Checked before the server starts: a secret too long for the id fails here.
    sw::StoreId sid{host, 1, secret};
    CIUIC_RETURN_IF_ERROR(sw::EncodeStoreId(sid, id->bytes));
    const bool loop = host == "127.0.0.1" || host == "::1";
    CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<transport::TcpStoreServer> server,
                           transport::TcpStoreServer::Start(loop ? host : "", 0, secret));
    sid.port = server->port();
    CIUIC_RETURN_IF_ERROR(sw::EncodeStoreId(sid, id->bytes));
    IdServers& all = GetIdServers();
    std::lock_guard<std::mutex> lock(all.mu);
    all.by_id[IdKey(sid)] = IdServers::Entry{std::move(server), {}};
    CIUIC_LOG(kInfo, "unique id: the store at %s", transport::pmix::FormatStoreAddress(host, sid.port).c_str());
    return Status::Ok();
  }();
  if (!s.ok()) {
    s = Status(s.code(), "making a unique id: " + s.message());
    sw::EncodeStoreIdError(s.message(), id->bytes);
  }
  return s;
}

StatusOr<std::unique_ptr<Communicator>> Communicator::CreateFromId(int rank, int size, const UniqueId& id,
                                                                   const Config& config) {
  if (size < 1) return InvalidArgumentError("size must be >= 1 (got " + std::to_string(size) + ")");
  if (rank < 0 || rank >= size) {
    return InvalidArgumentError("rank " + std::to_string(rank) + " outside [0, " + std::to_string(size) + ")");
  }
  CIUIC_ASSIGN_OR_RETURN(transport::store_wire::StoreId sid, transport::store_wire::DecodeStoreId(id.bytes));
  // The id's server, when this process made it, lives with the communicator.
  std::shared_ptr<transport::TcpStoreServer> server = IdServer(sid);
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                         CreateTcp(rank, size, sid.host, sid.port, /*external=*/true, sid.secret, config));
  if (server != nullptr) {
    comm->impl_->KeepServer(std::move(server));
    IdServerHeld(sid);
  }
  return comm;
}

StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key) {
  // Every rank's color and key go round first, so a bad color fails every
  // rank alike instead of leaving the others to wait for it.
  const int seq = splits_++;
  const int32_t mine[2] = {color, key};
  std::vector<int32_t> all(2 * static_cast<size_t>(size()));
  CIUIC_RETURN_IF_ERROR(AllGather(mine, all.data(), 2, DataType::kInt32));
  std::vector<std::pair<int32_t, int>> members;  // (key, rank here) of this color
  for (int r = 0; r < size(); ++r) {
    const int32_t c = all[2 * static_cast<size_t>(r)];
    if (c < 0 && c != kUndefinedColor) {
      return InvalidArgumentError("color " + std::to_string(c) + " of rank " + std::to_string(r) +
                                  " in Split: a color is >= 0 or kUndefinedColor (CIUIC_UNDEFINED)");
    }
    if (c == color) members.emplace_back(all[2 * static_cast<size_t>(r) + 1], r);
  }
  // This process may serve the store the new communicators meet through.
  if (impl_->server() != nullptr) {
    KeepServerToTheEnd(impl_->server(), std::chrono::milliseconds(impl_->config().timeout_ms));
  }
  if (color == kUndefinedColor) return std::unique_ptr<Communicator>();
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  while (members[static_cast<size_t>(new_rank)].second != rank()) ++new_rank;
  const std::string prefix = impl_->prefix() + "/split" + std::to_string(seq) + "/" + std::to_string(color);
  CIUIC_LOG(kInfo, "split %d of %s: color %d, rank %d of %zu (rank %d here)", seq, impl_->prefix().c_str(), color,
            new_rank, members.size(), rank());
  StatusOr<std::unique_ptr<Communicator>> made =
      CreateWithStore(new_rank, static_cast<int>(members.size()), impl_->store(), impl_->config(), prefix);
  if (!made.ok()) {
    // The caller knows this communicator's ranks, not the new one's: the
    // rank the error names is translated (and stays the last one named).
    const std::string& why = made.status().message();
    std::string m = "split " + std::to_string(seq) + " (color " + std::to_string(color) + ") of " +
                    impl_->prefix() + ": " + why;
    const int named = RankNamedLast(why, new_rank);
    if (named >= 0 && static_cast<size_t>(named) < members.size()) {
      m += " [rank " + std::to_string(named) + " there is rank " +
           std::to_string(members[static_cast<size_t>(named)].second) + " here]";
    }
    return Status(made.status().code(), m);
  }
  std::unique_ptr<Communicator> comm = std::move(*made);
  comm->impl_->KeepServer(impl_->server());
  std::vector<int> origin;
  origin.reserve(members.size());
  for (const auto& m : members) origin.push_back(impl_->origin_rank(m.second));
  comm->impl_->SetOrigin(impl_->origin_prefix(), std::move(origin));
  return comm;
}

StatusOr<std::unique_ptr<Communicator>> Communicator::Dup() { return Split(0, rank()); }

StatusOr<std::unique_ptr<Communicator>> Communicator::CreateFromEnv() {
  CIUIC_ASSIGN_OR_RETURN(Config config, Config::FromEnv());
  return CreateFromEnv(config);
}

StatusOr<std::unique_ptr<Communicator>> Communicator::CreateFromEnv(Config config) {
  CIUIC_ASSIGN_OR_RETURN(transport::JobInfo job, transport::DiscoverJob(config));
  std::unique_ptr<transport::TcpStoreServer> pmix_server;  // rank 0's, when the PMIx rendezvous started it
  if (job.world_size > 1 && job.store_host.empty() && job.launcher == "pmix") {
    // No CIUIC_STORE_ADDR: rank 0's store address (and a fresh secret) come
    // through the launcher's PMIx server.
    CIUIC_ASSIGN_OR_RETURN(pmix_server, transport::pmix::Rendezvous(&job, config.socket_ifname));
  }
  if (job.world_size > 1 && job.store_host.empty()) {
    // Slurm without PMIx: rank and size came from SLURM_*, the store cannot.
    const std::string hint = job.launcher == "slurm"
                                 ? "; or launch with srun --mpi=pmix, whose PMIx server carries the rendezvous"
                                 : "";
    return InvalidArgumentError("CIUIC_STORE_ADDR is not set (host:port of the rendezvous store; rank 0 serves it)" +
                                hint);
  }
  config.timeout_ms = job.timeout.count();
  if (job.world_size == 1 && job.store_host.empty()) {
    // A single rank needs no rendezvous: an in-process store.
    CIUIC_ASSIGN_OR_RETURN(auto server, transport::TcpStoreServer::Start("127.0.0.1", 0, ""));
    CIUIC_ASSIGN_OR_RETURN(auto client, transport::TcpStoreClient::Connect("127.0.0.1", server->port(), "",
                                                                          std::chrono::milliseconds(config.timeout_ms)));
    CIUIC_ASSIGN_OR_RETURN(auto comm, CreateWithStore(0, 1, std::shared_ptr<transport::Store>(std::move(client)), config));
    comm->impl_->KeepServer(std::move(server));
    return comm;
  }
  CIUIC_ASSIGN_OR_RETURN(auto comm, CreateTcp(job.rank, job.world_size, job.store_host, job.store_port,
                                              job.store_external || pmix_server != nullptr, job.secret, config));
  if (pmix_server != nullptr) comm->impl_->KeepServer(std::move(pmix_server));
  return comm;
}

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
std::string Communicator::transport_name() const { return impl_->transport_name(); }
std::string Communicator::job_transport_name() const { return impl_->job_transport_name(); }
std::vector<int> Communicator::host_of() const { return impl_->host_of(); }
std::string Communicator::last_algorithm() const { return impl_->last_algorithm(); }
void Communicator::Abort() { impl_->Abort(); }

Status Communicator::Run(OpDesc&& desc) {
  impl_->Classify(&desc);
  return impl_->RunBlocking(std::move(desc));
}

StatusOr<Request> Communicator::Post(OpDesc&& desc) {
  impl_->Classify(&desc);
  Request r;
  r.state_ = impl_->Submit(std::move(desc));
  r.comm_ = impl_;
  return r;
}

namespace {

// Each call's arguments, checked: kInvalidArgument naming the argument.
Status CheckBuf(const void* p, size_t count, const char* name) {
  if (p == nullptr && count > 0) return InvalidArgumentError(std::string(name) + " is null");
  return Status::Ok();
}
Status CheckType(DataType dtype, ReduceOp op) {
  if (!IsValid(dtype)) return InvalidArgumentError("dtype: unknown datatype " + std::to_string(static_cast<int>(dtype)));
  if (!IsValid(op)) return InvalidArgumentError("op: unknown reduction " + std::to_string(static_cast<int>(op)));
  return kernels::CheckReduction(dtype, op);
}
Status CheckRank(int r, int size, const char* what) {
  if (r < 0 || r >= size) {
    return InvalidArgumentError(std::string(what) + " " + std::to_string(r) + " outside [0, " + std::to_string(size) + ")");
  }
  return Status::Ok();
}
size_t Sum(const std::vector<size_t>& counts) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  return total;
}

}  // namespace

StatusOr<ReduceOp> Communicator::CreatePremulSum(double factor) {
  if (!std::isfinite(factor)) return InvalidArgumentError("factor: " + std::to_string(factor) + " is not finite");
  if (premul_ops_.size() >= 65536) {
    return ResourceExhaustedError("65536 premul_sum ops are live: DestroyReduceOp the ones no longer used");
  }
  while (premul_ops_.count(next_premul_op_) != 0 || next_premul_op_ < 256) {
    next_premul_op_ = next_premul_op_ >= (1 << 30) ? 256 : next_premul_op_ + 1;
  }
  const int op = next_premul_op_++;
  premul_ops_[op] = factor;
  return static_cast<ReduceOp>(op);
}

Status Communicator::DestroyReduceOp(ReduceOp op) {
  if (premul_ops_.erase(static_cast<int>(op)) == 0) {
    return InvalidArgumentError("op " + std::to_string(static_cast<int>(op)) +
                                ": not a live op of CreatePremulSum on this communicator");
  }
  return Status::Ok();
}

Status Communicator::ResolveOp(DataType dtype, ReduceOp op, OpDesc* desc) const {
  auto it = premul_ops_.find(static_cast<int>(op));
  if (it != premul_ops_.end()) {
    CIUIC_RETURN_IF_ERROR(CheckType(dtype, ReduceOp::kPremulSum));
    desc->op = ReduceOp::kPremulSum;
    desc->factor = it->second;
    return Status::Ok();
  }
  CIUIC_RETURN_IF_ERROR(CheckType(dtype, op));
  desc->op = op;
  return Status::Ok();
}

// The operations, each once: what its arguments must be and how it is
// described to the implementation.
StatusOr<OpDesc> Communicator::AllReduceCall(const void* s, void* r, size_t n, DataType t, ReduceOp o) const {
  OpDesc d{Collective::kAllReduce, s, r, n, {}, t, o, 0};
  CIUIC_RETURN_IF_ERROR(ResolveOp(t, o, &d));
  CIUIC_RETURN_IF_ERROR(CheckBuf(s, n, "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(r, n, "recvbuf"));
  return d;
}

StatusOr<OpDesc> Communicator::BroadcastCall(void* b, size_t n, DataType t, int root) const {
  CIUIC_RETURN_IF_ERROR(CheckType(t, ReduceOp::kSum));
  CIUIC_RETURN_IF_ERROR(CheckBuf(b, n, "buf"));
  CIUIC_RETURN_IF_ERROR(CheckRank(root, size(), "root"));
  return OpDesc{Collective::kBroadcast, b, b, n, {}, t, ReduceOp::kSum, root};
}

StatusOr<OpDesc> Communicator::ReduceCall(const void* s, void* r, size_t n, DataType t, ReduceOp o, int root) const {
  OpDesc d{Collective::kReduce, s, r, n, {}, t, o, root};
  CIUIC_RETURN_IF_ERROR(ResolveOp(t, o, &d));
  CIUIC_RETURN_IF_ERROR(CheckRank(root, size(), "root"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(s, n, "sendbuf"));
  if (rank() == root) CIUIC_RETURN_IF_ERROR(CheckBuf(r, n, "recvbuf (at the root)"));
  return d;
}

StatusOr<OpDesc> Communicator::AllGatherCall(const void* s, void* r, size_t n, DataType t) const {
  CIUIC_RETURN_IF_ERROR(CheckType(t, ReduceOp::kSum));
  CIUIC_RETURN_IF_ERROR(CheckBuf(s, n, "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(r, n, "recvbuf"));
  return OpDesc{Collective::kAllGather, s, r, n, {}, t, ReduceOp::kSum, 0};
}

StatusOr<OpDesc> Communicator::AllGatherVCall(const void* s, void* r, const size_t* c, DataType t) const {
  CIUIC_RETURN_IF_ERROR(CheckType(t, ReduceOp::kSum));
  if (c == nullptr) return InvalidArgumentError("recvcounts is null");
  std::vector<size_t> counts(c, c + size());
  CIUIC_RETURN_IF_ERROR(CheckBuf(s, counts[rank()], "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(r, Sum(counts), "recvbuf"));
  const size_t mine = counts[rank()];
  return OpDesc{Collective::kAllGatherv, s, r, mine, std::move(counts), t, ReduceOp::kSum, 0};
}

StatusOr<OpDesc> Communicator::ReduceScatterCall(const void* s, void* r, size_t n, DataType t, ReduceOp o) const {
  OpDesc d{Collective::kReduceScatter, s, r, n, {}, t, o, 0};
  CIUIC_RETURN_IF_ERROR(ResolveOp(t, o, &d));
  CIUIC_RETURN_IF_ERROR(CheckBuf(s, n, "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(r, n, "recvbuf"));
  return d;
}

StatusOr<OpDesc> Communicator::ReduceScatterVCall(const void* s, void* r, const size_t* c, DataType t,
                                                 ReduceOp o) const {
  OpDesc d{Collective::kReduceScatterv, s, r, 0, {}, t, o, 0};
  CIUIC_RETURN_IF_ERROR(ResolveOp(t, o, &d));
  if (c == nullptr) return InvalidArgumentError("recvcounts is null");
  std::vector<size_t> counts(c, c + size());
  CIUIC_RETURN_IF_ERROR(CheckBuf(s, Sum(counts), "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(r, counts[rank()], "recvbuf"));
  d.count = counts[rank()];
  d.counts = std::move(counts);
  return d;
}

StatusOr<OpDesc> Communicator::AllToAllCall(const void* s, void* r, size_t n, DataType t) const {
  CIUIC_RETURN_IF_ERROR(CheckType(t, ReduceOp::kSum));
  CIUIC_RETURN_IF_ERROR(CheckBuf(s, n, "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(r, n, "recvbuf"));
  if (s == r && n > 0 && size() > 1) return InvalidArgumentError("all-to-all cannot run in place");
  return OpDesc{Collective::kAllToAll, s, r, n, {}, t, ReduceOp::kSum, 0};
}

StatusOr<OpDesc> Communicator::BarrierCall() const {
  return OpDesc{Collective::kBarrier, nullptr, nullptr, 0, {}, DataType::kUint8, ReduceOp::kSum, 0};
}

StatusOr<OpDesc> Communicator::PointToPointCall(bool send, const void* b, size_t n, DataType t, int peer,
                                                 int tag) const {
  CIUIC_RETURN_IF_ERROR(CheckType(t, ReduceOp::kSum));
  CIUIC_RETURN_IF_ERROR(CheckBuf(b, n, "buf"));
  if (peer < 0 || peer >= size() || peer == rank()) {
    return InvalidArgumentError("peer " + std::to_string(peer) + " is not another rank");
  }
  if (tag < 0 || tag >= collectives::kMaxTag) {
    return InvalidArgumentError("tag " + std::to_string(tag) + " not in [0, " + std::to_string(collectives::kMaxTag) + ")");
  }
  if (send) return OpDesc{Collective::kSend, b, nullptr, n, {}, t, ReduceOp::kSum, peer, tag};
  return OpDesc{Collective::kRecv, nullptr, const_cast<void*>(b), n, {}, t, ReduceOp::kSum, peer, tag};
}

StatusOr<OpDesc> Communicator::RootedBlocksCall(bool gather, const void* s, void* r, size_t n, DataType t,
                                                 int root) const {
  CIUIC_RETURN_IF_ERROR(CheckType(t, ReduceOp::kSum));
  CIUIC_RETURN_IF_ERROR(CheckRank(root, size(), "root"));
  const size_t all = n * static_cast<size_t>(size());
  const bool at_root = rank() == root;
  CIUIC_RETURN_IF_ERROR(CheckBuf(s, gather ? n : (at_root ? all : 0), "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(r, gather ? (at_root ? all : 0) : n, at_root ? "recvbuf (at the root)" : "recvbuf"));
  return OpDesc{gather ? Collective::kGather : Collective::kScatter, s, r, n, {}, t, ReduceOp::kSum, root};
}

StatusOr<OpDesc> Communicator::AllToAllVCall(const void* s, const size_t* sc, const size_t* sd, void* r,
                                              const size_t* rc, const size_t* rd, DataType t) const {
  CIUIC_RETURN_IF_ERROR(CheckType(t, ReduceOp::kSum));
  if (sc == nullptr) return InvalidArgumentError("sendcounts is null");
  if (rc == nullptr) return InvalidArgumentError("recvcounts is null");
  const size_t n = static_cast<size_t>(size());
  // [send counts, send displacements, receive counts, receive displacements]
  std::vector<size_t> counts(4 * n, 0);
  size_t s_at = 0, r_at = 0, s_extent = 0, r_extent = 0;
  for (size_t p = 0; p < n; ++p) {
    counts[p] = sc[p];
    counts[n + p] = sd != nullptr ? sd[p] : s_at;
    counts[2 * n + p] = rc[p];
    counts[3 * n + p] = rd != nullptr ? rd[p] : r_at;
    s_at += sc[p];
    r_at += rc[p];
    if (sc[p] > 0) s_extent = std::max(s_extent, counts[n + p] + sc[p]);
    if (rc[p] > 0) r_extent = std::max(r_extent, counts[3 * n + p] + rc[p]);
  }
  CIUIC_RETURN_IF_ERROR(CheckBuf(s, s_extent, "sendbuf"));
  CIUIC_RETURN_IF_ERROR(CheckBuf(r, r_extent, "recvbuf"));
  if (s != nullptr && s == r && size() > 1) return InvalidArgumentError("all-to-all-v cannot run in place");
  const size_t mine = counts[static_cast<size_t>(rank())];
  if (mine != counts[2 * n + static_cast<size_t>(rank())]) {
    return InvalidArgumentError("sendcounts[" + std::to_string(rank()) + "] (" + std::to_string(mine) +
                                ") differs from recvcounts[" + std::to_string(rank()) + "] (" +
                                std::to_string(counts[2 * n + static_cast<size_t>(rank())]) + "): this rank's block for itself");
  }
  return OpDesc{Collective::kAllToAllv, s, r, s_at, std::move(counts), t, ReduceOp::kSum, 0};
}

// Blocking forms run the operation now; I-forms queue it.
#define CIUIC_BLOCKING(describe)                  \
  CIUIC_ASSIGN_OR_RETURN(OpDesc d_, describe);  \
  return Run(std::move(d_))
#define CIUIC_ASYNC(describe)                     \
  CIUIC_ASSIGN_OR_RETURN(OpDesc d_, describe);  \
  return Post(std::move(d_))

Status Communicator::AllReduce(const void* s, void* r, size_t n, DataType t, ReduceOp o) {
  // A loop of the same small call on shared memory: its checks and plan
  // passed already (CommImpl::FastAllReduce).
  Status fast;
  if (impl_->FastAllReduce(s, r, n, t, o, &fast)) return fast;
  CIUIC_BLOCKING(AllReduceCall(s, r, n, t, o));
}
Status Communicator::Broadcast(void* b, size_t n, DataType t, int root) { CIUIC_BLOCKING(BroadcastCall(b, n, t, root)); }
Status Communicator::Reduce(const void* s, void* r, size_t n, DataType t, ReduceOp o, int root) {
  CIUIC_BLOCKING(ReduceCall(s, r, n, t, o, root));
}
Status Communicator::AllGather(const void* s, void* r, size_t n, DataType t) { CIUIC_BLOCKING(AllGatherCall(s, r, n, t)); }
Status Communicator::AllGatherV(const void* s, void* r, const size_t* c, DataType t) {
  CIUIC_BLOCKING(AllGatherVCall(s, r, c, t));
}
Status Communicator::ReduceScatter(const void* s, void* r, size_t n, DataType t, ReduceOp o) {
  CIUIC_BLOCKING(ReduceScatterCall(s, r, n, t, o));
}
Status Communicator::ReduceScatterV(const void* s, void* r, const size_t* c, DataType t, ReduceOp o) {
  CIUIC_BLOCKING(ReduceScatterVCall(s, r, c, t, o));
}
Status Communicator::AllToAll(const void* s, void* r, size_t n, DataType t) { CIUIC_BLOCKING(AllToAllCall(s, r, n, t)); }
Status Communicator::Gather(const void* s, void* r, size_t n, DataType t, int root) {
  CIUIC_BLOCKING(RootedBlocksCall(true, s, r, n, t, root));
}
Status Communicator::Scatter(const void* s, void* r, size_t n, DataType t, int root) {
  CIUIC_BLOCKING(RootedBlocksCall(false, s, r, n, t, root));
}
Status Communicator::AllToAllV(const void* s, const size_t* sc, const size_t* sd, void* r, const size_t* rc,
                               const size_t* rd, DataType t) {
  CIUIC_BLOCKING(AllToAllVCall(s, sc, sd, r, rc, rd, t));
}
Status Communicator::Barrier() { CIUIC_BLOCKING(BarrierCall()); }
Status Communicator::Send(const void* b, size_t n, DataType t, int peer, int tag) {
  CIUIC_BLOCKING(PointToPointCall(true, b, n, t, peer, tag));
}
Status Communicator::Recv(void* b, size_t n, DataType t, int peer, int tag) {
  CIUIC_BLOCKING(PointToPointCall(false, b, n, t, peer, tag));
}

StatusOr<Request> Communicator::IAllReduce(const void* s, void* r, size_t n, DataType t, ReduceOp o) {
  CIUIC_ASYNC(AllReduceCall(s, r, n, t, o));
}
StatusOr<Request> Communicator::IBroadcast(void* b, size_t n, DataType t, int root) {
  CIUIC_ASYNC(BroadcastCall(b, n, t, root));
}
StatusOr<Request> Communicator::IReduce(const void* s, void* r, size_t n, DataType t, ReduceOp o, int root) {
  CIUIC_ASYNC(ReduceCall(s, r, n, t, o, root));
}
StatusOr<Request> Communicator::IAllGather(const void* s, void* r, size_t n, DataType t) {
  CIUIC_ASYNC(AllGatherCall(s, r, n, t));
}
StatusOr<Request> Communicator::IAllGatherV(const void* s, void* r, const size_t* c, DataType t) {
  CIUIC_ASYNC(AllGatherVCall(s, r, c, t));
}
StatusOr<Request> Communicator::IReduceScatter(const void* s, void* r, size_t n, DataType t, ReduceOp o) {
  CIUIC_ASYNC(ReduceScatterCall(s, r, n, t, o));
}
StatusOr<Request> Communicator::IReduceScatterV(const void* s, void* r, const size_t* c, DataType t, ReduceOp o) {
  CIUIC_ASYNC(ReduceScatterVCall(s, r, c, t, o));
}
StatusOr<Request> Communicator::IAllToAll(const void* s, void* r, size_t n, DataType t) {
  CIUIC_ASYNC(AllToAllCall(s, r, n, t));
}
StatusOr<Request> Communicator::IGather(const void* s, void* r, size_t n, DataType t, int root) {
  CIUIC_ASYNC(RootedBlocksCall(true, s, r, n, t, root));
}
StatusOr<Request> Communicator::IScatter(const void* s, void* r, size_t n, DataType t, int root) {
  CIUIC_ASYNC(RootedBlocksCall(false, s, r, n, t, root));
}
StatusOr<Request> Communicator::IAllToAllV(const void* s, const size_t* sc, const size_t* sd, void* r,
                                           const size_t* rc, const size_t* rd, DataType t) {
  CIUIC_ASYNC(AllToAllVCall(s, sc, sd, r, rc, rd, t));
}
StatusOr<Request> Communicator::IBarrier() { CIUIC_ASYNC(BarrierCall()); }
StatusOr<Request> Communicator::ISend(const void* b, size_t n, DataType t, int peer, int tag) {
  CIUIC_ASYNC(PointToPointCall(true, b, n, t, peer, tag));
}
StatusOr<Request> Communicator::IRecv(void* b, size_t n, DataType t, int peer, int tag) {
  CIUIC_ASYNC(PointToPointCall(false, b, n, t, peer, tag));
}
#undef CIUIC_BLOCKING
#undef CIUIC_ASYNC

StatusOr<std::vector<size_t>> PartitionByCost(const std::vector<double>& costs, int parts) {
  return collectives::PartitionMinMax(costs, parts);
}

}  // namespace ciuic
