#include "transport/store_wire.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "ciuic/store.h"
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

}  // namespace ciuic::transport::store_wire
