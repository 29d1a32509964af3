// Private: the tcp backend's Connection — framing (tcp_wire.h) over
// nsocks non-blocking sockets, writes striped across them in kPieceBytes
// pieces, payloads received straight into the target region.
//
// Send side: PostWrite/PostMessage only queue an Op (the write keeps a
// pointer to its source, no copy). Progress cuts queued ops into frames in
// posting order, frame f going to socket f % nsocks, and hands them to the
// kernel with one sendmsg of header and payload iovecs per socket; a write
// is done (kWriteDone, in posting order) when its last frame is handed over.
// kWriteReceived carries the write's length in `len` (capped at UINT32_MAX).
// Receive side: each socket is read as header, then payload readv'd into
// the region together with the next header; every header is validated
// before its payload is read. Completions are merged back into frame order.
//
// Thread contract: one thread at a time (the Connection contract); the
// backend outlives it.
#ifndef CIUIC_TRANSPORT_TCP_TCP_CONNECTION_H_
#define CIUIC_TRANSPORT_TCP_TCP_CONNECTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "transport/tcp/tcp_backend.h"
#include "transport/tcp/tcp_wire.h"

namespace ciuic::transport::tcp {

// How many writes may be posted and not yet done.
inline constexpr size_t kMaxOutstanding = 128;
// How many messages may be queued and not yet handed to the kernel.
inline constexpr size_t kMaxQueuedMessages = 256;

// A fixed-capacity FIFO with absolute (ever-growing) indices.
template <typename T>
class Ring {
 public:
  // `capacity` is rounded up to a power of two.
  void Init(size_t capacity) {
    size_t c = 1;
    while (c < capacity) c <<= 1;
    buf_.assign(c, T());
    mask_ = c - 1;
  }
  size_t size() const { return static_cast<size_t>(tail_ - head_); }
  bool empty() const { return head_ == tail_; }
  bool full() const { return size() == buf_.size(); }
  T& front() { return buf_[head_ & mask_]; }
  T& at(uint64_t index) { return buf_[index & mask_]; }
  // The new last element; the caller checked !full().
  T& push() { return buf_[tail_++ & mask_]; }
  void pop() { ++head_; }
  uint64_t head() const { return head_; }
  uint64_t tail() const { return tail_; }

 private:
  std::vector<T> buf_;
  uint64_t mask_ = 0;
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
};

class TcpConnection final : public Connection {
 public:
  // Takes ownership of the sockets: tx_fds[i] sends what rx_fds[i] of the
  // peer receives (the same fd except in a connection to oneself).
  // accept_proofs[i] (the connecting side's; else empty) must be the first
  // bytes read from rx_fds[i]: no frame is parsed before it matched.
  TcpConnection(TcpBackend* backend, int peer, std::string peer_address, uint64_t peer_instance,
                const std::vector<int>& tx_fds, const std::vector<int>& rx_fds,
                const std::vector<std::string>& accept_proofs);
  // Tells the peer with a goodbye frame (best effort) and closes the sockets.
  ~TcpConnection() override;

  StatusOr<RemoteRegion> ImportRegion(const std::string& blob) override;
  Status PostWrite(const MemoryRegion& src, size_t src_offset, RemoteRegion dst,
                   size_t dst_offset, size_t len, uint32_t imm, uint64_t wr_id) override;
  Status PostMessage(const void* data, size_t len) override;
  StatusOr<size_t> Progress(Completion* out, size_t max) override;
  StatusOr<size_t> ProgressSends(Completion* out, size_t max) override;
  size_t max_outstanding() const override { return kMaxOutstanding; }
  // A message queued behind a write goes out in the same sendmsg.
  bool MessagesRideWithWrites() const override { return true; }
  // Ops stay queued until every frame is handed to the kernel and retired.
  bool HasQueuedSends() const override { return !ops_.empty(); }

 private:
  struct Op {
    uint8_t type = 0;  // kFrameWrite or kFrameMessage
    const uint8_t* src = nullptr;
    uint64_t len = 0;
    uint32_t region_id = 0;
    uint32_t region_key = 0;
    uint64_t dst_offset = 0;
    uint32_t imm = 0;
    uint64_t wr_id = 0;
    uint64_t framed = 0;       // bytes cut into frames so far
    uint32_t frames = 0;       // frames made
    uint32_t frames_sent = 0;  // frames completely handed to the kernel
    uint8_t data[kMaxMessageBytes] = {};
  };
  struct TxFrame {
    uint8_t header[kFrameHeaderBytes] = {};
    const uint8_t* payload = nullptr;
    uint32_t length = 0;
    uint32_t sent = 0;  // of kFrameHeaderBytes + length
    uint64_t seq = 0;
    uint64_t op = 0;    // absolute index in ops_
  };
  struct TxSocket {
    int fd = -1;
    Ring<TxFrame> frames;
  };
  struct RxEvent {
    uint64_t seq = 0;
    bool last = false;  // completes its write or message
    Completion completion;  // len: of this frame
  };
  struct RxSocket {
    int fd = -1;
    std::string proof_want;   // the acceptor's proof still to check (tcp_wire.h)
    size_t proof_got = 0;
    uint8_t proof[kAcceptProofBytes] = {};
    uint8_t header[kFrameHeaderBytes] = {};
    size_t header_got = 0;
    bool in_payload = false;  // `frame` parsed, payload being read
    FrameHeader frame;
    uint8_t* dst = nullptr;
    uint32_t done = 0;        // payload bytes read
    uint64_t next_seq = 0;    // sequence of the frame being read
    Ring<RxEvent> events;     // completions of frames received, not delivered
    bool closed = false;      // the peer ended this stream
    bool goodbye = false;     // ... cleanly, with a goodbye frame
    uint8_t message[kMaxMessageBytes] = {};
    std::unique_ptr<uint8_t[]> ahead;  // kReadAheadBytes read past the current frame
    size_t ahead_pos = 0;              // consumed
    size_t ahead_len = 0;              // valid
  };
  struct Import {
    uint32_t id = 0;
    uint32_t key = 0;
    uint64_t size = 0;
  };

  // Cuts queued ops into frames while the target sockets have room.
  void MakeFrames();
  // Hands queued frames to the kernel until every socket would block.
  void SendPass();
  // Destruction, after the goodbye: see tcp_connection.cc.
  void LingerBeforeClose();
  enum class SendResult { kAll, kPartial, kBlocked };
  // One sendmsg of socket s's queued frames (adding the bytes to *sent):
  // kAll = the kernel took everything offered, kPartial = less, kBlocked =
  // nothing (would block, or failed with tx_error_ set).
  SendResult SendSocket(int s, size_t* sent);
  // Retires done ops from the head; writes give kWriteDone.
  size_t Retire(Completion* out, size_t max);
  // Reads every socket without blocking. Errors: kDataLoss, kUnavailable.
  Status ReceivePass(size_t* bytes_read);
  Status ReceiveSocket(int s, size_t* budget, size_t* bytes_read);
  Status ParseHeader(int s);
  // The proof of socket s is complete: kFailedPrecondition unless it matches.
  Status CheckProof(int s);
  void CompleteFrame(int s);
  // Moves received completions to `out` in frame order (adding up the
  // pieces of each write); *stuck = the next frame can never arrive (its
  // socket was closed by the peer).
  size_t Deliver(Completion* out, size_t max, bool* stuck);
  Status Fail(Status status);
  // kUnavailable "tcp: peer rank N (ip:port) closed the connection<how>".
  Status ClosedError(const std::string& how) const;
  std::string Who() const;

  TcpBackend* backend_;
  std::string peer_address_;
  uint64_t peer_instance_;
  int nsocks_;
  std::vector<TxSocket> tx_;
  std::vector<RxSocket> rx_;
  std::unique_ptr<SocketWatch[]> watch_;

  Ring<Op> ops_;
  uint64_t op_framed_ = 0;  // first op not yet completely framed
  uint64_t tx_seq_ = 0;     // sequence of the next frame made
  size_t writes_outstanding_ = 0;
  size_t messages_queued_ = 0;
  uint64_t rx_next_ = 0;    // sequence of the next frame to deliver
  uint64_t rx_write_bytes_ = 0;  // earlier pieces of the write being delivered

  std::vector<Import> imports_;
  Status error_;            // first failure; sticky
  Status tx_error_;         // a send failure, surfaced once reading stalls
};

}  // namespace ciuic::transport::tcp

#endif  // CIUIC_TRANSPORT_TCP_TCP_CONNECTION_H_
