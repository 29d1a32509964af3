#include "transport/store_wire.h"

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ciuic/store.h"
#include "common/log.h"
#include "transport/net.h"

namespace ciuic::transport::store_wire {

namespace {
std::string Bytes(const void* p, size_t n) { return std::string(static_cast<const char*>(p), n); }
}  // namespace

Digest ClientProof(const std::string& secret, const std::string& server_nonce, const std::string& client_nonce) {
  return HmacSha256(secret, server_nonce + client_nonce);
}

Digest ServerProof(const std::string& secret, const std::string& server_nonce, const std::string& client_nonce) {
  return HmacSha256(secret, client_nonce + server_nonce);
}

bool ParseCounter(const std::string& text, int64_t* out) {
  if (text.empty() || text.size() > 20) return false;
  const size_t first = text[0] == '-' ? 1 : 0;
  if (first == text.size()) return false;
  for (size_t j = first; j < text.size(); ++j) {
    if (text[j] < '0' || text[j] > '9') return false;
  }
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (errno != 0) return false;
  *out = v;
  return true;
}

std::string EncodeGreeting(const std::string& server_nonce) {
  std::string s(kMagic, 4);
  net::PutU32(&s, kVersion);
  s += server_nonce;
  return s;
}

StatusOr<std::string> DecodeGreeting(const char* p) {
  if (std::memcmp(p, kMagic, 4) != 0 || net::GetU32(p + 4) != kVersion) {
    return FailedPreconditionError("not a ciuic store of protocol version " + std::to_string(kVersion) +
                                   " (bad greeting)");
  }
  return std::string(p + 8, kNonce);
}

std::string EncodeProof(const std::string& secret, const std::string& server_nonce, const std::string& client_nonce) {
  const Digest mac = ClientProof(secret, server_nonce, client_nonce);
  return client_nonce + Bytes(mac.data(), mac.size());
}

Status CheckVerdict(const uint8_t* p, const std::string& secret, const std::string& server_nonce,
                    const std::string& client_nonce) {
  if (p[0] != 0) {
    return FailedPreconditionError(
        "rejected this client: the job secret (CIUIC_SECRET / CIUIC_SECRET_FILE) differs from the server's");
  }
  const Digest want = ServerProof(secret, server_nonce, client_nonce);
  if (!ConstantTimeEqual(want.data(), p + 1, 32)) {
    return FailedPreconditionError("could not prove it knows the job secret; refusing to use it");
  }
  return Status::Ok();
}

std::string EncodeRequest(uint8_t op, const std::string& key, const std::string& value) {
  std::string frame;
  frame.reserve(kRequestHeader + key.size() + value.size());
  frame.push_back(static_cast<char>(op));
  net::PutU32(&frame, static_cast<uint32_t>(key.size()));
  net::PutU32(&frame, static_cast<uint32_t>(value.size()));
  frame += key;
  frame += value;
  return frame;
}

StatusOr<ReplyHeader> DecodeReplyHeader(const char* p) {
  ReplyHeader h;
  h.status = static_cast<uint8_t>(p[0]);
  h.len = net::GetU32(p + 1);
  if (h.status > kReplyError) return DataLossError("malformed reply (status " + std::to_string(h.status) + ")");
  if (h.len > kMaxValueBytes) {
    return DataLossError("malformed reply (" + std::to_string(h.len) + " bytes, limit " +
                         std::to_string(kMaxValueBytes) + ")");
  }
  return h;
}

ServerSession::ServerSession(std::string secret, const std::string& server_nonce,
                             std::map<std::string, std::string>* data)
    : secret_(std::move(secret)), server_nonce_(server_nonce), data_(data), out_(EncodeGreeting(server_nonce)) {}

ServerSession::State ServerSession::Feed(const char* p, size_t n) {
  if (state_ != State::kOpen) return state_;
  in_.append(p, n);
  if (!authenticated_) {
    if (in_.size() < kProof) return state_;
    const std::string cn = in_.substr(0, kNonce);
    const Digest want = ClientProof(secret_, server_nonce_, cn);
    if (!ConstantTimeEqual(want.data(), reinterpret_cast<const uint8_t*>(in_.data()) + kNonce, 32)) {
      out_.push_back(1);
      out_.append(32, '\0');
      in_.clear();
      why_ = "it does not know the job secret (CIUIC_SECRET)";
      return state_ = State::kRejected;
    }
    const Digest proof = ServerProof(secret_, server_nonce_, cn);
    out_.push_back(0);
    out_.append(reinterpret_cast<const char*>(proof.data()), proof.size());
    authenticated_ = true;
    in_.erase(0, kProof);
  }
  size_t pos = 0;
  while (in_.size() - pos >= kRequestHeader) {
    const uint8_t op = static_cast<uint8_t>(in_[pos]);
    const uint32_t klen = net::GetU32(in_.data() + pos + 1);
    const uint32_t vlen = net::GetU32(in_.data() + pos + 5);
    // Every bound is checked on the header, before a byte of key or value
    // is waited for: a length never sizes a buffer.
    if (op < kOpSet || op > kOpCheck) {
      why_ = "malformed frame (unknown op " + std::to_string(op) + ")";
    } else if (klen == 0 || klen > kMaxKeyBytes || vlen > kMaxValueBytes) {
      why_ = "malformed frame (key " + std::to_string(klen) + " bytes, value " + std::to_string(vlen) +
             " bytes; limits 1.." + std::to_string(kMaxKeyBytes) + " and " + std::to_string(kMaxValueBytes) + ")";
    } else if ((op == kOpAdd && vlen != 8) || ((op == kOpGet || op == kOpCheck) && vlen != 0)) {
      why_ = "malformed frame (op " + std::to_string(op) + " with a value of " + std::to_string(vlen) + " bytes)";
    }
    if (!why_.empty()) {
      in_.clear();
      return state_ = State::kDropped;
    }
    const size_t total = kRequestHeader + klen + vlen;
    if (in_.size() - pos < total) break;
    const std::string key = in_.substr(pos + kRequestHeader, klen);
    Handle(op, key, in_.data() + pos + kRequestHeader + klen, vlen);
    pos += total;
  }
  in_.erase(0, pos);
  return state_;
}

void ServerSession::Reply(uint8_t status, const std::string& payload) {
  out_.push_back(static_cast<char>(status));
  net::PutU32(&out_, static_cast<uint32_t>(payload.size()));
  out_ += payload;
}

void ServerSession::Handle(uint8_t op, const std::string& key, const char* value, uint32_t vlen) {
  switch (op) {
    case kOpSet:
      (*data_)[key].assign(value, vlen);
      Reply(kReplyOk, "");
      return;
    case kOpGet: {
      auto it = data_->find(key);
      if (it == data_->end()) {
        Reply(kReplyNotFound, "");
      } else {
        Reply(kReplyOk, it->second);
      }
      return;
    }
    case kOpCheck:
      Reply(data_->count(key) ? kReplyOk : kReplyNotFound, "");
      return;
    case kOpAdd: {
      const int64_t delta = static_cast<int64_t>(net::GetU64(value));
      int64_t cur = 0;
      auto it = data_->find(key);
      if (it != data_->end() && !ParseCounter(it->second, &cur)) {
        // The key is bounded by kMaxKeyBytes: the message stays a valid reply.
        Reply(kReplyError, "key '" + key + "' holds a value that is not a counter");
        return;
      }
      // Wraps like the int64 it is (two's complement), never undefined.
      const int64_t next = static_cast<int64_t>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(delta));
      (*data_)[key] = std::to_string(next);
      std::string p;
      net::PutU64(&p, static_cast<uint64_t>(next));
      Reply(kReplyOk, p);
      return;
    }
    default:
      return;  // unreachable: Feed checked the op
  }
}

namespace {
bool HostByte(unsigned char c) {
  // Host names, IPv4 and IPv6 (with a zone) addresses.
  return std::isalnum(c) != 0 || c == '.' || c == '-' || c == ':' || c == '_' || c == '%';
}
// Zeros the id and writes its header (magic, version, kind); the offset
// after it.
size_t StartId(char* out, char kind) {
  std::memset(out, 0, kIdBytes);
  std::memcpy(out, kIdMagic, sizeof(kIdMagic));
  size_t at = sizeof(kIdMagic);
  out[at++] = static_cast<char>(kIdVersion);
  out[at++] = kind;
  return at;
}
bool HostOk(const std::string& host) {
  if (host.empty()) return false;
  for (unsigned char c : host) {
    if (!HostByte(c)) return false;
  }
  return true;
}
}  // namespace

Status EncodeStoreId(const StoreId& id, char* out) {
  if (!HostOk(id.host)) return InvalidArgumentError("store host '" + LogSafe(id.host) + "' is not an address");
  if (id.port == 0) return InvalidArgumentError("store port 0 cannot be reached");
  if (id.host.size() + id.secret.size() > kIdRoom) {
    return InvalidArgumentError("a unique id holds " + std::to_string(kIdRoom) +
                                " bytes of store host and secret: the host has " + std::to_string(id.host.size()) +
                                " and the secret (CIUIC_SECRET) " + std::to_string(id.secret.size()));
  }
  size_t at = StartId(out, 'A');
  out[at++] = static_cast<char>(id.host.size());
  // Length-prefixed fields, not C strings: copied without a terminator.
  std::copy(id.host.begin(), id.host.end(), out + at);
  at += id.host.size();
  out[at++] = static_cast<char>(id.port >> 8);
  out[at++] = static_cast<char>(id.port & 0xff);
  out[at++] = static_cast<char>(id.secret.size());
  std::copy(id.secret.begin(), id.secret.end(), out + at);
  return Status::Ok();
}

void EncodeStoreIdError(const std::string& why, char* out) {
  size_t at = StartId(out, 'E');
  const size_t n = std::min(why.size(), kIdBytes - at - 1);
  out[at++] = static_cast<char>(n);
  std::copy(why.begin(), why.begin() + static_cast<std::ptrdiff_t>(n), out + at);
}

StatusOr<StoreId> DecodeStoreId(const char* in) {
  const auto* u = reinterpret_cast<const unsigned char*>(in);
  if (std::memcmp(in, kIdMagic, sizeof(kIdMagic)) != 0) {
    return DataLossError("not a ciuic unique id (its first bytes are '" +
                         LogSafe(std::string(in, sizeof(kIdMagic))) + "')");
  }
  size_t at = sizeof(kIdMagic);
  if (u[at] != kIdVersion) {
    return DataLossError("unique id version " + std::to_string(u[at]) + ", expected " + std::to_string(kIdVersion));
  }
  ++at;
  const unsigned char kind = u[at++];
  // Every length is checked against what is left before it is used.
  auto take = [&](size_t n, std::string* field) {
    if (n > kIdBytes - at) return false;
    field->assign(in + at, n);
    at += n;
    return true;
  };
  StoreId id;
  if (kind == 'E') {
    std::string why;
    if (!take(u[at++], &why)) return DataLossError("a unique id's error text runs past its end");
    for (size_t i = at; i < kIdBytes; ++i) {
      if (in[i] != 0) return DataLossError("a unique id has bytes after its end");
    }
    // Quoted whole: LogSafe cuts at 64 characters, which 16 input bytes
    // never exceed (4 per escaped byte).
    std::string quoted;
    for (size_t i = 0; i < why.size(); i += 16) quoted += LogSafe(why.substr(i, 16));
    return UnavailableError("the unique id says it could not be made: " + quoted);
  }
  if (kind != 'A') return DataLossError("unique id of unknown kind " + std::to_string(kind));
  if (!take(u[at++], &id.host) || !HostOk(id.host)) return DataLossError("a unique id's store host is malformed");
  if (kIdBytes - at < 3) return DataLossError("a unique id's store port runs past its end");
  id.port = static_cast<uint16_t>((u[at] << 8) | u[at + 1]);
  at += 2;
  if (id.port == 0) return DataLossError("a unique id names store port 0");
  if (!take(u[at++], &id.secret)) return DataLossError("a unique id's secret runs past its end");
  for (size_t i = at; i < kIdBytes; ++i) {
    if (in[i] != 0) return DataLossError("a unique id has bytes after its end");
  }
  return id;
}

}  // namespace ciuic::transport::store_wire
