// The tcp backend: listening socket and acceptor, endpoints (who connects,
// hellos), memory regions (pinned pool memory or caller memory, both just an
// id in the backend's region table), WaitForActivity. Connections are in
// tcp_connection.cc, the byte formats in tcp_wire.h.
//
// Connection set-up: both sides publish an endpoint description (address,
// rank, tag, a random nonce). The lower rank connects (between two
// endpoints of one rank, the lower nonce; an endpoint connected to its own
// description both connects and accepts): it opens nsocks sockets to the
// peer's listening address and sends on each a hello echoing the
// acceptor's nonce, then returns without waiting for a reply. The acceptor
// accepts sockets as they come, checks every hello, keeps sockets that
// belong to other endpoints of this backend until their Connect runs, and
// completes when all of its sockets have arrived.
#include "transport/tcp/tcp_backend.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "ciuic/topology.h"
#include "common/log.h"
#include "transport/backends.h"
#include "transport/net.h"
#include "transport/pinned_memory.h"
#include "transport/tcp/tcp_connection.h"

namespace ciuic::transport {
namespace tcp {
namespace {

std::string IfaceAddress(const Interface& itf, uint16_t port) {
  sockaddr_storage ss = itf.addr;
  if (ss.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
  }
  return net::ToString(reinterpret_cast<const sockaddr*>(&ss));
}

// The buffer size to set on data sockets, or 0 to leave them to the
// kernel's autotuning. Autotuning grows each buffer up to
// net.ipv4.tcp_{w,r}mem[2] as the connection needs; SO_SNDBUF/SO_RCVBUF turn
// it off and are capped by net.core.{w,r}mem_max. Measured over loopback
// here, autotuned sockets cost the receiver 0.17-0.19 s of CPU per GB
// against 0.24-0.28 s with fixed 4 MiB buffers (8 MiB as the kernel
// doubles them), which keep more bytes in flight than the caches hold. So a
// size is set only where autotuning could not reach kSocketBufferBytes and
// the fixed cap allows more than autotuning would.
int BufferSize(const char* autotune_path, const char* cap_path) {
  long long lo = 0, def = 0, autotune_max = 0, cap = 0;
  std::ifstream a(autotune_path);
  if ((a >> lo >> def >> autotune_max) && autotune_max >= kSocketBufferBytes) return 0;
  std::ifstream c(cap_path);
  if (!(c >> cap)) return 0;
  const long long want = std::min<long long>(cap, kSocketBufferBytes);
  return want > autotune_max ? static_cast<int>(want) : 0;
}

std::string BufferText(int bytes) {
  return bytes == 0 ? "autotuned" : std::to_string(bytes >> 10) + " KiB";
}

// ------------------------------------------------------------------ regions

class TcpRegion final : public MemoryRegion {
 public:
  // `pool` owns Allocate()d memory; it is empty for Register()ed caller
  // memory.
  TcpRegion(TcpBackend* backend, void* data, size_t size, PinnedBuffer pool)
      : MemoryRegion(data, size), backend_(backend), pool_(std::move(pool)) {
    backend_->AddRegion(static_cast<uint8_t*>(data), size, &id_, &key_);
  }
  ~TcpRegion() override { backend_->RemoveRegion(id_); }
  std::string Describe() const override {
    RegionInfo info;
    info.rank = backend_->rank();
    info.instance = backend_->instance();
    info.id = id_;
    info.key = key_;
    info.size = size();
    return EncodeRegion(info);
  }

 private:
  TcpBackend* backend_;
  PinnedBuffer pool_;
  uint32_t id_ = 0;
  uint32_t key_ = 0;
};

// ---------------------------------------------------------------- endpoints

class TcpEndpoint final : public Endpoint {
 public:
  TcpEndpoint(TcpBackend* backend, int peer, uint32_t tag, const Nonce& nonce)
      : backend_(backend), peer_(peer), tag_(tag), nonce_(nonce) {
    backend_->AddEndpoint(nonce_, peer_, tag_);
  }
  ~TcpEndpoint() override { backend_->RemoveEndpoint(nonce_); }

  std::string Describe() const override {
    EndpointInfo info;
    info.rank = backend_->rank();
    info.peer = peer_;
    info.tag = tag_;
    info.nsocks = backend_->nsocks();
    info.instance = backend_->instance();
    info.nonce = nonce_;
    const sockaddr_storage& ss = backend_->interface().addr;
    if (ss.ss_family == AF_INET) {
      info.family = 4;
      std::memcpy(info.address.data(), &reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr, 4);
    } else {
      info.family = 6;
      std::memcpy(info.address.data(), &reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr, 16);
    }
    info.port = backend_->port();
    info.job_id = backend_->job_id();
    return EncodeEndpoint(info);
  }

  StatusOr<std::unique_ptr<Connection>> Connect(const std::string& peer_blob,
                                                Clock::time_point deadline) override {
    if (used_) {
      return FailedPreconditionError("tcp: the endpoint towards rank " + std::to_string(peer_) +
                                     " was already connected");
    }
    StatusOr<EndpointInfo> decoded = DecodeEndpoint(peer_blob);
    if (!decoded.ok()) return decoded.status().WithContext("connecting to rank " + std::to_string(peer_));
    const EndpointInfo& p = *decoded;
    const std::string who = "rank " + std::to_string(peer_);
    if (p.job_id != backend_->job_id()) {
      return InvalidArgumentError("tcp: the description for " + who + " comes from job '" +
                                  p.job_id + "', this is job '" + backend_->job_id() + "'");
    }
    if (p.rank != peer_ || p.peer != backend_->rank() || p.tag != tag_) {
      return InvalidArgumentError(
          "tcp: connecting to " + who + " (tag " + std::to_string(tag_) +
          ") with the description of rank " + std::to_string(p.rank) + " towards rank " +
          std::to_string(p.peer) + " (tag " + std::to_string(p.tag) + ")");
    }
    const int nsocks = std::min(backend_->nsocks(), p.nsocks);
    const int me = backend_->rank();
    const bool self = p.nonce == nonce_ && p.instance == backend_->instance();
    const bool connector = self || me < p.rank || (me == p.rank && nonce_ < p.nonce);
    const bool acceptor = self || !connector;
    const std::string address = EndpointAddress(p);
    std::vector<int> tx, rx;
    auto close_all = [&] {
      for (int fd : tx) close(fd);
      for (int fd : rx) {
        if (std::find(tx.begin(), tx.end(), fd) == tx.end()) close(fd);
      }
    };
    if (connector) {
      Hello hello;
      hello.rank = me;
      hello.tag = tag_;
      hello.nsocks = nsocks;
      hello.acceptor_nonce = p.nonce;
      hello.connector_nonce = nonce_;
      hello.job_id = backend_->job_id();
      for (int i = 0; i < nsocks; ++i) {
        StatusOr<int> fd = backend_->ConnectTo(p, deadline);
        if (!fd.ok()) {
          close_all();
          return fd.status();
        }
        tx.push_back(*fd);
        hello.socket_index = i;
        const std::string bytes = EncodeHello(hello, backend_->data_key());
        Status st = net::WriteAll(*fd, bytes.data(), bytes.size(), deadline);
        if (!st.ok()) {
          close_all();
          return Status(st.code(), "tcp: sending the hello to " + who + " (" + address + "): " +
                                       st.message());
        }
      }
    }
    if (acceptor) {
      Status st = backend_->AwaitSockets(nonce_, p, nsocks, self, deadline, &rx);
      if (!st.ok()) {
        close_all();
        return st;
      }
    }
    // The connector reads the acceptor's proof on each socket before any
    // frame (TcpConnection), instead of waiting for it here.
    std::vector<std::string> proofs;
    if (!self) {
      if (connector) {
        rx = tx;
        Hello h;
        h.acceptor_nonce = p.nonce;
        h.connector_nonce = nonce_;
        for (int i = 0; i < nsocks; ++i) {
          h.socket_index = i;
          proofs.push_back(EncodeAcceptProof(h, backend_->data_key()));
        }
      } else {
        tx = rx;
      }
    }
    used_ = true;
    CIUIC_LOG(kInfo, "tcp: connected to rank %d (%s), tag %u, %d socket(s), %s", peer_,
              address.c_str(), tag_, nsocks, self ? "self" : connector ? "connector" : "acceptor");
    return std::unique_ptr<Connection>(
        new TcpConnection(backend_, peer_, address, p.instance, tx, rx, proofs));
  }

 private:
  TcpBackend* backend_;
  int peer_;
  uint32_t tag_;
  Nonce nonce_;
  bool used_ = false;
};

}  // namespace

// ------------------------------------------------------------------ backend

StatusOr<std::unique_ptr<TcpBackend>> TcpBackend::Open(const BackendOptions& options) {
  const Config& cfg = options.config;
  if (cfg.socket_nsocks < 1 || cfg.socket_nsocks > kMaxSockets) {
    return InvalidArgumentError("tcp: CIUIC_SOCKET_NSOCKS=" + std::to_string(cfg.socket_nsocks) +
                                " outside 1-" + std::to_string(kMaxSockets));
  }
  if (options.job_id.size() > kMaxJobId) {
    return InvalidArgumentError("tcp: job id of " + std::to_string(options.job_id.size()) +
                                " bytes (at most " + std::to_string(kMaxJobId) + ")");
  }
  // Checked here so that a bad value fails Open, not the first Allocate.
  if (!cfg.numa_policy.empty()) {
    auto policy = topology::ParseNumaPolicy(cfg.numa_policy);
    if (!policy.ok()) return InvalidArgumentError("tcp: CIUIC_NUMA_POLICY: " + policy.status().message());
  }
  CIUIC_ASSIGN_OR_RETURN(std::vector<Interface> seen, ListInterfaces());
  // The topology plan's interface when the knob does not decide and it is
  // up with an address; else the knob's or the first one up.
  StatusOr<Interface> planned = options.netdev.empty() || !cfg.socket_ifname.empty()
                                    ? StatusOr<Interface>(NotFoundError("no plan"))
                                    : SelectInterface("=" + options.netdev, seen);
  if (!options.netdev.empty() && cfg.socket_ifname.empty() && !planned.ok()) {
    CIUIC_LOG(kInfo, "tcp: the topology plan's %s is not usable (%s)", options.netdev.c_str(),
              planned.status().message().c_str());
  }
  CIUIC_ASSIGN_OR_RETURN(Interface iface, planned.ok() ? planned : SelectInterface(cfg.socket_ifname, seen));

  std::unique_ptr<TcpBackend> b(new TcpBackend());
  b->rank_ = options.rank;
  b->world_size_ = options.world_size;
  b->nsocks_ = cfg.socket_nsocks;
  b->job_id_ = options.job_id;
  b->data_key_ = DataKey(options.secret, options.job_id);
  if (options.secret.empty()) {
    CIUIC_LOG(kInfo, "tcp: no job secret (CIUIC_SECRET): data connections are checked by the "
                     "endpoint nonces from the store only");
  }
  b->iface_ = iface;
  b->config_ = cfg;
  // Pool memory goes on the interface's NUMA node; a virtual interface
  // (loopback, veth, bridge) has none and the pool is first-touched here.
  b->numa_node_ = planned.ok() && options.pool_numa_node != BackendOptions::kPoolNodeOfDevice
                     ? options.pool_numa_node
                     : DeviceNumaNode("/sys/class/net/" + iface.name + "/device");
  if (b->numa_node_ >= 0) {
    CIUIC_LOG(kInfo, "tcp: pool memory on NUMA node %d, %s's (CIUIC_NUMA_POLICY=%s)", b->numa_node_,
              iface.name.c_str(), cfg.numa_policy.c_str());
  } else {
    CIUIC_LOG(kInfo, "tcp: pool memory on the allocating thread's NUMA node (%s reports none)", iface.name.c_str());
  }
  b->sndbuf_ = BufferSize("/proc/sys/net/ipv4/tcp_wmem", "/proc/sys/net/core/wmem_max");
  b->rcvbuf_ = BufferSize("/proc/sys/net/ipv4/tcp_rmem", "/proc/sys/net/core/rmem_max");
  uint64_t seed[2];
  CIUIC_RETURN_IF_ERROR(net::RandomBytes(seed, sizeof(seed)));
  b->instance_ = seed[0];
  b->rng_.seed(seed[1]);
  b->regions_.resize(1);  // id 0 stays unused

  const std::string where = iface.name + " " + IfaceAddress(iface, 0);
  b->listen_fd_ = socket(iface.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (b->listen_fd_ < 0) {
    return net::DescriptorError("tcp: socket", errno);
  }
  // Accepted sockets inherit the buffer sizes, which must be set before
  // the handshake for the window scale to follow.
  b->ConfigureSocket(b->listen_fd_);
  const socklen_t len =
      iface.addr.ss_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  if (bind(b->listen_fd_, reinterpret_cast<const sockaddr*>(&iface.addr), len) < 0) {
    return UnavailableError("tcp: cannot bind " + where + ": " + std::strerror(errno));
  }
  if (listen(b->listen_fd_, SOMAXCONN) < 0) {
    return UnavailableError("tcp: cannot listen on " + where + ": " + std::strerror(errno));
  }
  sockaddr_storage bound{};
  socklen_t blen = sizeof(bound);
  getsockname(b->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &blen);
  b->port_ = ntohs(bound.ss_family == AF_INET
                       ? reinterpret_cast<const sockaddr_in*>(&bound)->sin_port
                       : reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);
  CIUIC_LOG(kInfo, "tcp: %s", b->Describe().c_str());
  return b;
}

TcpBackend::~TcpBackend() {
  if (listen_fd_ >= 0) close(listen_fd_);
  for (Pending& p : pending_) close(p.fd);
  for (auto& [nonce, socks] : stash_) {
    for (AcceptedSocket& a : socks) close(a.fd);
  }
}

std::string TcpBackend::Describe() const {
  return "tcp rank " + std::to_string(rank_) + " on " + iface_.name + " " +
         IfaceAddress(iface_, port_) + ", " + std::to_string(nsocks_) +
         " socket(s) per peer, send/receive buffers " + BufferText(sndbuf_) + "/" +
         BufferText(rcvbuf_);
}

void TcpBackend::ConfigureSocket(int fd) const {
  if (sndbuf_ > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf_, sizeof(sndbuf_));
  if (rcvbuf_ > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf_, sizeof(rcvbuf_));
  net::SetNoDelay(fd);
}

void TcpBackend::LingerRanOut(std::chrono::steady_clock::time_point at) {
  linger_ran_out_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count(),
                           std::memory_order_relaxed);
}

bool TcpBackend::LingerRanOutWithin(std::chrono::steady_clock::duration window) const {
  const int64_t at = linger_ran_out_ns_.load(std::memory_order_relaxed);
  if (at == 0) return false;
  const auto since = std::chrono::steady_clock::now().time_since_epoch() - std::chrono::nanoseconds(at);
  return since < window;
}

uint32_t TcpBackend::RandomKey() {
  std::lock_guard<std::mutex> lock(rng_mu_);
  uint32_t k;
  do {
    k = static_cast<uint32_t>(rng_());
  } while (k == 0);
  return k;
}

StatusOr<std::unique_ptr<Endpoint>> TcpBackend::CreateEndpoint(int peer, uint32_t tag) {
  if (peer < 0 || peer >= world_size_) {
    return InvalidArgumentError("tcp: endpoint towards rank " + std::to_string(peer) +
                                " outside world size " + std::to_string(world_size_));
  }
  Nonce nonce;
  CIUIC_RETURN_IF_ERROR(net::RandomBytes(nonce.data(), nonce.size()));
  return std::unique_ptr<Endpoint>(new TcpEndpoint(this, peer, tag, nonce));
}

StatusOr<std::unique_ptr<MemoryRegion>> TcpBackend::Allocate(size_t bytes) {
  if (bytes == 0) return InvalidArgumentError("tcp: Allocate(0 bytes)");
  // Pinned, pre-faulted (a first touch costs ~12 us per 4 KiB page here,
  // which a receive into fresh memory would otherwise pay inside the
  // kernel) and on the NUMA node of the interface the sockets use.
  auto pool = AllocatePinned(bytes, numa_node_, config_);
  if (!pool.ok()) return Status(pool.status().code(), "tcp: Allocate: " + pool.status().message());
  void* data = pool->data();
  return std::unique_ptr<MemoryRegion>(new TcpRegion(this, data, bytes, std::move(*pool)));
}

StatusOr<std::unique_ptr<MemoryRegion>> TcpBackend::Register(void* addr, size_t bytes) {
  if (addr == nullptr || bytes == 0) {
    return InvalidArgumentError("tcp: Register needs memory (got " +
                                std::string(addr == nullptr ? "a null address" : "0 bytes") + ")");
  }
  return std::unique_ptr<MemoryRegion>(new TcpRegion(this, addr, bytes, PinnedBuffer()));
}

void TcpBackend::AddRegion(uint8_t* base, uint64_t size, uint32_t* id, uint32_t* key) {
  const uint32_t k = RandomKey();
  std::lock_guard<std::mutex> lock(regions_mu_);
  uint32_t i;
  if (!free_ids_.empty()) {
    i = free_ids_.back();
    free_ids_.pop_back();
  } else {
    i = static_cast<uint32_t>(regions_.size());
    regions_.emplace_back();
  }
  regions_[i] = RegionEntry{base, size, k};
  *id = i;
  *key = k;
}

void TcpBackend::RemoveRegion(uint32_t id) {
  std::lock_guard<std::mutex> lock(regions_mu_);
  regions_[id] = RegionEntry{};
  free_ids_.push_back(id);
}

uint8_t* TcpBackend::ResolveRegion(uint32_t id, uint32_t key, uint64_t offset, uint64_t len,
                                   std::string* why) {
  std::lock_guard<std::mutex> lock(regions_mu_);
  if (id == 0 || id >= regions_.size() || regions_[id].key == 0) {
    *why = "region id " + std::to_string(id) + " is not registered";
    return nullptr;
  }
  const RegionEntry& e = regions_[id];
  if (e.key != key) {
    *why = "region id " + std::to_string(id) + " with a stale key (deregistered since)";
    return nullptr;
  }
  if (len > e.size || offset > e.size - len) {
    *why = "bytes [" + std::to_string(offset) + ", +" + std::to_string(len) +
           ") outside region " + std::to_string(id) + " of " + std::to_string(e.size) + " bytes";
    return nullptr;
  }
  return e.base + offset;
}

// ----------------------------------------------------------------- acceptor

void TcpBackend::AddEndpoint(const Nonce& nonce, int peer, uint32_t tag) {
  std::lock_guard<std::mutex> lock(acceptor_mu_);
  endpoints_[nonce] = EndpointEntry{peer, tag};
}

void TcpBackend::RemoveEndpoint(const Nonce& nonce) {
  std::lock_guard<std::mutex> lock(acceptor_mu_);
  endpoints_.erase(nonce);
  auto it = stash_.find(nonce);
  if (it != stash_.end()) {
    for (AcceptedSocket& a : it->second) close(a.fd);
    stash_.erase(it);
  }
}

bool TcpBackend::SendAcceptProof(const AcceptedSocket& a) const {
  // 36 bytes into a fresh socket's empty send buffer: all or an error.
  const std::string proof = EncodeAcceptProof(a.hello, data_key_);
  ssize_t r;
  do {
    r = send(a.fd, proof.data(), proof.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (r < 0 && errno == EINTR);
  if (r >= 0 && static_cast<size_t>(r) != proof.size()) errno = EAGAIN;
  return r >= 0 && static_cast<size_t>(r) == proof.size();
}

void TcpBackend::Reject(int fd, const std::string& from, const std::string& why) {
  CIUIC_LOG(kWarn, "tcp: rank %d rejected a connection from %s: %s", rank_, from.c_str(),
            why.c_str());
  close(fd);
}

void TcpBackend::PumpLocked() {
  // Accept what is waiting (bounded, so one call stays short).
  for (int i = 0; i < 256; ++i) {
    if (pending_.size() >= kMaxPendingSockets) {
      // Sockets that send no hello (a scan, a stalled stranger) must not
      // take the process's file descriptors. A rank's own sockets send
      // theirs at once, so the oldest goes if it has waited past the grace;
      // else the rest stays in the kernel's backlog for a later call.
      if (Clock::now() - pending_.front().since < kHelloGrace) break;
      Reject(pending_.front().fd, pending_.front().from,
             "no hello within " + std::to_string(kHelloGrace.count()) + " s while " +
                 std::to_string(kMaxPendingSockets) + " sockets wait for theirs");
      pending_.erase(pending_.begin());
    }
    sockaddr_storage ss{};
    socklen_t sl = sizeof(ss);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &sl,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        const auto now = Clock::now();
        if (accept_warned_ == Clock::time_point{} || now - accept_warned_ > std::chrono::seconds(10)) {
          accept_warned_ = now;
          CIUIC_LOG(kWarn, "tcp: accept on port %u: %s%s (repeats are not logged for 10 s)", port_,
                    std::strerror(errno),
                    errno == EMFILE || errno == ENFILE ? "; raise RLIMIT_NOFILE (ulimit -n)" : "");
        }
      }
      break;
    }
    net::SetNoDelay(fd);
    Pending p;
    p.fd = fd;
    p.from = net::ToString(reinterpret_cast<const sockaddr*>(&ss));
    p.since = Clock::now();
    p.buf.resize(kHelloFixedBytes + kMaxJobId + kMacBytes);
    pending_.push_back(std::move(p));
  }
  // Read hellos: exactly their bytes, since frames may follow at once.
  const auto now = Clock::now();
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    bool drop = false;
    std::string why;
    while (p.got < p.need) {
      const ssize_t r = recv(p.fd, p.buf.data() + p.got, p.need - p.got, 0);
      if (r > 0) {
        p.got += static_cast<size_t>(r);
        if (p.got == kHelloFixedBytes) {
          size_t job_len = 0;
          Status st = DecodeHelloFixed(p.buf.data(), &p.hello, &job_len);
          if (!st.ok()) {
            drop = true;
            why = st.message();
            break;
          }
          p.need = kHelloFixedBytes + job_len + kMacBytes;
        }
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      drop = true;
      why = r == 0 ? "closed before its hello was complete" : std::strerror(errno);
      break;
    }
    if (!drop && p.got < p.need && now - p.since > kHelloTimeout) {
      drop = true;
      why = "no complete hello within " + std::to_string(kHelloTimeout.count()) + " s";
    }
    if (!drop && p.got == p.need) {
      Hello& h = p.hello;
      h.job_id.assign(reinterpret_cast<const char*>(p.buf.data()) + kHelloFixedBytes,
                      p.need - kHelloFixedBytes - kMacBytes);
      auto ep = endpoints_.find(h.acceptor_nonce);
      if (h.job_id != job_id_) {
        drop = true;
        why = "hello of job '" + net::LogSafe(h.job_id) + "' (this is job '" + net::LogSafe(job_id_) + "')";
      } else if (!HelloMacMatches(data_key_, p.buf.data(), p.need - kMacBytes)) {
        drop = true;
        // Nothing of an unproven hello is believed: the rank is a claim.
        why = "hello claiming rank " + std::to_string(h.rank) +
              " without a valid proof of the job secret (CIUIC_SECRET differs, or not a rank of "
              "this job)";
      } else if (ep == endpoints_.end()) {
        drop = true;
        why = "hello from rank " + std::to_string(h.rank) +
              " with a nonce of no endpoint here (stale or forged)";
      } else if (ep->second.peer != h.rank || ep->second.tag != h.tag) {
        drop = true;
        why = "hello from rank " + std::to_string(h.rank) + " tag " + std::to_string(h.tag) +
              " for the endpoint towards rank " + std::to_string(ep->second.peer) + " tag " +
              std::to_string(ep->second.tag);
      } else if (auto st = stash_.find(h.acceptor_nonce);
                 st != stash_.end() && st->second.size() >= static_cast<size_t>(kMaxSockets)) {
        // Replayed hellos are valid ones: without a bound they would hold
        // descriptors until the endpoint goes.
        drop = true;
        why = "hello from rank " + std::to_string(h.rank) + ": " + std::to_string(kMaxSockets) +
              " sockets already wait for the endpoint towards it (replayed?)";
      } else {
        AcceptedSocket a;
        a.fd = p.fd;
        a.from = p.from;
        a.hello = std::move(h);
        stash_[a.hello.acceptor_nonce].push_back(std::move(a));
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
    }
    if (drop) {
      Reject(p.fd, p.from, why);
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
}

Status TcpBackend::AwaitSockets(const Nonce& nonce, const EndpointInfo& peer, int nsocks, bool self,
                                Clock::time_point deadline, std::vector<int>* rx_fds) {
  rx_fds->assign(static_cast<size_t>(nsocks), -1);
  int have = 0;
  std::vector<pollfd> fds;
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(acceptor_mu_);
      PumpLocked();
      auto it = stash_.find(nonce);
      if (it != stash_.end()) {
        for (AcceptedSocket& a : it->second) {
          const Hello& h = a.hello;
          if (h.connector_nonce != peer.nonce) {
            Reject(a.fd, a.from, "hello from rank " + std::to_string(h.rank) +
                                     " of an endpoint other than the one described to us");
          } else if (h.nsocks != nsocks || h.socket_index >= nsocks) {
            Reject(a.fd, a.from, "hello for socket " + std::to_string(h.socket_index) + " of " +
                                     std::to_string(h.nsocks) + ", expected " +
                                     std::to_string(nsocks) + " sockets");
          } else if ((*rx_fds)[h.socket_index] >= 0) {
            Reject(a.fd, a.from, "a second hello for socket " + std::to_string(h.socket_index));
          } else if (!self && !SendAcceptProof(a)) {
            Reject(a.fd, a.from, std::string("cannot send the accept proof: ") + std::strerror(errno));
          } else {
            (*rx_fds)[h.socket_index] = a.fd;
            ++have;
          }
        }
        stash_.erase(it);
      }
      if (have == nsocks) return Status::Ok();
      fds.clear();
      if (pending_.size() < kMaxPendingSockets) fds.push_back(pollfd{listen_fd_, POLLIN, 0});
      for (const Pending& p : pending_) fds.push_back(pollfd{p.fd, POLLIN, 0});
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      for (int& fd : *rx_fds) {
        if (fd >= 0) close(fd);
        fd = -1;
      }
      return DeadlineExceededError("tcp: timed out waiting for rank " + std::to_string(peer.rank) +
                                   " (" + EndpointAddress(peer) + ") to connect (" +
                                   std::to_string(have) + " of " + std::to_string(nsocks) +
                                   " sockets arrived)");
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    // Bounded, since another thread may take sockets from the backlog.
    const int ms = static_cast<int>(std::min<int64_t>(left.count() + 1, 50));
    poll(fds.data(), fds.size(), ms);
  }
}

StatusOr<int> TcpBackend::ConnectTo(const EndpointInfo& peer, Clock::time_point deadline) {
  sockaddr_storage ss{};
  socklen_t len;
  if (peer.family == 4) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    in->sin_family = AF_INET;
    std::memcpy(&in->sin_addr, peer.address.data(), 4);
    in->sin_port = htons(peer.port);
    len = sizeof(sockaddr_in);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    in6->sin6_family = AF_INET6;
    std::memcpy(&in6->sin6_addr, peer.address.data(), 16);
    in6->sin6_port = htons(peer.port);
    len = sizeof(sockaddr_in6);
  }
  const std::string who = "rank " + std::to_string(peer.rank) + " (" + EndpointAddress(peer) + ")";
  auto step = std::chrono::milliseconds(10);
  std::string last = "no attempt";
  for (;;) {
    const int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return net::DescriptorError("tcp: socket", errno);
    ConfigureSocket(fd);
    int err = 0;
    if (connect(fd, reinterpret_cast<const sockaddr*>(&ss), len) != 0) err = errno;
    while (err == EINPROGRESS || err == EINTR) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        err = ETIMEDOUT;
        break;
      }
      pollfd p{fd, POLLOUT, 0};
      const int rc = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1000)));
      if (rc < 0 && errno != EINTR) {
        err = errno;
        break;
      }
      if (rc > 0) {
        socklen_t el = sizeof(err);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
        break;
      }
    }
    if (err == 0) return fd;
    close(fd);
    last = std::strerror(err);
    if (err == ECONNREFUSED) {
      // Its backend listened before the description was published, so a
      // refusal means that process is gone.
      return UnavailableError("tcp: " + who + " refused the connection (its process is gone?)");
    }
    if (Clock::now() >= deadline) break;
    // Unreachable networks can be transient (ARP, routes): retry.
    std::this_thread::sleep_for(std::min<Clock::duration>(step, deadline - Clock::now()));
    step = std::min(step * 2, std::chrono::milliseconds(500));
  }
  return DeadlineExceededError("tcp: timed out connecting to " + who + ": " + last);
}

// ----------------------------------------------------------------- activity

void TcpBackend::MaybePump() {
  const int64_t now = Clock::now().time_since_epoch().count();
  int64_t due = next_pump_ns_.load(std::memory_order_relaxed);
  if (now < due) return;
  const int64_t next = now + std::chrono::duration_cast<Clock::duration>(kPumpPeriod).count();
  if (!next_pump_ns_.compare_exchange_strong(due, next, std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lock(acceptor_mu_, std::try_to_lock);
  if (lock.owns_lock()) PumpLocked();
}

void TcpBackend::Watch(SocketWatch* w) {
  std::lock_guard<std::mutex> lock(watch_mu_);
  watched_.push_back(w);
}

void TcpBackend::Unwatch(SocketWatch* w) {
  std::lock_guard<std::mutex> lock(watch_mu_);
  watched_.erase(std::remove(watched_.begin(), watched_.end(), w), watched_.end());
}

void TcpBackend::WaitForActivity(std::chrono::microseconds max) {
  std::vector<pollfd> fds;
  size_t acceptor_fds;
  bool pending_full;
  {
    std::lock_guard<std::mutex> lock(acceptor_mu_);
    // With every pending slot taken, new sockets wait in the backlog: a
    // readable listener would only end each wait at once.
    pending_full = pending_.size() >= kMaxPendingSockets;
    if (!pending_full) fds.push_back(pollfd{listen_fd_, POLLIN, 0});
    for (const Pending& p : pending_) fds.push_back(pollfd{p.fd, POLLIN, 0});
    acceptor_fds = fds.size();
  }
  {
    std::lock_guard<std::mutex> lock(watch_mu_);
    for (const SocketWatch* w : watched_) {
      if (!w->active.load(std::memory_order_relaxed)) continue;
      if (w->rx_buffered.load(std::memory_order_relaxed)) return;  // work without waiting
      const bool out = w->want_out.load(std::memory_order_relaxed);
      if (w->tx_fd == w->rx_fd) {
        fds.push_back(pollfd{w->rx_fd, static_cast<short>(POLLIN | (out ? POLLOUT : 0)), 0});
      } else {
        fds.push_back(pollfd{w->rx_fd, POLLIN, 0});
        if (out) fds.push_back(pollfd{w->tx_fd, POLLOUT, 0});
      }
    }
  }
  const auto us = std::max<int64_t>(0, max.count());
  timespec ts{static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  const int rc = ppoll(fds.data(), fds.size(), &ts, nullptr);
  // A full pending list is pumped even without activity: its oldest
  // sockets make room once their grace is over.
  bool acceptor_ready = pending_full;
  for (size_t i = 0; rc > 0 && i < acceptor_fds; ++i) acceptor_ready = acceptor_ready || fds[i].revents != 0;
  // Take the new sockets and hellos now, else the listening socket stays
  // readable and every later wait returns at once.
  if (acceptor_ready) {
    std::lock_guard<std::mutex> lock(acceptor_mu_);
    PumpLocked();
  }
}

}  // namespace tcp

StatusOr<std::unique_ptr<Backend>> OpenTcpBackend(const BackendOptions& options) {
  CIUIC_ASSIGN_OR_RETURN(std::unique_ptr<tcp::TcpBackend> b, tcp::TcpBackend::Open(options));
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace ciuic::transport
