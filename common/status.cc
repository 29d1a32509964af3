#include "ciuic/status.h"

#include <cctype>
#include <cstdio>
#include <cstdlib>

namespace ciuic {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

const std::string& Status::EmptyMessage() {
  static const std::string* const kEmpty = new std::string();  // never destroyed: usable at exit
  return *kEmpty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message();
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message());
}

Status InvalidArgumentError(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status FailedPreconditionError(std::string m) { return Status(StatusCode::kFailedPrecondition, std::move(m)); }
Status ResourceExhaustedError(std::string m) { return Status(StatusCode::kResourceExhausted, std::move(m)); }
Status UnavailableError(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
Status DeadlineExceededError(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }
Status AbortedError(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
Status UnimplementedError(std::string m) { return Status(StatusCode::kUnimplemented, std::move(m)); }
Status DataLossError(std::string m) { return Status(StatusCode::kDataLoss, std::move(m)); }
Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

int RankNamedLast(const std::string& msg, int self) {
  int culprit = -1;
  for (size_t at = msg.find("rank "); at != std::string::npos; at = msg.find("rank ", at + 5)) {
    size_t i = at + 5;
    if (i >= msg.size() || msg[i] < '0' || msg[i] > '9') continue;
    if (at > 0 && std::isalpha(static_cast<unsigned char>(msg[at - 1]))) continue;  // "prank 1"
    long r = 0;
    while (i < msg.size() && msg[i] >= '0' && msg[i] <= '9' && r < (1L << 30)) r = r * 10 + (msg[i++] - '0');
    if (r != self) culprit = static_cast<int>(r);
  }
  return culprit;
}

namespace internal {
void DieOnBadStatusOrAccess(const Status& status) {
  // A caller bug (value() of an error), not bad input: CIUIC_CHECK territory.
  std::fprintf(stderr, "ciuic: StatusOr::value() on an error: %s\n", status.ToString().c_str());
  std::abort();
}
}  // namespace internal

}  // namespace ciuic
