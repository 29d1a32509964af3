// The tcp backend's Connection (see tcp_connection.h; wire format in
// tcp_wire.h).
#include "transport/tcp/tcp_connection.h"

#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/log.h"

namespace ciuic::transport::tcp {
namespace {

// Frames waiting per socket; more ops stay queued as Ops.
constexpr size_t kTxFramesPerSocket = 64;
// Received completions buffered per socket before its reading pauses.
constexpr size_t kRxEventsPerSocket = 64;
// Bytes read ahead per socket behind the frame being received.
constexpr size_t kReadAheadBytes = 8u << 10;
// iovecs per sendmsg (a header and a payload per frame).
constexpr int kSendIov = 64;
// Bytes one Progress call moves before it returns, per direction, so a
// fast peer cannot keep the caller inside Progress indefinitely.
constexpr size_t kBudgetBytes = 32u << 20;

bool PeerGone(int err) { return err == EPIPE || err == ECONNRESET || err == ENOTCONN; }

// A connecting side's socket closed before the acceptor's proof: it turned
// the hello away (its log says why) or went away before accepting.
constexpr char kBeforeProof[] =
    " before sending its accept proof (it rejected this rank's hello: its log names the reason, e.g. a "
    "different CIUIC_SECRET, job or ciuic version; or it exited before accepting)";

}  // namespace

TcpConnection::TcpConnection(TcpBackend* backend, int peer, std::string peer_address,
                             uint64_t peer_instance, const std::vector<int>& tx_fds,
                             const std::vector<int>& rx_fds,
                             const std::vector<std::string>& accept_proofs)
    : Connection(peer),
      backend_(backend),
      peer_address_(std::move(peer_address)),
      peer_instance_(peer_instance),
      nsocks_(static_cast<int>(tx_fds.size())),
      tx_(tx_fds.size()),
      rx_(rx_fds.size()),
      watch_(new SocketWatch[tx_fds.size()]) {
  for (int s = 0; s < nsocks_; ++s) {
    tx_[s].fd = tx_fds[s];
    tx_[s].frames.Init(kTxFramesPerSocket);
    rx_[s].fd = rx_fds[s];
    if (!accept_proofs.empty()) rx_[s].proof_want = accept_proofs[static_cast<size_t>(s)];
    rx_[s].next_seq = static_cast<uint64_t>(s);
    rx_[s].events.Init(kRxEventsPerSocket);
    rx_[s].ahead.reset(new uint8_t[kReadAheadBytes]);
    watch_[s].tx_fd = tx_fds[s];
    watch_[s].rx_fd = rx_fds[s];
    backend_->Watch(&watch_[s]);
  }
  ops_.Init(kMaxOutstanding + kMaxQueuedMessages);
}

TcpConnection::~TcpConnection() {
  for (int s = 0; s < nsocks_; ++s) backend_->Unwatch(&watch_[s]);
  for (int s = 0; s < nsocks_; ++s) {
    TxSocket& t = tx_[s];
    // A goodbye can only go at a frame boundary, and takes the sequence
    // number of the first frame on this socket that will never be sent.
    if (error_.ok() && tx_error_.ok() && (t.frames.empty() || t.frames.front().sent == 0)) {
      uint64_t seq = tx_seq_;
      while (seq % static_cast<uint64_t>(nsocks_) != static_cast<uint64_t>(s)) ++seq;
      if (!t.frames.empty()) seq = t.frames.front().seq;
      FrameHeader h;
      h.type = kFrameGoodbye;
      h.seq = static_cast<uint32_t>(seq);
      uint8_t bytes[kFrameHeaderBytes];
      EncodeFrameHeader(h, bytes);
      // Best effort: a full send buffer just means a plain close.
      (void)!send(t.fd, bytes, sizeof(bytes), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
  if (error_.ok()) LingerBeforeClose();
  for (int s = 0; s < nsocks_; ++s) {
    close(tx_[s].fd);
    if (rx_[s].fd != tx_[s].fd) close(rx_[s].fd);
  }
}

void TcpConnection::LingerBeforeClose() {
  // close() on a socket with unread bytes (a credit the peer sent after our
  // last use) resets the connection, and a reset drops what the kernel
  // still holds of our last frames when the peer was too slow to take them
  // (seen with ranks that outnumber the cores): the peer then misses data
  // it needs. So: end our direction (FIN after the data), read and discard
  // what arrives, and close once the kernel has handed all our bytes over
  // (SIOCOUTQ 0), the peer has closed too, or kLinger has passed.
  constexpr auto kLinger = std::chrono::seconds(2);
  const auto until = std::chrono::steady_clock::now() + kLinger;
  // Another connection's linger ran out just now: peers are unreachable
  // (a cut link, a stopped host), so this one looks once and closes.
  const bool wait = !backend_->LingerRanOutWithin(kLinger);
  for (int s = 0; s < nsocks_; ++s) shutdown(tx_[s].fd, SHUT_WR);
  std::vector<pollfd> fds;
  char discard[4096];
  for (;;) {
    bool pending = false;
    fds.clear();
    for (int s = 0; s < nsocks_; ++s) {
      const int tx = tx_[s].fd;
      const int both[2] = {rx_[s].fd, tx};
      for (int f = 0; f < (both[0] == tx ? 1 : 2); ++f) {
        const int fd = both[f];
        ssize_t k;
        while ((k = recv(fd, discard, sizeof(discard), MSG_DONTWAIT)) > 0) {
        }
        if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) continue;  // peer gone
        fds.push_back(pollfd{fd, POLLIN, 0});
        int unsent = 0;
        if (fd == tx && ioctl(tx, SIOCOUTQ, &unsent) == 0 && unsent > 0) pending = true;
      }
    }
    if (!pending || !wait) return;
    if (std::chrono::steady_clock::now() >= until) {
      backend_->LingerRanOut(std::chrono::steady_clock::now());
      return;
    }
    (void)poll(fds.data(), fds.size(), 5);
  }
}

std::string TcpConnection::Who() const {
  return "peer rank " + std::to_string(peer()) + " (" + peer_address_ + ")";
}

Status TcpConnection::Fail(Status status) {
  if (error_.ok()) {
    error_ = std::move(status);
    CIUIC_LOG(kInfo, "%s", error_.message().c_str());
    for (int s = 0; s < nsocks_; ++s) {
      watch_[s].active.store(false, std::memory_order_relaxed);
      // The peer sees the failure too instead of waiting on us.
      shutdown(tx_[s].fd, SHUT_RDWR);
      if (rx_[s].fd != tx_[s].fd) shutdown(rx_[s].fd, SHUT_RDWR);
    }
  }
  return error_;
}

Status TcpConnection::ClosedError(const std::string& how) const {
  return UnavailableError("tcp: " + Who() + " closed the connection" + how);
}

StatusOr<RemoteRegion> TcpConnection::ImportRegion(const std::string& blob) {
  if (!error_.ok()) return error_;
  CIUIC_ASSIGN_OR_RETURN(RegionInfo info, DecodeRegion(blob));
  if (info.rank != peer() || info.instance != peer_instance_) {
    return InvalidArgumentError("tcp: region description of rank " + std::to_string(info.rank) +
                                " does not belong to " + Who() +
                                " (another rank or an earlier process)");
  }
  if (imports_.size() >= UINT32_MAX) return ResourceExhaustedError("tcp: too many imports");
  imports_.push_back(Import{info.id, info.key, info.size});
  RemoteRegion r;
  r.id = static_cast<uint32_t>(imports_.size() - 1);
  r.size = info.size;
  return r;
}

Status TcpConnection::PostWrite(const MemoryRegion& src, size_t src_offset, RemoteRegion dst,
                                size_t dst_offset, size_t len, uint32_t imm, uint64_t wr_id) {
  if (!error_.ok()) return error_;
  if (len > src.size() || src_offset > src.size() - len) {
    return InvalidArgumentError("tcp: write to rank " + std::to_string(peer()) + " of " +
                                std::to_string(len) + " bytes at source offset " +
                                std::to_string(src_offset) + " exceeds the source region of " +
                                std::to_string(src.size()) + " bytes");
  }
  if (dst.id >= imports_.size()) {
    return InvalidArgumentError("tcp: write to rank " + std::to_string(peer()) +
                                " names remote region " + std::to_string(dst.id) +
                                ", which was not imported on this connection");
  }
  const Import& imp = imports_[dst.id];
  if (len > imp.size || dst_offset > imp.size - len) {
    return InvalidArgumentError("tcp: write to rank " + std::to_string(peer()) + " of " +
                                std::to_string(len) + " bytes at offset " +
                                std::to_string(dst_offset) + " exceeds the remote region of " +
                                std::to_string(imp.size) + " bytes");
  }
  if (writes_outstanding_ >= kMaxOutstanding) {
    return ResourceExhaustedError("tcp: " + std::to_string(kMaxOutstanding) +
                                  " writes to rank " + std::to_string(peer()) +
                                  " outstanding; progress and retry");
  }
  Op& op = ops_.push();
  op.type = kFrameWrite;
  op.src = static_cast<const uint8_t*>(src.data()) + src_offset;
  op.len = len;
  op.region_id = imp.id;
  op.region_key = imp.key;
  op.dst_offset = dst_offset;
  op.imm = imm;
  op.wr_id = wr_id;
  op.framed = 0;
  op.frames = 0;
  op.frames_sent = 0;
  ++writes_outstanding_;
  return Status::Ok();
}

Status TcpConnection::PostMessage(const void* data, size_t len) {
  if (!error_.ok()) return error_;
  if (len > kMaxMessageBytes || (data == nullptr && len > 0)) {
    return InvalidArgumentError("tcp: message to rank " + std::to_string(peer()) + " of " +
                                std::to_string(len) + " bytes (at most " +
                                std::to_string(kMaxMessageBytes) + ")");
  }
  if (messages_queued_ >= kMaxQueuedMessages) {
    return ResourceExhaustedError("tcp: " + std::to_string(kMaxQueuedMessages) +
                                  " messages to rank " + std::to_string(peer()) +
                                  " queued; progress and retry");
  }
  Op& op = ops_.push();
  op.type = kFrameMessage;
  if (len > 0) std::memcpy(op.data, data, len);
  op.src = op.data;
  op.len = len;
  op.region_id = 0;
  op.region_key = 0;
  op.dst_offset = 0;
  op.imm = 0;
  op.wr_id = 0;
  op.framed = 0;
  op.frames = 0;
  op.frames_sent = 0;
  ++messages_queued_;
  return Status::Ok();
}

void TcpConnection::MakeFrames() {
  const uint64_t n = static_cast<uint64_t>(nsocks_);
  while (op_framed_ < ops_.tail()) {
    Op& op = ops_.at(op_framed_);
    TxSocket& t = tx_[tx_seq_ % n];
    if (t.frames.full()) return;
    const uint64_t left = op.len - op.framed;
    const uint32_t piece = static_cast<uint32_t>(std::min<uint64_t>(left, kPieceBytes));
    const bool last = piece == left;
    FrameHeader h;
    h.type = op.type;
    h.flags = last ? kFlagLast : 0;
    h.region_id = op.region_id;
    h.region_key = op.region_key;
    h.length = piece;
    h.offset = op.type == kFrameWrite ? op.dst_offset + op.framed : 0;
    h.imm = last ? op.imm : 0;
    h.seq = static_cast<uint32_t>(tx_seq_);
    TxFrame& f = t.frames.push();
    EncodeFrameHeader(h, f.header);
    f.payload = op.src + op.framed;
    f.length = piece;
    f.sent = 0;
    f.seq = tx_seq_;
    f.op = op_framed_;
    op.framed += piece;
    ++op.frames;
    ++tx_seq_;
    if (last) ++op_framed_;
  }
}

TcpConnection::SendResult TcpConnection::SendSocket(int s, size_t* sent) {
  TxSocket& t = tx_[s];
  iovec iov[kSendIov];
  int cnt = 0;
  size_t offered = 0;
  for (uint64_t i = t.frames.head(); i < t.frames.tail() && cnt + 2 <= kSendIov; ++i) {
    TxFrame& f = t.frames.at(i);
    if (f.sent < kFrameHeaderBytes) {
      iov[cnt].iov_base = f.header + f.sent;
      iov[cnt].iov_len = kFrameHeaderBytes - f.sent;
      offered += iov[cnt].iov_len;
      ++cnt;
    }
    if (f.length > 0) {
      const uint32_t done = f.sent > kFrameHeaderBytes ? f.sent - kFrameHeaderBytes : 0;
      iov[cnt].iov_base = const_cast<uint8_t*>(f.payload + done);
      iov[cnt].iov_len = f.length - done;
      offered += iov[cnt].iov_len;
      ++cnt;
    }
  }
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<size_t>(cnt);
  ssize_t k;
  do {
    k = sendmsg(t.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (k < 0 && errno == EINTR);
  if (k < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) return SendResult::kBlocked;
    const int e = errno;
    tx_error_ = PeerGone(e) ? ClosedError(std::string(" (send: ") + std::strerror(e) + ")")
                            : UnavailableError("tcp: sending to " + Who() + " failed: " +
                                               std::strerror(e));
    return SendResult::kBlocked;
  }
  *sent += static_cast<size_t>(k);
  // Account the bytes frame by frame.
  size_t left = static_cast<size_t>(k);
  while (left > 0) {
    TxFrame& f = t.frames.front();
    const size_t total = kFrameHeaderBytes + f.length;
    const size_t take = std::min(left, total - f.sent);
    f.sent += static_cast<uint32_t>(take);
    left -= take;
    if (f.sent == total) {
      ++ops_.at(f.op).frames_sent;
      t.frames.pop();
    }
  }
  return static_cast<size_t>(k) == offered ? SendResult::kAll : SendResult::kPartial;
}

void TcpConnection::SendPass() {
  size_t sent = 0;
  for (;;) {
    MakeFrames();
    // Another round only helps while some socket took all it was offered
    // (then MakeFrames may have more for it).
    bool again = false;
    for (int s = 0; s < nsocks_ && tx_error_.ok(); ++s) {
      TxSocket& t = tx_[s];
      while (!t.frames.empty()) {
        const SendResult r = SendSocket(s, &sent);
        if (r != SendResult::kAll) break;
        again = true;
      }
    }
    if (!tx_error_.ok() || !again || sent >= kBudgetBytes || op_framed_ == ops_.tail()) break;
  }
  for (int s = 0; s < nsocks_; ++s) {
    watch_[s].want_out.store(!tx_[s].frames.empty(), std::memory_order_relaxed);
  }
}

size_t TcpConnection::Retire(Completion* out, size_t max) {
  size_t n = 0;
  while (ops_.head() < op_framed_) {
    Op& op = ops_.front();
    if (op.frames_sent != op.frames) break;
    if (op.type == kFrameWrite) {
      if (n == max) break;
      Completion& c = out[n++];
      c.kind = Completion::Kind::kWriteDone;
      c.wr_id = op.wr_id;
      c.imm = 0;
      c.len = 0;
      --writes_outstanding_;
    } else {
      --messages_queued_;
    }
    ops_.pop();
  }
  return n;
}

Status TcpConnection::ParseHeader(int s) {
  RxSocket& r = rx_[s];
  FrameHeader& h = r.frame;
  auto bad = [&](const std::string& why) {
    return DataLossError("tcp: " + Who() + " sent a malformed frame on socket " +
                         std::to_string(s) + ": " + why);
  };
  if (!DecodeFrameHeader(r.header, &h)) return bad("bad magic");
  if (std::string why = CheckFrameHeader(h, static_cast<uint32_t>(r.next_seq)); !why.empty()) {
    return bad(why);
  }
  switch (h.type) {
    case kFrameWrite: {
      std::string why;
      r.dst = backend_->ResolveRegion(h.region_id, h.region_key, h.offset, h.length, &why);
      if (r.dst == nullptr) return bad(why);
      break;
    }
    case kFrameMessage:
      r.dst = r.message;
      break;
    case kFrameGoodbye:
      r.closed = true;
      r.goodbye = true;
      r.header_got = 0;
      return Status::Ok();
    default:
      return bad("unhandled type " + std::to_string(h.type));
  }
  r.in_payload = true;
  r.done = 0;
  r.header_got = 0;
  return Status::Ok();
}

void TcpConnection::CompleteFrame(int s) {
  RxSocket& r = rx_[s];
  const FrameHeader& h = r.frame;
  // Every piece of a write gives an event (its length adds up to the
  // write's); messages always complete on their only frame.
  RxEvent& e = r.events.push();
  e.seq = r.next_seq;
  e.last = (h.flags & kFlagLast) != 0;
  Completion& c = e.completion;
  c.imm = h.imm;
  c.wr_id = 0;
  c.len = h.length;
  if (h.type == kFrameWrite) {
    c.kind = Completion::Kind::kWriteReceived;
  } else {
    c.kind = Completion::Kind::kMessage;
    std::memcpy(c.data, r.message, h.length);
  }
  r.in_payload = false;
  r.next_seq += static_cast<uint64_t>(nsocks_);
}

Status TcpConnection::ReceiveSocket(int s, size_t* budget, size_t* bytes_read) {
  RxSocket& r = rx_[s];
  // Bytes read ahead (headers and small payloads behind the frame being
  // read) are consumed first, so a stream of small frames costs one readv
  // per batch instead of a header readv and a payload readv per frame.
  auto from_ahead = [&r](uint8_t* to, size_t want) {
    const size_t take = std::min(want, r.ahead_len - r.ahead_pos);
    if (take > 0) {
      std::memcpy(to, r.ahead.get() + r.ahead_pos, take);
      r.ahead_pos += take;
    }
    return take;
  };
  Status status;
  // A read-ahead readv (no payload in flight) that returned less than it
  // asked for emptied the socket: the next one would only say EAGAIN (a
  // wasted system call per small frame, ~1 us of a small-message round trip
  // here). Bytes that arrive meanwhile wake poll() and the next pass reads
  // them. Payload reads go on until EAGAIN as before: one Progress call
  // keeps draining a large write (a peer's send may wait on it).
  bool drained = false;
  while (!r.closed) {
    if (r.proof_got < r.proof_want.size()) {
      r.proof_got += from_ahead(r.proof + r.proof_got, r.proof_want.size() - r.proof_got);
      if (r.proof_got == r.proof_want.size()) {
        status = CheckProof(s);
        if (!status.ok()) break;
        continue;
      }
    } else if (!r.in_payload) {
      r.header_got += from_ahead(r.header + r.header_got, kFrameHeaderBytes - r.header_got);
      if (r.header_got == kFrameHeaderBytes) {
        status = ParseHeader(s);
        if (!status.ok() || r.closed) break;
      }
    }
    if (r.events.full()) break;
    if (r.in_payload) {
      r.done += static_cast<uint32_t>(from_ahead(r.dst + r.done, r.frame.length - r.done));
      if (r.done == r.frame.length) {
        CompleteFrame(s);
        continue;
      }
    }
    if (*budget == 0 || drained) break;
    // The read-ahead buffer is drained here. Read the rest of the payload
    // straight into place and, in the same call, what follows it.
    r.ahead_pos = r.ahead_len = 0;
    iovec iov[2];
    int cnt = 0;
    size_t to_payload = 0;
    if (r.in_payload) {
      to_payload = r.frame.length - r.done;
      iov[cnt++] = iovec{r.dst + r.done, to_payload};
    }
    iov[cnt++] = iovec{r.ahead.get(), kReadAheadBytes};
    const ssize_t k = readv(r.fd, iov, cnt);
    if (k > 0) {
      const size_t got = static_cast<size_t>(k);
      *bytes_read += got;
      *budget -= std::min(*budget, got);
      const size_t in_place = std::min(got, to_payload);
      r.done += static_cast<uint32_t>(in_place);
      r.ahead_len = got - in_place;
      drained = to_payload == 0 && got < kReadAheadBytes;
      continue;
    }
    if (k == 0) {
      if (r.proof_got < r.proof_want.size()) {
        status = ClosedError(kBeforeProof);
        break;
      }
      if (!r.in_payload && r.header_got == 0) {
        r.closed = true;  // at a frame boundary; surfaced when the order needs this socket
        break;
      }
      status = ClosedError(" in the middle of a frame (the process exited or the link broke)");
      break;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    const int e = errno;
    if (PeerGone(e) && r.proof_got < r.proof_want.size()) {
      status = ClosedError(std::string(" (") + std::strerror(e) + ")" + kBeforeProof);
    } else if (PeerGone(e)) {
      status = ClosedError(std::string(" (") + std::strerror(e) +
                           ": the process exited or the link broke)");
    } else {
      status = UnavailableError("tcp: receiving from " + Who() + " failed: " + std::strerror(e));
    }
    break;
  }
  // Frames left in the read-ahead buffer (the event ring was full) are
  // activity the socket's poll cannot see.
  watch_[s].rx_buffered.store(r.ahead_pos < r.ahead_len, std::memory_order_relaxed);
  return status;
}

Status TcpConnection::CheckProof(int s) {
  RxSocket& r = rx_[s];
  if (!ConstantTimeEqual(r.proof, reinterpret_cast<const uint8_t*>(r.proof_want.data()),
                         r.proof_want.size())) {
    return FailedPreconditionError("tcp: " + Who() + " answered socket " + std::to_string(s) +
                                   " without a valid proof of the job secret (CIUIC_SECRET "
                                   "differs, or not the rank the store described)");
  }
  r.proof_want.clear();
  r.proof_got = 0;
  return Status::Ok();
}

Status TcpConnection::ReceivePass(size_t* bytes_read) {
  size_t budget = kBudgetBytes;
  for (int s = 0; s < nsocks_; ++s) {
    CIUIC_RETURN_IF_ERROR(ReceiveSocket(s, &budget, bytes_read));
  }
  return Status::Ok();
}

size_t TcpConnection::Deliver(Completion* out, size_t max, bool* stuck) {
  size_t n = 0;
  *stuck = false;
  const uint64_t ns = static_cast<uint64_t>(nsocks_);
  for (;;) {
    RxSocket& r = rx_[rx_next_ % ns];
    if (rx_next_ >= r.next_seq) {
      *stuck = r.closed;
      break;
    }
    // Frame rx_next_ has arrived, so it heads its socket's events.
    CIUIC_CHECK(!r.events.empty() && r.events.front().seq == rx_next_);
    RxEvent& e = r.events.front();
    if (!e.last) {
      rx_write_bytes_ += e.completion.len;
    } else {
      if (n == max) break;
      Completion& c = out[n++];
      c = e.completion;
      if (c.kind == Completion::Kind::kWriteReceived) {
        c.len = static_cast<uint32_t>(
            std::min<uint64_t>(rx_write_bytes_ + e.completion.len, UINT32_MAX));
        rx_write_bytes_ = 0;
      }
    }
    r.events.pop();
    ++rx_next_;
  }
  return n;
}

StatusOr<size_t> TcpConnection::ProgressSends(Completion* out, size_t max) {
  if (!error_.ok()) return error_;
  backend_->MaybePump();
  if (!tx_error_.ok()) return Progress(out, max);  // surfaced by the receive side
  SendPass();
  return Retire(out, max);
}

StatusOr<size_t> TcpConnection::Progress(Completion* out, size_t max) {
  if (!error_.ok()) return error_;
  backend_->MaybePump();
  if (tx_error_.ok()) SendPass();
  size_t n = Retire(out, max);
  size_t bytes_read = 0;
  Status st = ReceivePass(&bytes_read);
  if (!st.ok()) return Fail(std::move(st));
  bool stuck = false;
  n += Deliver(out + n, max - n, &stuck);
  if (n == 0) {
    if (stuck) {
      const RxSocket& r = rx_[rx_next_ % static_cast<uint64_t>(nsocks_)];
      return Fail(ClosedError(r.goodbye ? " (it destroyed the connection)"
                                           : " (the process exited or closed the socket)"));
    }
    if (!tx_error_.ok() && bytes_read == 0) return Fail(tx_error_);
  }
  return n;
}

}  // namespace ciuic::transport::tcp
