// The verbs backend: reliable-connected (RC) queue pairs over libibverbs,
// on InfiniBand (LID) and RoCE v2 (GID).
//
// One Connection owns:
//   - one CQ for the send and receive completions of all its QPs, attached
//     to the backend's completion channel (WaitForActivity sleeps on it);
//   - nqps data QPs (CIUIC_IB_QPS_PER_PEER). QP 0 carries every message and
//     the head of every write, so the order in which operations complete on
//     QP 0's receive queue is the posting order; QPs 1.. carry the other
//     stripes of large writes (see verbs_wire.h for the striping rule);
//   - a probe QP, used by the handshake in Connect (kept until the end so a
//     late retransmission from the peer is still acknowledged);
//   - a registered control buffer: kRecvSlots receive slots of QP 0
//     (messages land there), kMessageSlots slots for queued outgoing
//     messages, the handshake buffers and a keepalive target.
//
// QP state machine (explicit attribute masks, as in rc_pingpong):
//   CreateEndpoint: RESET -> INIT (pkey 0, port, LOCAL_WRITE|REMOTE_WRITE);
//                   receives are posted in INIT.
//   Connect:        INIT -> RTR (peer's QPN and PSN, LID or GID, the smaller
//                   active MTU, min_rnr_timer) -> RTS (own PSN, CIUIC_IB_TIMEOUT,
//                   CIUIC_IB_RETRY_CNT, rnr_retry 7 = retry forever while
//                   the receiver has no receive posted).
//
// Handshake. A packet sent to a QP that is not yet in RTR is dropped and
// only resent after the local ACK timeout (4.096 us * 2^CIUIC_IB_TIMEOUT,
// seconds by default), so nothing may be sent on a data QP before the peer
// has moved its QPs to RTR. Connect therefore brings the data QPs to RTS,
// then the probe QP (with a short timeout), and sends a hello on the probe
// QP; the peer sends its hello only after its data QPs are ready. If the
// hello exhausts its retries (the peer is still elsewhere), the probe QP is
// reset and brought up again with the same PSNs, until `deadline`.
// Connect returns once the peer's hello arrived and our own was
// acknowledged: then both sides' data QPs are in RTS.
//
// Sending. PostWrite/PostMessage queue WRs per QP; a queue is posted to the
// device as one chained ibv_post_send at once when its QP is idle (no
// latency added to a lone operation), else when kMaxChain WRs are queued,
// at the next Progress, or before WaitForActivity sleeps. Selective
// signalling: the last WR of every chain and every kSignalEvery-th WR are
// signalled; a signalled completion retires every earlier WR of its QP
// (RC completes a QP's WRs in order). kWriteDone is reported per write, in
// posting order, once every part on every QP has completed.
//
// Receiving. Each completion on QP 0 is the next operation in posting
// order: a message (IBV_WC_RECV, bytes in its receive slot) or the head of a
// write (IBV_WC_RECV_RDMA_WITH_IMM, the user's 32-bit immediate). A striped
// write is delivered (one kWriteReceived) once its part has also arrived on
// each other QP; those parts carry the write's sequence number (low 32 bits)
// as their immediate, which is checked. Receive WRs are re-posted in
// Progress, in chains.
//
// Failure. Every work completion's status is checked; the first failure
// becomes the connection's sticky kUnavailable "verbs: peer rank N: <status>
// (vendor err 0x..)". A side that only receives would never notice a dead
// peer (RC has no keepalive of its own), so an idle connection sends a
// zero-length RDMA WRITE to the peer's keepalive target every
// ACK timeout (1 ms .. 100 ms), so survivors notice a dead peer within about
// one timeout of each other; a dead peer makes it fail after the retries.
// Asynchronous events (QP fatal, port down, device fatal) are read from the
// device's non-blocking async fd in Progress and WaitForActivity and fail
// the connections they concern.
#include <arpa/inet.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ciuic/topology.h"
#include "common/log.h"
#include "transport/backends.h"
#include "transport/net.h"
#include "transport/pinned_memory.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_wire.h"

namespace ciuic::transport {

namespace {

using Clock = std::chrono::steady_clock;
using verbs::DeviceSelection;
using verbs::EndpointInfo;
using verbs::QpAddress;

constexpr uint32_t kSendDepth = 256;          // WRs per data QP send queue
constexpr uint32_t kRecvSlots = 512;          // receives posted on QP 0
constexpr uint32_t kRecvStripe = 256;         // receives posted on QPs 1..
constexpr size_t kMaxOutstandingWrites = 128; // max_outstanding()
constexpr uint32_t kMessageSlots = 64;        // queued outgoing messages
constexpr uint32_t kSignalEvery = 16;
constexpr size_t kMaxChain = 32;
constexpr size_t kSlotBytes = 64;             // one message / hello slot
constexpr uint8_t kProbeTimeout = 12;         // 4.096 us * 2^12 = 17 ms
constexpr uint8_t kProbeRetry = 6;          // 7 would mean "forever" on rxe
constexpr int kProbeResetTries = 5;           // RestartProbe: RESET + INIT attempts
constexpr uint8_t kMinRnrTimer = 12;          // 0.64 ms between RNR retries
constexpr uint8_t kRnrRetryForever = 7;
constexpr uint8_t kHopLimit = 64;
constexpr int kPollBatch = 32;
constexpr uint32_t kAsyncEvery = 256;         // Progress calls between async-fd reads
constexpr auto kKeepaliveMax = std::chrono::milliseconds(100);
constexpr auto kKeepaliveMin = std::chrono::milliseconds(1);
constexpr uint32_t kRxeVendorId = 0xffffff;
constexpr uint64_t kMaxWrBytes = 1ull << 30;  // cap on one WR (byte_len is 32-bit)
constexpr uint64_t kNoOp = ~0ull;
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

static_assert(kSlotBytes >= kMaxMessageBytes, "a message must fit a slot");
static_assert(kSlotBytes >= verbs::kHelloBytes, "the hello must fit a slot");
static_assert(kMaxOutstandingWrites + kMessageSlots + 1 < kSendDepth, "send queue too small");

// Control buffer layout (offsets in bytes).
constexpr size_t kRecvOff = 0;
constexpr size_t kMsgOff = kRecvOff + kRecvSlots * kSlotBytes;
constexpr size_t kHelloSendOff = kMsgOff + kMessageSlots * kSlotBytes;
constexpr size_t kHelloRecvOff = kHelloSendOff + kSlotBytes;
constexpr size_t kKeepaliveOff = kHelloRecvOff + kSlotBytes;
constexpr size_t kCtrlBytes = (kKeepaliveOff + kSlotBytes + 4095) & ~size_t{4095};

std::string PeerName(int peer) { return "verbs: peer rank " + std::to_string(peer); }

std::string Errno(int err) { return std::strerror(err); }

Status WcError(int peer, const ibv_wc& wc) {
  char vendor[32];
  std::snprintf(vendor, sizeof(vendor), "0x%x", wc.vendor_err);
  return UnavailableError(PeerName(peer) + ": " + ibv_wc_status_str(wc.status) + " (vendor err " + vendor +
                          ", qp " + std::to_string(wc.qp_num) + ")");
}

bool SetNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

class VerbsConnection;

class VerbsBackend final : public Backend {
 public:
  static StatusOr<std::unique_ptr<Backend>> Open(const BackendOptions& options);
  ~VerbsBackend() override;

  BackendKind kind() const override { return BackendKind::kVerbs; }
  std::string Describe() const override { return describe_; }
  StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(int peer, uint32_t tag) override;
  StatusOr<std::unique_ptr<MemoryRegion>> Allocate(size_t bytes) override;
  StatusOr<std::unique_ptr<MemoryRegion>> Register(void* addr, size_t bytes) override;
  bool PinsRegisteredMemory() const override { return true; }
  void WaitForActivity(std::chrono::microseconds max) override;

  // For connections and regions (same thread contract as the backend).
  ibv_context* ctx() const { return dev_.ctx; }
  ibv_pd* pd() const { return pd_; }
  ibv_comp_channel* channel() const { return channel_; }
  const DeviceSelection& dev() const { return dev_; }
  const BackendOptions& options() const { return options_; }
  int nqps() const { return nqps_; }
  uint64_t job_hash() const { return job_hash_; }
  // The key of the handshake MAC (verbs_wire.h).
  const Digest& data_key() const { return data_key_; }
  uint64_t max_wr_bytes() const { return max_wr_bytes_; }
  uint8_t retry_cnt() const { return retry_cnt_; }
  Clock::duration keepalive_idle() const { return keepalive_idle_; }
  uint32_t NextPsn();
  // ibv_reg_mr with LOCAL_WRITE|REMOTE_WRITE, plus RELAXED_ORDERING while
  // the device accepts it. Errors: kResourceExhausted (pinning refused:
  // memory or the locked-memory limit), kInvalidArgument (bad range).
  StatusOr<ibv_mr*> RegisterMr(void* addr, size_t bytes, const char* what);
  // The registry of connected connections (WaitForActivity, async events).
  void Attach(VerbsConnection* conn);
  void Detach(VerbsConnection* conn);
  // Reads and acknowledges pending async events; never blocks.
  void PollAsyncEvents();

 private:
  VerbsBackend(const BackendOptions& options, DeviceSelection dev)
      : options_(options), dev_(std::move(dev)) {}
  void HandleAsyncEventLocked(const ibv_async_event& ev);

  BackendOptions options_;
  DeviceSelection dev_;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  int nqps_ = 1;
  uint64_t job_hash_ = 0;
  Digest data_key_{};
  uint64_t max_wr_bytes_ = kMaxWrBytes;
  uint8_t retry_cnt_ = 7;
  Clock::duration keepalive_idle_ = kKeepaliveMax;
  std::string describe_;
  std::atomic<bool> relaxed_ordering_{true};
  std::mutex psn_mu_;
  std::mt19937 psn_rng_;
  std::mutex mu_;  // conns_ and the async fd
  std::vector<VerbsConnection*> conns_;
};

class VerbsRegion final : public MemoryRegion {
 public:
  VerbsRegion(const VerbsBackend* owner, ibv_mr* mr, void* data, size_t size, PinnedBuffer buffer)
      : MemoryRegion(data, size), owner_(owner), buffer_(std::move(buffer)), mr_(mr) {
    verbs::RegionInfo info;
    info.rkey = mr->rkey;
    info.addr = reinterpret_cast<uintptr_t>(data);
    info.size = size;
    info.job_hash = owner->job_hash();
    info.rank = owner->options().rank;
    blob_ = verbs::EncodeRegion(info);
  }
  ~VerbsRegion() override {
    // Deregister before buffer_ (declared first) unmaps the memory.
    if (ibv_dereg_mr(mr_) != 0) CIUIC_LOG(kWarn, "verbs: ibv_dereg_mr failed: %s", std::strerror(errno));
  }
  std::string Describe() const override { return blob_; }
  const VerbsBackend* owner() const { return owner_; }
  uint32_t lkey() const { return mr_->lkey; }

 private:
  const VerbsBackend* owner_;
  PinnedBuffer buffer_;  // empty for Register()ed caller memory
  ibv_mr* mr_;
  std::string blob_;
};

class VerbsConnection final : public Connection {
 public:
  VerbsConnection(VerbsBackend* backend, int peer, uint32_t tag)
      : Connection(peer), backend_(backend), tag_(tag), nqps_(backend->nqps()) {}
  ~VerbsConnection() override;

  // Creates the CQ, QPs (to INIT, receives posted) and control buffer.
  // Errors: kResourceExhausted / kUnavailable naming what failed.
  Status Init();
  // The endpoint description (verbs_wire.h).
  std::string DescribeEndpoint() const;
  // RTR/RTS with the peer's description, then the handshake (file comment).
  // Errors: kInvalidArgument (malformed or mismatched blob),
  // kDeadlineExceeded / kUnavailable naming the peer.
  Status Connect(const std::string& blob, Clock::time_point deadline);
  // The same without waiting: true once connected, false while the peer
  // has not answered (call again with the same blob).
  StatusOr<bool> PollConnect(const std::string& blob, Clock::time_point deadline);

  StatusOr<RemoteRegion> ImportRegion(const std::string& blob) override;
  Status PostWrite(const MemoryRegion& src, size_t src_offset, RemoteRegion dst, size_t dst_offset,
                   size_t len, uint32_t imm, uint64_t wr_id) override;
  Status PostMessage(const void* data, size_t len) override;
  StatusOr<size_t> Progress(Completion* out, size_t max) override;
  size_t max_outstanding() const override { return kMaxOutstandingWrites; }

  // Backend side. Before WaitForActivity sleeps: posts queued WRs, arms the
  // CQ and moves completions that are already there to the stash. Returns
  // true when the caller should not sleep (something to process).
  // Takes mu_; the backend calls it holding its own lock (lock order:
  // backend, then connection; a connection never waits for the backend's
  // lock while holding mu_).
  bool PrepareToSleep();
  // Fails the connection from an async event (taken by the next Progress /
  // Post*). Called by the backend under its lock; takes only async_mu_.
  void PostAsyncError(const Status& status);
  bool OwnsQp(const ibv_qp* qp) const;
  bool OwnsCq(const ibv_cq* cq) const { return cq == cq_; }

 private:
  struct WrRecord {
    uint64_t op = kNoOp;   // operation sequence number; kNoOp for keepalive
    int32_t msg_slot = -1; // message slot freed when the WR completes
    bool keepalive = false;
  };
  struct PendingWr {
    uint64_t op = kNoOp;
    ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
    uint64_t laddr = 0;
    uint32_t lkey = 0;
    uint32_t len = 0;
    uint64_t raddr = 0;
    uint32_t rkey = 0;
    uint32_t imm = 0;
    int32_t msg_slot = -1;
    bool keepalive = false;
  };
  struct Qp {
    ibv_qp* qp = nullptr;
    uint32_t psn = 0;
    uint32_t recv_depth = 0;
    uint64_t posted = 0;     // WRs handed to the device (index of the next)
    uint64_t completed = 0;  // WRs known complete
    uint32_t since_signal = 0;
    std::vector<WrRecord> ring;      // by WR index % kSendDepth
    std::vector<PendingWr> pending;  // queued, not yet posted
    std::vector<uint64_t> reposts;   // receive wr_ids to post again
    std::deque<uint32_t> parts;      // QPs 1..: sequence numbers of arrived stripes
    uint64_t inflight() const { return posted - completed; }
  };
  struct SendOp {
    uint64_t wr_id = 0;
    uint32_t parts_left = 0;  // WRs not yet complete
    bool write = false;
  };
  struct RecvOp {
    Completion c;
    uint32_t seq = 0;
    bool striped = false;
  };
  enum class State { kCreated, kConnected, kFailed };

  uint64_t CtrlAddr(size_t off) const { return reinterpret_cast<uintptr_t>(ctrl_) + off; }
  StatusOr<ibv_qp*> CreateQp(uint32_t send_depth, uint32_t recv_depth, uint32_t* max_inline);
  Status ToInit(ibv_qp* qp);
  Status ToRtr(ibv_qp* qp, const QpAddress& remote, uint8_t mtu);
  Status ToRts(ibv_qp* qp, uint32_t psn, uint8_t timeout, uint8_t retry);
  Status PostRecvs(int q, const std::vector<uint64_t>& ids);
  Status PostProbe(uint64_t attempt, bool recv);
  Status RestartProbe(uint64_t attempt);
  // Connect in parts: BeginConnect checks the blob, moves the QPs to RTS
  // and sends the first hello; HandshakeStep polls once; FinishConnect
  // attaches the connection to the backend.
  enum class Step { kDone, kIdle, kBusy };
  Status BeginConnect(const std::string& blob);
  StatusOr<Step> HandshakeStep(Clock::time_point deadline);
  void FinishConnect();

  // Both with mu_ held: records the first error (sticky) / takes one that
  // PostAsyncError left.
  void Fail(const Status& s);
  void AdoptAsyncError();
  Status FlushQp(int q);
  Status FlushAll();
  // How many WRs a part of `len` bytes takes.
  size_t WrsFor(uint64_t len) const;
  void QueuePart(int q, uint64_t op, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                 uint64_t len, uint32_t last_imm);
  void MaybeFlush(int q);
  void ProcessWcs(const ibv_wc* wcs, int n);
  void ProcessSendWc(int q, const ibv_wc& wc);
  void ProcessRecvWc(int q, const ibv_wc& wc);
  void DeliverSendDone();
  void DeliverReceived();
  int QpIndex(uint32_t qp_num) const;
  void MaybeKeepalive();

  VerbsBackend* backend_;
  uint32_t tag_;
  int nqps_;
  State state_ = State::kCreated;
  bool attached_ = false;
  EndpointInfo peer_info_;
  uint8_t nonce_[16] = {};  // in this side's description; the hellos' MACs cover it
  // Handshake state (BeginConnect .. FinishConnect).
  bool hs_begun_ = false;
  uint64_t hs_attempt_ = 0;
  bool hs_got_hello_ = false;
  bool hs_acked_ = false;

  ibv_cq* cq_ = nullptr;
  std::vector<Qp> qps_;
  Qp probe_;
  uint32_t max_inline_ = 0;
  uint8_t* ctrl_ = nullptr;
  ibv_mr* ctrl_mr_ = nullptr;

  struct Import {
    uint64_t addr;
    uint32_t rkey;
    uint64_t size;
  };
  std::vector<Import> imports_;

  // Sender.
  std::deque<SendOp> ops_;
  uint64_t op_base_ = 0;      // sequence number of ops_.front()
  uint64_t next_op_ = 0;      // sequence number of the next operation
  size_t writes_outstanding_ = 0;
  std::vector<int32_t> free_msg_slots_;
  bool keepalive_inflight_ = false;
  Clock::time_point last_activity_;
  // Receiver.
  std::deque<RecvOp> recv_ops_;
  uint32_t recv_seq_ = 0;
  std::deque<Completion> ready_;
  std::vector<ibv_wc> stash_;  // polled by Connect / WaitForActivity
  uint32_t progress_calls_ = 0;
  // Scratch for chained posts.
  std::vector<ibv_send_wr> send_wrs_;
  std::vector<ibv_sge> send_sges_;
  std::vector<ibv_recv_wr> recv_wrs_;
  std::vector<ibv_sge> recv_sges_;

  Status error_;  // sticky
  std::mutex mu_;  // against the backend's WaitForActivity
  std::mutex async_mu_;
  std::atomic<bool> async_flag_{false};
  Status async_error_;
};

class VerbsEndpoint final : public Endpoint {
 public:
  explicit VerbsEndpoint(std::unique_ptr<VerbsConnection> conn)
      : conn_(std::move(conn)), blob_(conn_->DescribeEndpoint()) {}
  std::string Describe() const override { return blob_; }
  StatusOr<std::unique_ptr<Connection>> Connect(const std::string& peer_blob,
                                                std::chrono::steady_clock::time_point deadline) override {
    if (conn_ == nullptr) {
      return FailedPreconditionError("verbs: this endpoint was already connected (or failed to)");
    }
    std::unique_ptr<VerbsConnection> conn = std::move(conn_);
    CIUIC_RETURN_IF_ERROR(conn->Connect(peer_blob, deadline));
    return std::unique_ptr<Connection>(std::move(conn));
  }
  StatusOr<std::unique_ptr<Connection>> PollConnect(const std::string& peer_blob,
                                                    std::chrono::steady_clock::time_point deadline) override {
    if (conn_ == nullptr) {
      return FailedPreconditionError("verbs: this endpoint was already connected (or failed to)");
    }
    StatusOr<bool> done = conn_->PollConnect(peer_blob, deadline);
    if (!done.ok()) {
      conn_.reset();
      return done.status();
    }
    if (!*done) return std::unique_ptr<Connection>();
    return std::unique_ptr<Connection>(std::move(conn_));
  }

 private:
  std::unique_ptr<VerbsConnection> conn_;
  std::string blob_;
};

// ---------------------------------------------------------------------------
// VerbsBackend

StatusOr<std::unique_ptr<Backend>> VerbsBackend::Open(const BackendOptions& options) {
  const Config& c = options.config;
  if (c.ib_qps_per_peer < 1 || c.ib_qps_per_peer > static_cast<int>(verbs::kMaxQpsPerPeer)) {
    return InvalidArgumentError("CIUIC_IB_QPS_PER_PEER=" + std::to_string(c.ib_qps_per_peer) + ": expected 1.." +
                                std::to_string(verbs::kMaxQpsPerPeer));
  }
  if (c.ib_timeout < 0 || c.ib_timeout > 31) {
    return InvalidArgumentError("CIUIC_IB_TIMEOUT=" + std::to_string(c.ib_timeout) + ": expected 0..31");
  }
  if (c.ib_retry_cnt < 0 || c.ib_retry_cnt > 7) {
    return InvalidArgumentError("CIUIC_IB_RETRY_CNT=" + std::to_string(c.ib_retry_cnt) + ": expected 0..7");
  }
  // Checked here so that a bad value fails Open, not the first Allocate.
  if (!c.numa_policy.empty()) {
    auto p = topology::ParseNumaPolicy(c.numa_policy);
    if (!p.ok()) return InvalidArgumentError("CIUIC_NUMA_POLICY: " + p.status().message());
  }
  CIUIC_ASSIGN_OR_RETURN(DeviceSelection dev, verbs::OpenDevice(c, options.device));
  std::unique_ptr<VerbsBackend> be(new VerbsBackend(options, std::move(dev)));
  be->nqps_ = c.ib_qps_per_peer;
  be->job_hash_ = verbs::JobHash(options.job_id);
  be->data_key_ = verbs::DataKey(options.secret, options.job_id);
  const uint64_t port_max = be->dev_.port_attr.max_msg_sz;
  be->max_wr_bytes_ = port_max == 0 ? kMaxWrBytes : std::min<uint64_t>(port_max, kMaxWrBytes);
  if (be->max_wr_bytes_ < verbs::kStripeMinPart) {
    return UnavailableError("verbs: " + be->dev_.name + " allows messages of only " +
                            std::to_string(be->max_wr_bytes_) + " bytes");
  }
  // Soft-RoCE (rxe) takes retry_cnt 7 as "retry forever" (its completer
  // never counts 7 down), which would hide a dead peer for good; 6 keeps
  // the intent everywhere else.
  be->retry_cnt_ = static_cast<uint8_t>(c.ib_retry_cnt);
  const bool rxe = be->dev_.name.compare(0, 3, "rxe") == 0 || be->dev_.device_attr.vendor_id == kRxeVendorId;
  if (rxe && be->retry_cnt_ == 7) {
    be->retry_cnt_ = 6;
    CIUIC_LOG(kInfo, "verbs: %s is Soft-RoCE, which retries forever with CIUIC_IB_RETRY_CNT=7: using 6",
              be->dev_.name.c_str());
  }
  // ACK timeout 4.096 us * 2^t (0 = wait forever).
  if (c.ib_timeout > 0) {
    const auto ack = std::chrono::nanoseconds(static_cast<int64_t>(4096) << c.ib_timeout);
    be->keepalive_idle_ = std::clamp<Clock::duration>(ack, kKeepaliveMin, kKeepaliveMax);
  }
  std::random_device rd;
  be->psn_rng_.seed(rd() ^ (static_cast<uint32_t>(getpid()) << 8) ^ static_cast<uint32_t>(options.rank));

  be->pd_ = ibv_alloc_pd(be->dev_.ctx);
  if (be->pd_ == nullptr) {
    return ResourceExhaustedError("verbs: ibv_alloc_pd on " + be->dev_.name + ": " + Errno(errno));
  }
  be->channel_ = ibv_create_comp_channel(be->dev_.ctx);
  if (be->channel_ == nullptr) {
    return ResourceExhaustedError("verbs: ibv_create_comp_channel on " + be->dev_.name + ": " + Errno(errno));
  }
  if (!SetNonBlocking(be->channel_->fd) || !SetNonBlocking(be->dev_.ctx->async_fd)) {
    return UnavailableError("verbs: cannot make the completion/async fds non-blocking: " + Errno(errno));
  }
  const DeviceSelection& d = be->dev_;
  std::string addr;
  if (d.link_layer == verbs::kLinkEthernet) {
    addr = d.gid_type + " gid[" + std::to_string(d.gid_index) + "] " + verbs::GidText(d.gid);
  } else {
    addr = "InfiniBand lid " + std::to_string(d.port_attr.lid);
    if (d.gid_index >= 0) addr += " gid[" + std::to_string(d.gid_index) + "] " + verbs::GidText(d.gid);
  }
  be->describe_ = "verbs " + d.name + ":" + std::to_string(d.port) + " " + addr + " mtu " +
                  std::to_string(128 << d.port_attr.active_mtu) + " qps/peer " + std::to_string(be->nqps_) +
                  " timeout " + std::to_string(c.ib_timeout) + " retry " + std::to_string(be->retry_cnt_);
  CIUIC_LOG(kInfo, "%s", be->describe_.c_str());
  if (d.numa_node >= 0) {
    CIUIC_LOG(kInfo, "verbs: pool memory on NUMA node %d, %s's (CIUIC_NUMA_POLICY=%s)", d.numa_node,
              d.name.c_str(), c.numa_policy.c_str());
  } else {
    CIUIC_LOG(kInfo, "verbs: pool memory on the allocating thread's NUMA node (%s reports none)", d.name.c_str());
  }
  return std::unique_ptr<Backend>(std::move(be));
}

VerbsBackend::~VerbsBackend() {
  if (!conns_.empty()) CIUIC_LOG(kWarn, "verbs: backend destroyed with %zu connections alive", conns_.size());
  if (channel_ != nullptr && ibv_destroy_comp_channel(channel_) != 0) {
    CIUIC_LOG(kWarn, "verbs: ibv_destroy_comp_channel: %s", std::strerror(errno));
  }
  if (pd_ != nullptr && ibv_dealloc_pd(pd_) != 0) {
    CIUIC_LOG(kWarn, "verbs: ibv_dealloc_pd: %s (regions still registered?)", std::strerror(errno));
  }
  if (dev_.ctx != nullptr) ibv_close_device(dev_.ctx);
}

uint32_t VerbsBackend::NextPsn() {
  std::lock_guard<std::mutex> lock(psn_mu_);
  return psn_rng_() & 0xffffff;
}

StatusOr<ibv_mr*> VerbsBackend::RegisterMr(void* addr, size_t bytes, const char* what) {
  ibv_mr* mr = nullptr;
  if (relaxed_ordering_.load(std::memory_order_relaxed)) {
    mr = ibv_reg_mr(pd_, addr, bytes, kAccess | IBV_ACCESS_RELAXED_ORDERING);
  }
  if (mr == nullptr) {
    mr = ibv_reg_mr(pd_, addr, bytes, kAccess);
    // Registers without the optional flag but not with it: stop asking.
    if (mr != nullptr) relaxed_ordering_.store(false, std::memory_order_relaxed);
  }
  if (mr != nullptr) return mr;
  const int err = errno;
  const std::string msg = std::string("verbs: ") + what + ": ibv_reg_mr of " + std::to_string(bytes) +
                          " bytes on " + dev_.name + ": " + Errno(err);
  if (err == EFAULT || err == EINVAL) return InvalidArgumentError(msg);
  return ResourceExhaustedError(msg + " (memory or the locked-memory limit, ulimit -l)");
}

StatusOr<std::unique_ptr<Endpoint>> VerbsBackend::CreateEndpoint(int peer, uint32_t tag) {
  if (peer < 0 || peer >= options_.world_size) {
    return InvalidArgumentError("verbs CreateEndpoint: peer rank " + std::to_string(peer) + " outside world size " +
                                std::to_string(options_.world_size));
  }
  auto conn = std::make_unique<VerbsConnection>(this, peer, tag);
  CIUIC_RETURN_IF_ERROR(conn->Init());
  return std::unique_ptr<Endpoint>(new VerbsEndpoint(std::move(conn)));
}

StatusOr<std::unique_ptr<MemoryRegion>> VerbsBackend::Allocate(size_t bytes) {
  if (bytes == 0) return InvalidArgumentError("verbs Allocate: 0 bytes");
  // NUMA-local to the device when /sys says where it is (dev_.numa_node),
  // pre-faulted, huge pages where available. Not mlock()ed: ibv_reg_mr pins
  // the pages, and locking twice would count them twice against
  // RLIMIT_MEMLOCK.
  // The plan's node when this is the plan's device (its pool node also
  // covers a NIC on a node without memory), else the device's own.
  const int node = !options_.device.empty() && dev_.name == options_.device &&
                           options_.pool_numa_node != BackendOptions::kPoolNodeOfDevice
                       ? options_.pool_numa_node
                       : dev_.numa_node;
  auto buffer = AllocatePinned(bytes, node, options_.config, /*lock=*/false);
  if (!buffer.ok()) return Status(buffer.status().code(), "verbs Allocate: " + buffer.status().message());
  void* data = buffer->data();
  CIUIC_ASSIGN_OR_RETURN(ibv_mr * mr, RegisterMr(data, bytes, "Allocate"));
  return std::unique_ptr<MemoryRegion>(new VerbsRegion(this, mr, data, bytes, std::move(*buffer)));
}

StatusOr<std::unique_ptr<MemoryRegion>> VerbsBackend::Register(void* addr, size_t bytes) {
  if (addr == nullptr || bytes == 0) {
    return InvalidArgumentError("verbs Register: null address or 0 bytes");
  }
  CIUIC_ASSIGN_OR_RETURN(ibv_mr * mr, RegisterMr(addr, bytes, "Register"));
  return std::unique_ptr<MemoryRegion>(new VerbsRegion(this, mr, addr, bytes, PinnedBuffer()));
}

void VerbsBackend::Attach(VerbsConnection* conn) {
  std::lock_guard<std::mutex> lock(mu_);
  conns_.push_back(conn);
}

void VerbsBackend::Detach(VerbsConnection* conn) {
  std::lock_guard<std::mutex> lock(mu_);
  conns_.erase(std::remove(conns_.begin(), conns_.end(), conn), conns_.end());
}

void VerbsBackend::PollAsyncEvents() {
  std::lock_guard<std::mutex> lock(mu_);
  ibv_async_event ev;
  while (ibv_get_async_event(dev_.ctx, &ev) == 0) {
    HandleAsyncEventLocked(ev);
    ibv_ack_async_event(&ev);
  }
}

void VerbsBackend::HandleAsyncEventLocked(const ibv_async_event& ev) {
  const char* what = ibv_event_type_str(ev.event_type);
  switch (ev.event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
      for (VerbsConnection* c : conns_) {
        if (c->OwnsQp(ev.element.qp)) {
          c->PostAsyncError(UnavailableError(PeerName(c->peer()) + ": async event '" + what + "' on QP " +
                                             std::to_string(ev.element.qp->qp_num)));
        }
      }
      break;
    case IBV_EVENT_CQ_ERR:
      for (VerbsConnection* c : conns_) {
        if (c->OwnsCq(ev.element.cq)) {
          c->PostAsyncError(UnavailableError(PeerName(c->peer()) + ": async event '" + what + "' (CQ overrun)"));
        }
      }
      break;
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_DEVICE_FATAL: {
      if (ev.event_type == IBV_EVENT_PORT_ERR && ev.element.port_num != dev_.port) break;
      const std::string why = std::string("async event '") + what + "' on " + dev_.name + ":" +
                              std::to_string(dev_.port);
      CIUIC_LOG(kWarn, "verbs: %s", why.c_str());
      for (VerbsConnection* c : conns_) c->PostAsyncError(UnavailableError(PeerName(c->peer()) + ": " + why));
      break;
    }
    default:
      CIUIC_LOG(kInfo, "verbs: async event '%s' on %s", what, dev_.name.c_str());
      break;
  }
}

void VerbsBackend::WaitForActivity(std::chrono::microseconds max) {
  bool busy = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (VerbsConnection* c : conns_) busy = c->PrepareToSleep() || busy;
  }
  if (!busy && max.count() > 0) {
    pollfd fds[2] = {{channel_->fd, POLLIN, 0}, {dev_.ctx->async_fd, POLLIN, 0}};
    timespec ts{static_cast<time_t>(max.count() / 1000000), static_cast<long>((max.count() % 1000000) * 1000)};
    (void)ppoll(fds, 2, &ts, nullptr);
  }
  // Drain and acknowledge the channel (non-blocking); the CQs are re-armed
  // before the next sleep.
  ibv_cq* cq = nullptr;
  void* cq_ctx = nullptr;
  while (ibv_get_cq_event(channel_, &cq, &cq_ctx) == 0) ibv_ack_cq_events(cq, 1);
  PollAsyncEvents();
}

// ---------------------------------------------------------------------------
// VerbsConnection: setup

VerbsConnection::~VerbsConnection() {
  if (attached_) backend_->Detach(this);
  for (Qp& q : qps_) {
    if (q.qp != nullptr && ibv_destroy_qp(q.qp) != 0) {
      CIUIC_LOG(kWarn, "verbs: ibv_destroy_qp: %s", std::strerror(errno));
    }
  }
  if (probe_.qp != nullptr) ibv_destroy_qp(probe_.qp);
  if (cq_ != nullptr && ibv_destroy_cq(cq_) != 0) CIUIC_LOG(kWarn, "verbs: ibv_destroy_cq: %s", std::strerror(errno));
  if (ctrl_mr_ != nullptr) ibv_dereg_mr(ctrl_mr_);
  std::free(ctrl_);
}

StatusOr<ibv_qp*> VerbsConnection::CreateQp(uint32_t send_depth, uint32_t recv_depth, uint32_t* max_inline) {
  ibv_qp_init_attr init{};
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = send_depth;
  init.cap.max_recv_wr = recv_depth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = kSlotBytes;
  ibv_qp* qp = ibv_create_qp(backend_->pd(), &init);
  if (qp == nullptr) {  // some devices have no inline data: try without
    init.cap.max_inline_data = 0;
    qp = ibv_create_qp(backend_->pd(), &init);
  }
  if (qp == nullptr) {
    const int err = errno;
    const std::string msg = PeerName(peer()) + ": ibv_create_qp (" + std::to_string(send_depth) + "/" +
                            std::to_string(recv_depth) + " WRs): " + Errno(err);
    return err == ENOMEM ? ResourceExhaustedError(msg) : UnavailableError(msg);
  }
  if (max_inline != nullptr) *max_inline = init.cap.max_inline_data;
  return qp;
}

Status VerbsConnection::ToInit(ibv_qp* qp) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(backend_->dev().port);
  a.qp_access_flags = kAccess;
  const int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0) return UnavailableError(PeerName(peer()) + ": QP " + std::to_string(qp->qp_num) + " to INIT: " + Errno(rc));
  return Status::Ok();
}

Status VerbsConnection::ToRtr(ibv_qp* qp, const QpAddress& remote, uint8_t mtu) {
  const DeviceSelection& d = backend_->dev();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(mtu);
  a.dest_qp_num = remote.qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = kMinRnrTimer;
  a.ah_attr.port_num = static_cast<uint8_t>(d.port);
  a.ah_attr.sl = 0;
  a.ah_attr.src_path_bits = 0;
  if (d.link_layer == verbs::kLinkInfiniBand) a.ah_attr.dlid = peer_info_.lid;
  if (d.link_layer == verbs::kLinkEthernet || d.grh_required) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, peer_info_.gid, 16);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(d.gid_index);
    a.ah_attr.grh.hop_limit = kHopLimit;
    a.ah_attr.grh.traffic_class = 0;
    a.ah_attr.grh.flow_label = 0;
  }
  const int rc = ibv_modify_qp(qp, &a,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc != 0) return UnavailableError(PeerName(peer()) + ": QP " + std::to_string(qp->qp_num) + " to RTR: " + Errno(rc));
  return Status::Ok();
}

Status VerbsConnection::ToRts(ibv_qp* qp, uint32_t psn, uint8_t timeout, uint8_t retry) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = timeout;
  a.retry_cnt = retry;
  a.rnr_retry = kRnrRetryForever;
  a.sq_psn = psn;
  a.max_rd_atomic = 1;
  const int rc = ibv_modify_qp(qp, &a,
                               IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                   IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) return UnavailableError(PeerName(peer()) + ": QP " + std::to_string(qp->qp_num) + " to RTS: " + Errno(rc));
  return Status::Ok();
}

Status VerbsConnection::PostRecvs(int q, const std::vector<uint64_t>& ids) {
  if (ids.empty()) return Status::Ok();
  recv_wrs_.assign(ids.size(), ibv_recv_wr{});
  recv_sges_.assign(ids.size(), ibv_sge{});
  for (size_t i = 0; i < ids.size(); ++i) {
    ibv_recv_wr& wr = recv_wrs_[i];
    wr.wr_id = ids[i];
    if (q == 0) {  // messages land in the slot; write heads use no bytes
      recv_sges_[i].addr = CtrlAddr(kRecvOff + ids[i] * kSlotBytes);
      recv_sges_[i].length = kSlotBytes;
      recv_sges_[i].lkey = ctrl_mr_->lkey;
      wr.sg_list = &recv_sges_[i];
      wr.num_sge = 1;
    }
    wr.next = i + 1 < ids.size() ? &recv_wrs_[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_recv(qps_[q].qp, recv_wrs_.data(), &bad);
  if (rc != 0) return InternalError(PeerName(peer()) + ": ibv_post_recv: " + Errno(rc));
  return Status::Ok();
}

Status VerbsConnection::Init() {
  const DeviceSelection& d = backend_->dev();
  const uint32_t max_wr = static_cast<uint32_t>(std::max(d.device_attr.max_qp_wr, 64));
  const uint32_t send_depth = std::min(kSendDepth, max_wr);
  if (send_depth < kSendDepth) {
    return UnavailableError(PeerName(peer()) + ": " + d.name + " allows only " + std::to_string(max_wr) +
                            " WRs per queue, " + std::to_string(kSendDepth) + " needed");
  }
  const uint32_t recv0 = std::min(kRecvSlots, max_wr);
  const uint32_t recv_stripe = std::min(kRecvStripe, max_wr);

  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, kCtrlBytes) != 0) {
    return ResourceExhaustedError(PeerName(peer()) + ": cannot allocate the control buffer");
  }
  ctrl_ = static_cast<uint8_t*>(mem);
  std::memset(ctrl_, 0, kCtrlBytes);
  CIUIC_ASSIGN_OR_RETURN(ctrl_mr_, backend_->RegisterMr(ctrl_, kCtrlBytes, "control buffer"));

  int cqe = 16 + static_cast<int>(send_depth + recv0 + (nqps_ - 1) * (send_depth + recv_stripe));
  cqe = std::min(cqe, d.device_attr.max_cqe);
  cq_ = ibv_create_cq(backend_->ctx(), cqe, this, backend_->channel(), 0);
  if (cq_ == nullptr) {
    return ResourceExhaustedError(PeerName(peer()) + ": ibv_create_cq(" + std::to_string(cqe) + "): " + Errno(errno));
  }

  qps_.resize(nqps_);
  max_inline_ = kSlotBytes;
  for (int i = 0; i < nqps_; ++i) {
    Qp& q = qps_[i];
    q.recv_depth = i == 0 ? recv0 : recv_stripe;
    uint32_t inl = 0;
    CIUIC_ASSIGN_OR_RETURN(q.qp, CreateQp(send_depth, q.recv_depth, &inl));
    max_inline_ = std::min(max_inline_, inl);
    q.psn = backend_->NextPsn();
    q.ring.resize(kSendDepth);
    q.pending.reserve(kSendDepth);
    q.reposts.reserve(q.recv_depth);
    CIUIC_RETURN_IF_ERROR(ToInit(q.qp));
    std::vector<uint64_t> ids(q.recv_depth);
    for (uint32_t k = 0; k < q.recv_depth; ++k) ids[k] = i == 0 ? k : 0;
    CIUIC_RETURN_IF_ERROR(PostRecvs(i, ids));
  }
  CIUIC_ASSIGN_OR_RETURN(probe_.qp, CreateQp(4, 4, nullptr));
  probe_.psn = backend_->NextPsn();
  CIUIC_RETURN_IF_ERROR(ToInit(probe_.qp));
  CIUIC_RETURN_IF_ERROR(net::RandomBytes(nonce_, sizeof(nonce_)));

  free_msg_slots_.clear();
  for (int32_t s = kMessageSlots - 1; s >= 0; --s) free_msg_slots_.push_back(s);
  return Status::Ok();
}

std::string VerbsConnection::DescribeEndpoint() const {
  const DeviceSelection& d = backend_->dev();
  EndpointInfo info;
  info.link_layer = d.link_layer;
  info.mtu = static_cast<uint8_t>(d.port_attr.active_mtu);
  info.port = static_cast<uint8_t>(d.port);
  info.lid = d.port_attr.lid;
  std::memcpy(info.gid, d.gid, 16);
  info.rank = backend_->options().rank;
  info.peer = peer();
  info.tag = tag_;
  info.job_hash = backend_->job_hash();
  info.stripe_min = verbs::kStripeMinPart;
  info.probe = QpAddress{probe_.qp->qp_num, probe_.psn};
  info.keepalive_addr = CtrlAddr(kKeepaliveOff);
  info.keepalive_rkey = ctrl_mr_->rkey;
  std::memcpy(info.nonce, nonce_, sizeof(nonce_));
  for (const Qp& q : qps_) info.qps.push_back(QpAddress{q.qp->qp_num, q.psn});
  return verbs::EncodeEndpoint(info);
}

Status VerbsConnection::BeginConnect(const std::string& blob) {
  if (hs_begun_) return FailedPreconditionError(PeerName(peer()) + ": connect was already begun");
  hs_begun_ = true;
  const std::string who = PeerName(peer());
  auto decoded = verbs::DecodeEndpoint(blob);
  if (!decoded.ok()) return InvalidArgumentError(who + ": " + decoded.status().message());
  const EndpointInfo& p = *decoded;
  const int me = backend_->options().rank;
  auto mismatch = [&](const std::string& what) {
    return InvalidArgumentError(who + ": endpoint description does not fit: " + what);
  };
  if (p.rank != peer()) return mismatch("it is rank " + std::to_string(p.rank) + "'s");
  if (p.peer != me) return mismatch("it was made for rank " + std::to_string(p.peer) + ", this is rank " + std::to_string(me));
  if (p.tag != tag_) return mismatch("tag " + std::to_string(p.tag) + ", expected " + std::to_string(tag_));
  if (p.job_hash != backend_->job_hash()) return mismatch("it belongs to another job");
  if (p.link_layer != backend_->dev().link_layer) return mismatch("InfiniBand on one side, RoCE on the other");
  if (p.qps.size() != qps_.size()) {
    return mismatch("the peer uses CIUIC_IB_QPS_PER_PEER=" + std::to_string(p.qps.size()) + ", this rank " +
                    std::to_string(qps_.size()) + " (must match)");
  }
  if (p.stripe_min != verbs::kStripeMinPart) return mismatch("another striping threshold (ciuic versions differ?)");
  peer_info_ = p;
  state_ = State::kFailed;  // until the handshake succeeds

  const Config& c = backend_->options().config;
  const uint8_t mtu = std::min<uint8_t>(p.mtu, static_cast<uint8_t>(backend_->dev().port_attr.active_mtu));
  for (size_t i = 0; i < qps_.size(); ++i) {
    CIUIC_RETURN_IF_ERROR(ToRtr(qps_[i].qp, p.qps[i], mtu));
    CIUIC_RETURN_IF_ERROR(ToRts(qps_[i].qp, qps_[i].psn, static_cast<uint8_t>(c.ib_timeout), backend_->retry_cnt()));
  }
  hs_attempt_ = 0;
  CIUIC_RETURN_IF_ERROR(PostProbe(hs_attempt_, true));
  CIUIC_RETURN_IF_ERROR(ToRtr(probe_.qp, peer_info_.probe, mtu));
  CIUIC_RETURN_IF_ERROR(ToRts(probe_.qp, probe_.psn, kProbeTimeout, kProbeRetry));
  return PostProbe(hs_attempt_, false);
}

void VerbsConnection::FinishConnect() {
  state_ = State::kConnected;
  last_activity_ = Clock::now();
  backend_->Attach(this);
  attached_ = true;
  const uint8_t mtu = std::min<uint8_t>(peer_info_.mtu, static_cast<uint8_t>(backend_->dev().port_attr.active_mtu));
  CIUIC_LOG(kInfo, "verbs: connected to rank %d (tag %u, %d QPs, mtu %d)", peer(), tag_, nqps_, 128 << mtu);
}

Status VerbsConnection::Connect(const std::string& blob, Clock::time_point deadline) {
  CIUIC_RETURN_IF_ERROR(BeginConnect(blob));
  auto nap = std::chrono::microseconds(20);
  for (;;) {
    CIUIC_ASSIGN_OR_RETURN(const Step step, HandshakeStep(deadline));
    if (step == Step::kDone) break;
    if (step == Step::kIdle) {
      const auto left = std::max<Clock::duration>(deadline - Clock::now(), Clock::duration::zero());
      std::this_thread::sleep_for(std::min<Clock::duration>(nap, left));
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    } else {
      nap = std::chrono::microseconds(20);
    }
  }
  FinishConnect();
  return Status::Ok();
}

StatusOr<bool> VerbsConnection::PollConnect(const std::string& blob, Clock::time_point deadline) {
  if (state_ == State::kConnected) return true;
  if (!hs_begun_) CIUIC_RETURN_IF_ERROR(BeginConnect(blob));
  CIUIC_ASSIGN_OR_RETURN(const Step step, HandshakeStep(deadline));
  if (step != Step::kDone) return false;
  FinishConnect();
  return true;
}

Status VerbsConnection::PostProbe(uint64_t attempt, bool recv) {
  ibv_sge sge{};
  sge.lkey = ctrl_mr_->lkey;
  if (recv) {
    sge.addr = CtrlAddr(kHelloRecvOff);
    sge.length = kSlotBytes;
    ibv_recv_wr wr{};
    wr.wr_id = attempt << 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    const int rc = ibv_post_recv(probe_.qp, &wr, &bad);
    if (rc != 0) return InternalError(PeerName(peer()) + ": handshake receive: " + Errno(rc));
    return Status::Ok();
  }
  verbs::Hello h;
  h.rank = backend_->options().rank;
  h.peer = peer();
  h.tag = tag_;
  h.job_hash = backend_->job_hash();
  h.nqps = static_cast<uint32_t>(nqps_);
  verbs::EncodeHello(h, backend_->data_key(), nonce_, peer_info_.nonce, ctrl_ + kHelloSendOff);
  sge.addr = CtrlAddr(kHelloSendOff);
  sge.length = verbs::kHelloBytes;
  ibv_send_wr wr{};
  wr.wr_id = (attempt << 1) | 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(probe_.qp, &wr, &bad);
  if (rc != 0) return InternalError(PeerName(peer()) + ": handshake send: " + Errno(rc));
  return Status::Ok();
}

Status VerbsConnection::RestartProbe(uint64_t attempt) {
  // RESET -> INIT.  Soft-RoCE in Linux 6.1 can still move a QP that failed
  // its retries to ERROR from a timer or task after the RESET returned, and
  // then INIT is refused (EINVAL; seen once in CI).  So when INIT fails, a
  // QP that is no longer in RESET is reset again, a few times, before the
  // error counts.
  Status init;
  for (int tries = 0;; ++tries) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RESET;
    const int rc = ibv_modify_qp(probe_.qp, &a, IBV_QP_STATE);
    if (rc != 0) return UnavailableError(PeerName(peer()) + ": probe QP to RESET: " + Errno(rc));
    init = ToInit(probe_.qp);
    if (init.ok() || tries == kProbeResetTries - 1) break;
    ibv_qp_attr now{};
    ibv_qp_init_attr unused{};
    if (ibv_query_qp(probe_.qp, &now, IBV_QP_STATE, &unused) != 0 || now.qp_state == IBV_QPS_RESET) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CIUIC_RETURN_IF_ERROR(init);
  // Always a receive: if the peer's ACK of our first hello was lost it may
  // send its own again, and after the reset that counts as new.
  CIUIC_RETURN_IF_ERROR(PostProbe(attempt, true));
  const uint8_t mtu = std::min<uint8_t>(peer_info_.mtu, static_cast<uint8_t>(backend_->dev().port_attr.active_mtu));
  CIUIC_RETURN_IF_ERROR(ToRtr(probe_.qp, peer_info_.probe, mtu));
  CIUIC_RETURN_IF_ERROR(ToRts(probe_.qp, probe_.psn, kProbeTimeout, kProbeRetry));
  return PostProbe(attempt, false);
}

StatusOr<VerbsConnection::Step> VerbsConnection::HandshakeStep(Clock::time_point deadline) {
  const std::string who = PeerName(peer());
  ibv_wc wc[16];
  const int n = ibv_poll_cq(cq_, 16, wc);
  if (n < 0) return InternalError(who + ": ibv_poll_cq failed during the handshake");
  bool restart = false;
  for (int i = 0; i < n; ++i) {
    if (wc[i].qp_num != probe_.qp->qp_num) {
      stash_.push_back(wc[i]);  // data from a peer that finished first
      continue;
    }
    const bool is_send = (wc[i].wr_id & 1) != 0;
    if ((wc[i].wr_id >> 1) != hs_attempt_) continue;  // from an earlier incarnation
    if (wc[i].status == IBV_WC_SUCCESS) {
      if (is_send) {
        hs_acked_ = true;
        continue;
      }
      auto hello = verbs::DecodeHello(ctrl_ + kHelloRecvOff, wc[i].byte_len);
      if (!hello.ok()) return UnavailableError(who + ": " + hello.status().message());
      if (hello->rank != peer() || hello->peer != backend_->options().rank || hello->tag != tag_ ||
          hello->job_hash != backend_->job_hash() || hello->nqps != static_cast<uint32_t>(nqps_)) {
        return UnavailableError(who + ": handshake from a process of another job, rank or tag");
      }
      if (!verbs::HelloMacMatches(ctrl_ + kHelloRecvOff, backend_->data_key(), peer_info_.nonce, nonce_)) {
        return FailedPreconditionError(who + ": its handshake carries no valid proof of the job secret "
                                             "(CIUIC_SECRET differs, or not the rank the store described)");
      }
      hs_got_hello_ = true;
    } else if (wc[i].status == IBV_WC_WR_FLUSH_ERR) {
      // The probe QP went to the error state; the failed send says why.
    } else if (is_send && wc[i].status == IBV_WC_RETRY_EXC_ERR) {
      restart = true;  // the peer's probe QP was not ready yet
    } else {
      return WcError(peer(), wc[i]);
    }
  }
  if (hs_got_hello_ && hs_acked_) return Step::kDone;
  if (Clock::now() >= deadline) {
    return DeadlineExceededError(who + ": no connection handshake before the deadline (" +
                                 std::string(hs_got_hello_ ? "its hello arrived, ours was not acknowledged"
                                                           : "no hello from it") +
                                 ", " + std::to_string(hs_attempt_ + 1) + " attempts; is it running Connect?)");
  }
  if (restart) {
    ++hs_attempt_;
    CIUIC_RETURN_IF_ERROR(RestartProbe(hs_attempt_));
    return Step::kBusy;
  }
  return n == 0 ? Step::kIdle : Step::kBusy;
}

// ---------------------------------------------------------------------------
// VerbsConnection: operations

bool VerbsConnection::OwnsQp(const ibv_qp* qp) const {
  if (qp == probe_.qp) return true;
  for (const Qp& q : qps_) {
    if (q.qp == qp) return true;
  }
  return false;
}

void VerbsConnection::PostAsyncError(const Status& status) {
  std::lock_guard<std::mutex> lock(async_mu_);
  if (async_error_.ok()) async_error_ = status;
  async_flag_.store(true, std::memory_order_release);
}

void VerbsConnection::AdoptAsyncError() {
  if (!async_flag_.load(std::memory_order_acquire)) return;
  Status s;
  {
    std::lock_guard<std::mutex> lock(async_mu_);
    s = async_error_;
  }
  Fail(s);
}

void VerbsConnection::Fail(const Status& s) {
  if (!error_.ok() || s.ok()) return;
  error_ = s;
  CIUIC_LOG(kWarn, "%s", s.message().c_str());
}

int VerbsConnection::QpIndex(uint32_t qp_num) const {
  for (int i = 0; i < nqps_; ++i) {
    if (qps_[i].qp->qp_num == qp_num) return i;
  }
  return -1;
}

StatusOr<RemoteRegion> VerbsConnection::ImportRegion(const std::string& blob) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string who = PeerName(peer());
  auto info = verbs::DecodeRegion(blob);
  if (!info.ok()) return InvalidArgumentError(who + ": " + info.status().message());
  if (info->job_hash != backend_->job_hash()) {
    return InvalidArgumentError(who + ": the region description belongs to another job");
  }
  if (info->rank != peer()) {
    return InvalidArgumentError(who + ": the region description is rank " + std::to_string(info->rank) +
                                "'s, not this peer's");
  }
  if (imports_.size() >= UINT32_MAX) return ResourceExhaustedError(who + ": too many imported regions");
  imports_.push_back(Import{info->addr, info->rkey, info->size});
  RemoteRegion r;
  r.id = static_cast<uint32_t>(imports_.size() - 1);
  r.size = info->size;
  return r;
}

size_t VerbsConnection::WrsFor(uint64_t len) const {
  const uint64_t max = backend_->max_wr_bytes();
  return len <= max ? 1 : static_cast<size_t>((len + max - 1) / max);
}

void VerbsConnection::QueuePart(int q, uint64_t op, uint64_t laddr, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                                uint64_t len, uint32_t last_imm) {
  PendingWr w;
  w.op = op;
  w.lkey = lkey;
  w.rkey = rkey;
  const uint64_t max = backend_->max_wr_bytes();
  if (len > max) {  // rare: several WRs, the immediate on the last
    uint64_t off = 0;
    const std::vector<uint64_t> chunks = verbs::ChunkPart(len, max);
    for (size_t i = 0; i + 1 < chunks.size(); ++i) {
      w.opcode = IBV_WR_RDMA_WRITE;
      w.laddr = laddr + off;
      w.raddr = raddr + off;
      w.len = static_cast<uint32_t>(chunks[i]);
      qps_[q].pending.push_back(w);
      off += chunks[i];
    }
    laddr += off;
    raddr += off;
    len -= off;
  }
  w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  w.laddr = laddr;
  w.raddr = raddr;
  w.len = static_cast<uint32_t>(len);
  w.imm = last_imm;
  qps_[q].pending.push_back(w);
}

void VerbsConnection::MaybeFlush(int q) {
  Qp& qp = qps_[q];
  if (qp.pending.size() >= kMaxChain || qp.inflight() == 0) Fail(FlushQp(q));
}

Status VerbsConnection::PostWrite(const MemoryRegion& src, size_t src_offset, RemoteRegion dst, size_t dst_offset,
                                  size_t len, uint32_t imm, uint64_t wr_id) {
  std::lock_guard<std::mutex> lock(mu_);
  AdoptAsyncError();
  if (!error_.ok()) return error_;
  auto who = [this] { return PeerName(peer()); };  // error paths only
  const auto* region = dynamic_cast<const VerbsRegion*>(&src);
  if (region == nullptr || region->owner() != backend_) {
    return InvalidArgumentError(who() + ": PostWrite source is not a region of this verbs backend");
  }
  if (src_offset > src.size() || len > src.size() - src_offset) {
    return InvalidArgumentError(who() + ": PostWrite source range [" + std::to_string(src_offset) + ", +" +
                                std::to_string(len) + ") outside its " + std::to_string(src.size()) + "-byte region");
  }
  if (dst.id >= imports_.size()) {
    return InvalidArgumentError(who() + ": PostWrite to unknown remote region " + std::to_string(dst.id));
  }
  const Import& imp = imports_[dst.id];
  if (dst_offset > imp.size || len > imp.size - dst_offset) {
    return InvalidArgumentError(who() + ": PostWrite target range [" + std::to_string(dst_offset) + ", +" +
                                std::to_string(len) + ") outside the peer's " + std::to_string(imp.size) +
                                "-byte region");
  }
  if (writes_outstanding_ >= kMaxOutstandingWrites) {
    return ResourceExhaustedError(who() + ": " + std::to_string(kMaxOutstandingWrites) +
                                  " writes outstanding (progress and retry)");
  }
  verbs::WritePart parts_buf[verbs::kMaxQpsPerPeer];
  const int nparts = verbs::SplitWrite(len, nqps_, parts_buf);
  const verbs::WritePart* parts = parts_buf;
  for (int k = 0; k < nparts; ++k) {
    const verbs::WritePart& p = parts[k];
    const size_t need = WrsFor(p.len);
    if (need > kSendDepth / 2) {
      return InvalidArgumentError(who() + ": a write of " + std::to_string(len) + " bytes needs " +
                                  std::to_string(need) + " WRs on one QP; at most " + std::to_string(kSendDepth / 2) +
                                  " of " + std::to_string(backend_->max_wr_bytes()) + " bytes (split it)");
    }
    const Qp& q = qps_[p.qp];
    if (q.inflight() + q.pending.size() + need + 1 > kSendDepth) {  // +1: keepalive
      return ResourceExhaustedError(who() + ": send queue full (progress and retry)");
    }
  }
  const uint64_t op = next_op_++;
  ops_.push_back(SendOp{wr_id, 0, true});
  ++writes_outstanding_;
  const uint64_t laddr = reinterpret_cast<uintptr_t>(src.data()) + src_offset;
  const uint64_t raddr = imp.addr + dst_offset;
  for (int k = 0; k < nparts; ++k) {
    const verbs::WritePart& p = parts[k];
    const size_t before = qps_[p.qp].pending.size();
    QueuePart(p.qp, op, laddr + p.offset, region->lkey(), raddr + p.offset, imp.rkey, p.len,
              p.qp == 0 ? imm : static_cast<uint32_t>(op));
    ops_.back().parts_left += static_cast<uint32_t>(qps_[p.qp].pending.size() - before);
  }
  for (int k = 0; k < nparts; ++k) MaybeFlush(parts[k].qp);
  return error_;
}

Status VerbsConnection::PostMessage(const void* data, size_t len) {
  std::lock_guard<std::mutex> lock(mu_);
  AdoptAsyncError();
  if (!error_.ok()) return error_;
  auto who = [this] { return PeerName(peer()); };  // error paths only
  if (len > kMaxMessageBytes) {
    return InvalidArgumentError(who() + ": message of " + std::to_string(len) + " bytes (at most " +
                                std::to_string(kMaxMessageBytes) + ")");
  }
  if (data == nullptr && len > 0) return InvalidArgumentError(who() + ": PostMessage of null data");
  Qp& q = qps_[0];
  if (free_msg_slots_.empty() || q.inflight() + q.pending.size() + 2 > kSendDepth) {
    return ResourceExhaustedError(who() + ": " + std::to_string(kMessageSlots) + " messages queued (progress and retry)");
  }
  const int32_t slot = free_msg_slots_.back();
  free_msg_slots_.pop_back();
  if (len > 0) std::memcpy(ctrl_ + kMsgOff + slot * kSlotBytes, data, len);
  const uint64_t op = next_op_++;
  ops_.push_back(SendOp{0, 1, false});
  PendingWr w;
  w.op = op;
  w.opcode = IBV_WR_SEND;
  w.laddr = CtrlAddr(kMsgOff + slot * kSlotBytes);
  w.lkey = ctrl_mr_->lkey;
  w.len = static_cast<uint32_t>(len);
  w.msg_slot = slot;
  q.pending.push_back(w);
  MaybeFlush(0);
  return error_;
}

Status VerbsConnection::FlushQp(int qi) {
  Qp& q = qps_[qi];
  if (q.pending.empty() || !error_.ok()) return error_;
  const size_t room = kSendDepth - static_cast<size_t>(q.inflight());
  const size_t n = std::min(q.pending.size(), room);
  if (n == 0) return Status::Ok();  // retried once completions free the queue
  send_wrs_.assign(n, ibv_send_wr{});
  send_sges_.assign(n, ibv_sge{});
  for (size_t i = 0; i < n; ++i) {
    const PendingWr& p = q.pending[i];
    ibv_send_wr& wr = send_wrs_[i];
    const uint64_t index = q.posted + i;
    WrRecord& rec = q.ring[index % kSendDepth];
    rec.op = p.op;
    rec.msg_slot = p.msg_slot;
    rec.keepalive = p.keepalive;
    wr.wr_id = index;
    wr.opcode = p.opcode;
    if (p.len > 0) {
      send_sges_[i].addr = p.laddr;
      send_sges_[i].length = p.len;
      send_sges_[i].lkey = p.lkey;
      wr.sg_list = &send_sges_[i];
      wr.num_sge = 1;
    }
    if (p.len <= max_inline_ && p.len > 0) wr.send_flags |= IBV_SEND_INLINE;
    if (++q.since_signal >= kSignalEvery || i + 1 == n) {
      wr.send_flags |= IBV_SEND_SIGNALED;
      q.since_signal = 0;
    }
    if (p.opcode != IBV_WR_SEND) {
      wr.wr.rdma.remote_addr = p.raddr;
      wr.wr.rdma.rkey = p.rkey;
    }
    if (p.opcode == IBV_WR_RDMA_WRITE_WITH_IMM) wr.imm_data = htonl(p.imm);
    wr.next = i + 1 < n ? &send_wrs_[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(q.qp, send_wrs_.data(), &bad);
  if (rc != 0) {
    return InternalError(PeerName(peer()) + ": ibv_post_send of " + std::to_string(n) + " WRs on QP " +
                         std::to_string(q.qp->qp_num) + ": " + Errno(rc));
  }
  q.posted += n;
  q.pending.erase(q.pending.begin(), q.pending.begin() + static_cast<std::ptrdiff_t>(n));
  return Status::Ok();
}

Status VerbsConnection::FlushAll() {
  for (int i = 0; i < nqps_ && error_.ok(); ++i) Fail(FlushQp(i));
  return error_;
}

void VerbsConnection::ProcessWcs(const ibv_wc* wcs, int n) {
  // The probe QP is done with after the handshake; a late flush of one of
  // its earlier incarnations means nothing.
  const uint32_t probe = probe_.qp->qp_num;
  // A failing QP flushes everything after the real error; report the
  // error itself, not a flush, when both are in the batch.
  for (int i = 0; i < n && error_.ok(); ++i) {
    if (wcs[i].qp_num != probe && wcs[i].status != IBV_WC_SUCCESS && wcs[i].status != IBV_WC_WR_FLUSH_ERR) {
      Fail(WcError(peer(), wcs[i]));
    }
  }
  for (int i = 0; i < n; ++i) {
    const ibv_wc& wc = wcs[i];
    if (wc.qp_num == probe) continue;
    if (wc.status != IBV_WC_SUCCESS) {
      Fail(WcError(peer(), wc));
      continue;
    }
    if (!error_.ok()) continue;
    const int q = QpIndex(wc.qp_num);
    if (q < 0) continue;
    if (wc.opcode & IBV_WC_RECV) {
      ProcessRecvWc(q, wc);
    } else {
      ProcessSendWc(q, wc);
    }
  }
}

void VerbsConnection::ProcessSendWc(int qi, const ibv_wc& wc) {
  Qp& q = qps_[qi];
  // A signalled completion retires every earlier WR of its QP.
  if (wc.wr_id < q.completed || wc.wr_id >= q.posted) {
    Fail(InternalError(PeerName(peer()) + ": send completion for unknown WR " + std::to_string(wc.wr_id)));
    return;
  }
  last_activity_ = Clock::now();
  while (q.completed <= wc.wr_id) {
    WrRecord& rec = q.ring[q.completed % kSendDepth];
    if (rec.op != kNoOp) {
      SendOp& op = ops_[static_cast<size_t>(rec.op - op_base_)];
      --op.parts_left;
    }
    if (rec.msg_slot >= 0) free_msg_slots_.push_back(rec.msg_slot);
    if (rec.keepalive) {
      keepalive_inflight_ = false;
      CIUIC_LOG(kTrace, "verbs: keepalive to rank %d acknowledged", peer());
    }
    rec = WrRecord();
    ++q.completed;
  }
  DeliverSendDone();
}

void VerbsConnection::DeliverSendDone() {
  while (!ops_.empty() && ops_.front().parts_left == 0) {
    if (ops_.front().write) {
      Completion c;
      c.kind = Completion::Kind::kWriteDone;
      c.wr_id = ops_.front().wr_id;
      ready_.push_back(c);
      --writes_outstanding_;
    }
    ops_.pop_front();
    ++op_base_;
  }
}

void VerbsConnection::ProcessRecvWc(int qi, const ibv_wc& wc) {
  Qp& q = qps_[qi];
  auto who = [this] { return PeerName(peer()); };  // error paths only
  q.reposts.push_back(wc.wr_id);
  if (qi == 0) {
    RecvOp op;
    op.seq = recv_seq_++;
    if (wc.opcode == IBV_WC_RECV) {
      if (wc.byte_len > kMaxMessageBytes || wc.wr_id >= q.recv_depth) {
        Fail(DataLossError(who() + ": a " + std::to_string(wc.byte_len) + "-byte message (at most " +
                           std::to_string(kMaxMessageBytes) + ")"));
        return;
      }
      op.c.kind = Completion::Kind::kMessage;
      op.c.len = wc.byte_len;
      std::memcpy(op.c.data, ctrl_ + kRecvOff + wc.wr_id * kSlotBytes, wc.byte_len);
    } else if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      op.c.kind = Completion::Kind::kWriteReceived;
      op.c.imm = ntohl(wc.imm_data);
      op.striped = verbs::HeadIsStriped(wc.byte_len, nqps_);
    } else {
      Fail(DataLossError(who() + ": unexpected receive opcode " + std::to_string(wc.opcode)));
      return;
    }
    recv_ops_.push_back(op);
  } else {
    if (wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) {
      Fail(DataLossError(who() + ": unexpected receive opcode " + std::to_string(wc.opcode) + " on stripe QP " +
                         std::to_string(qi)));
      return;
    }
    q.parts.push_back(ntohl(wc.imm_data));
  }
  DeliverReceived();
}

void VerbsConnection::DeliverReceived() {
  while (!recv_ops_.empty()) {
    RecvOp& op = recv_ops_.front();
    if (op.striped) {
      for (int i = 1; i < nqps_; ++i) {
        if (qps_[i].parts.empty()) return;  // a stripe is still on its way
      }
      for (int i = 1; i < nqps_; ++i) {
        if (qps_[i].parts.front() != op.seq) {
          Fail(DataLossError(PeerName(peer()) + ": stripe of operation " + std::to_string(qps_[i].parts.front()) +
                             " arrived on QP " + std::to_string(i) + " where operation " + std::to_string(op.seq) +
                             " was expected"));
          return;
        }
        qps_[i].parts.pop_front();
      }
    }
    ready_.push_back(op.c);
    recv_ops_.pop_front();
  }
}

void VerbsConnection::MaybeKeepalive() {
  Qp& q = qps_[0];
  if (keepalive_inflight_ || q.inflight() != 0 || !q.pending.empty() || state_ != State::kConnected) return;
  const auto now = Clock::now();
  if (now - last_activity_ < backend_->keepalive_idle()) return;
  PendingWr w;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.len = 0;
  w.raddr = peer_info_.keepalive_addr;
  w.rkey = peer_info_.keepalive_rkey;
  w.keepalive = true;
  q.pending.push_back(w);
  keepalive_inflight_ = true;
  last_activity_ = now;
  CIUIC_LOG(kTrace, "verbs: keepalive to rank %d", peer());
  Fail(FlushQp(0));
}

StatusOr<size_t> VerbsConnection::Progress(Completion* out, size_t max) {
  if (++progress_calls_ % kAsyncEvery == 0) backend_->PollAsyncEvents();
  std::lock_guard<std::mutex> lock(mu_);
  AdoptAsyncError();
  if (error_.ok()) {
    FlushAll().IgnoreError();  // sticky: seen below
    if (!stash_.empty()) {
      ProcessWcs(stash_.data(), static_cast<int>(stash_.size()));
      stash_.clear();
    }
    bool any = false;
    for (int round = 0; round < 4 && ready_.size() < std::max<size_t>(max, 1); ++round) {
      ibv_wc wc[kPollBatch];
      const int n = ibv_poll_cq(cq_, kPollBatch, wc);
      if (n < 0) {
        Fail(InternalError(PeerName(peer()) + ": ibv_poll_cq failed"));
        break;
      }
      if (n == 0) break;
      any = true;
      ProcessWcs(wc, n);
      if (n < kPollBatch) break;
    }
    for (int i = 0; i < nqps_ && error_.ok(); ++i) {
      if (qps_[i].reposts.empty()) continue;
      Fail(PostRecvs(i, qps_[i].reposts));
      qps_[i].reposts.clear();
    }
    if (error_.ok()) FlushAll().IgnoreError();  // what completions made room for
    if (!any && error_.ok()) MaybeKeepalive();
  }
  size_t n = 0;
  while (n < max && !ready_.empty()) {
    out[n++] = ready_.front();
    ready_.pop_front();
  }
  if (n == 0 && !error_.ok()) return error_;
  return n;
}

bool VerbsConnection::PrepareToSleep() {
  std::lock_guard<std::mutex> lock(mu_);
  AdoptAsyncError();
  if (!error_.ok() || !ready_.empty() || !stash_.empty()) return true;
  if (!FlushAll().ok()) return true;
  if (ibv_req_notify_cq(cq_, 0) != 0) return true;
  // Completions that arrived before arming raise no event: take them now.
  ibv_wc wc[16];
  const int n = ibv_poll_cq(cq_, 16, wc);
  if (n > 0) stash_.insert(stash_.end(), wc, wc + n);
  return n != 0;
}

}  // namespace

StatusOr<std::unique_ptr<Backend>> OpenVerbsBackend(const BackendOptions& options) {
  return VerbsBackend::Open(options);
}

bool VerbsUsable(const BackendOptions& options, std::string* why) {
  auto dev = verbs::OpenDevice(options.config);
  if (!dev.ok()) {
    if (why != nullptr) *why = dev.status().message();
    return false;
  }
  ibv_close_device(dev->ctx);
  if (why != nullptr) why->clear();
  return true;
}

}  // namespace ciuic::transport
