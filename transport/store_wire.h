// Private: the tcp store's wire protocol (format in transport/bootstrap.h)
// as pure functions and a socket-free server session. The server and the
// client run exactly these, and so do the fuzz target and the unit tests.
#ifndef CIUIC_TRANSPORT_STORE_WIRE_H_
#define CIUIC_TRANSPORT_STORE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "ciuic/status.h"
#include "transport/crypto.h"

namespace ciuic::transport::store_wire {

inline constexpr char kMagic[4] = {'C', 'I', 'U', 'S'};
inline constexpr uint32_t kVersion = 1;
inline constexpr size_t kNonce = 32;
inline constexpr size_t kGreeting = 4 + 4 + kNonce;
inline constexpr size_t kProof = 2 * kNonce;  // client nonce + MAC
inline constexpr size_t kVerdict = 1 + 32;    // verdict + server MAC
inline constexpr size_t kRequestHeader = 1 + 4 + 4;
inline constexpr size_t kReplyHeader = 1 + 4;

enum Op : uint8_t { kOpSet = 1, kOpGet = 2, kOpAdd = 3, kOpCheck = 4 };
enum ReplyStatus : uint8_t { kReplyOk = 0, kReplyNotFound = 1, kReplyError = 2 };

// Client proof: HMAC(secret, server_nonce || client_nonce); server proof:
// the nonces in the other order, so neither can be replayed as the other.
Digest ClientProof(const std::string& secret, const std::string& server_nonce, const std::string& client_nonce);
Digest ServerProof(const std::string& secret, const std::string& server_nonce, const std::string& client_nonce);

// A counter stored as decimal text ("-12"); false for anything else,
// including values outside int64 (shared by every Store's Add).
bool ParseCounter(const std::string& text, int64_t* out);

std::string EncodeGreeting(const std::string& server_nonce);
// The server nonce from kGreeting bytes. Errors: kFailedPrecondition (not a
// ciuic store of this protocol version).
StatusOr<std::string> DecodeGreeting(const char* p);
// The client's kProof bytes: its nonce and its MAC.
std::string EncodeProof(const std::string& secret, const std::string& server_nonce, const std::string& client_nonce);
// Checks the server's kVerdict bytes. Errors: kFailedPrecondition (the
// server rejected the secret, or could not prove it knows it).
Status CheckVerdict(const uint8_t* p, const std::string& secret, const std::string& server_nonce,
                    const std::string& client_nonce);
std::string EncodeRequest(uint8_t op, const std::string& key, const std::string& value);
struct ReplyHeader {
  uint8_t status = 0;
  uint32_t len = 0;
};
// Errors: kDataLoss (unknown status, or a payload above kMaxValueBytes).
StatusOr<ReplyHeader> DecodeReplyHeader(const char* p);

// The server side of one connection, without its socket: bytes in through
// Feed, bytes out in out() (the greeting first). Not thread-safe; `data` is
// the server's table, shared by its sessions on the server's one thread.
class ServerSession {
 public:
  enum class State {
    kOpen,      // waiting for more bytes
    kRejected,  // wrong secret: the verdict is in out(); close once it is sent
    kDropped,   // malformed frame: close now; why() says what was wrong
  };
  ServerSession(std::string secret, const std::string& server_nonce, std::map<std::string, std::string>* data);
  // Consumes complete messages; a partial one waits for the rest. After
  // kRejected or kDropped further bytes are ignored.
  State Feed(const char* p, size_t n);
  std::string& out() { return out_; }
  State state() const { return state_; }
  bool authenticated() const { return authenticated_; }
  const std::string& why() const { return why_; }

 private:
  void Handle(uint8_t op, const std::string& key, const char* value, uint32_t vlen);
  void Reply(uint8_t status, const std::string& payload);

  std::string secret_;
  std::string server_nonce_;
  std::map<std::string, std::string>* data_;
  bool authenticated_ = false;
  State state_ = State::kOpen;
  std::string in_;
  std::string out_;
  std::string why_;
};

// A rendezvous id (Communicator::MakeUniqueId): how to reach the store and
// prove the job's secret, in kIdBytes bytes, or why no id could be made.
//   "CIUICID" version(1) kind(1): 'A' an address, 'E' an error
//   'A': host length (1), host, port (2, big-endian), secret length (1), secret
//   'E': text length (1), text
//   then zeros to kIdBytes (checked: garbage is not an id).
inline constexpr size_t kIdBytes = 256;
inline constexpr char kIdMagic[7] = {'C', 'I', 'U', 'I', 'C', 'I', 'D'};
inline constexpr uint8_t kIdVersion = 1;
// Host and secret share what the header, lengths and port leave.
inline constexpr size_t kIdRoom = kIdBytes - sizeof(kIdMagic) - 2 - 1 - 2 - 1;
struct StoreId {
  std::string host;
  uint16_t port = 0;
  std::string secret;
};
// Errors: kInvalidArgument naming what does not fit (an empty host or one
// with characters no address has, port 0, host and secret above kIdRoom).
Status EncodeStoreId(const StoreId& id, char* out /* kIdBytes */);
// An id that carries `why` (cut to fit) instead of an address.
void EncodeStoreIdError(const std::string& why, char* out /* kIdBytes */);
// Errors: kDataLoss (not an id of this version: magic, version, kind,
// lengths, host characters, port 0, padding not zero), kUnavailable (an
// error id: its text, quoted through LogSafe).
StatusOr<StoreId> DecodeStoreId(const char* in /* kIdBytes */);

}  // namespace ciuic::transport::store_wire

#endif  // CIUIC_TRANSPORT_STORE_WIRE_H_
