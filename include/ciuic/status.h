// ciuic::Status and ciuic::StatusOr<T>: the error model of the C++ API.
//
// Library code never throws and never aborts on bad input: every fallible call
// returns a Status (or StatusOr<T>) that must be looked at ([[nodiscard]]).
// Codes follow absl's set; their retry meaning:
//   kInvalidArgument    the caller passed something wrong; do not retry as is.
//   kNotFound           a named thing (device, file, key) does not exist.
//   kFailedPrecondition the object is not in a state that allows the call.
//   kResourceExhausted  memory, registrations, slots ran out; retry later/smaller.
//   kUnavailable        a peer or device cannot be reached now; may retry.
//   kDeadlineExceeded   a timeout expired (a silent peer).
//   kAborted            the operation was aborted (a peer failed, comm aborted).
//   kUnimplemented      not supported by this build or backend.
//   kDataLoss           data arrived corrupted or truncated.
//   kInternal           a bug in ciuic; please report it.
// Thread contract: Status/StatusOr are values; distinct objects may be used
// from different threads freely.
#ifndef CIUIC_STATUS_H_
#define CIUIC_STATUS_H_

#include <memory>
#include <string>
#include <utility>
#include <optional>

namespace ciuic {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,
  kNotFound = 2,
  kFailedPrecondition = 3,
  kResourceExhausted = 4,
  kUnavailable = 5,
  kDeadlineExceeded = 6,
  kAborted = 7,
  kUnimplemented = 8,
  kDataLoss = 9,
  kInternal = 10,
};

// Returns a stable name such as "INVALID_ARGUMENT".
const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message)
      : code_(code),
        message_(message.empty() ? nullptr : std::make_unique<std::string>(std::move(message))) {}
  // OK carries no message (a null pointer): making, moving and testing an
  // OK status costs a few instructions on the small-message path.
  Status(const Status& other)
      : code_(other.code_),
        message_(other.message_ == nullptr ? nullptr : std::make_unique<std::string>(*other.message_)) {}
  Status& operator=(const Status& other) {
    if (this != &other) {
      code_ = other.code_;
      message_ = other.message_ == nullptr ? nullptr : std::make_unique<std::string>(*other.message_);
    }
    return *this;
  }
  Status(Status&& other) noexcept = default;
  Status& operator=(Status&& other) noexcept = default;
  ~Status() = default;

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_ != nullptr ? *message_ : EmptyMessage(); }
  // "OK" or "CODE_NAME: message".
  std::string ToString() const;
  // Returns a copy whose message is "context: message" (no-op when ok).
  Status WithContext(const std::string& context) const;
  // Makes "this status was looked at" explicit where ignoring is intended.
  void IgnoreError() const {}

 private:
  static const std::string& EmptyMessage();
  StatusCode code_ = StatusCode::kOk;
  std::unique_ptr<std::string> message_;
};

inline bool operator==(const Status& a, const Status& b) {
  return a.code() == b.code() && a.message() == b.message();
}

Status InvalidArgumentError(std::string message);
Status NotFoundError(std::string message);
Status FailedPreconditionError(std::string message);
Status ResourceExhaustedError(std::string message);
Status UnavailableError(std::string message);
Status DeadlineExceededError(std::string message);
Status AbortedError(std::string message);
Status UnimplementedError(std::string message);
Status DataLossError(std::string message);
Status InternalError(std::string message);

// The rank an error message names as its cause: the last "rank N" in it
// other than `self` (messages nest the cause last: "... failed: peer rank 1
// (pid 7) died"), or -1 when it names none.
int RankNamedLast(const std::string& message, int self);

// A value or the Status explaining why there is none. Accessing value() of a
// non-ok StatusOr is a bug (checked: it terminates with the status printed).
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit
    if (status_.ok()) {
      Status bug(StatusCode::kInternal, "StatusOr built from OK without a value");
      std::swap(status_, bug);
    }
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { CheckOk(); return *value_; }
  const T& value() const& { CheckOk(); return *value_; }
  T&& value() && { CheckOk(); return std::move(*value_); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void CheckOk() const;
  Status status_;
  std::optional<T> value_;
};

namespace internal {
[[noreturn]] void DieOnBadStatusOrAccess(const Status& status);
}  // namespace internal

template <typename T>
void StatusOr<T>::CheckOk() const {
  if (!status_.ok()) internal::DieOnBadStatusOrAccess(status_);
}

}  // namespace ciuic

#define CIUIC_STATUS_CONCAT_INNER_(a, b) a##b
#define CIUIC_STATUS_CONCAT_(a, b) CIUIC_STATUS_CONCAT_INNER_(a, b)

// Returns from the enclosing function when `expr` (a Status) is not ok.
// (A copy, not a reference: `expr` may be a temporary's member, such as
// `F().status()`, which a reference would outlive.)
#define CIUIC_RETURN_IF_ERROR(expr)                        \
  do {                                                     \
    ::ciuic::Status ciuic_status_tmp_ = (expr);            \
    if (!ciuic_status_tmp_.ok()) return ciuic_status_tmp_; \
  } while (0)

// `lhs = value of expr` (a StatusOr), or returns its error. `lhs` may be a
// declaration and `tmp` is a name: neither can take parentheses.
// NOLINTBEGIN(bugprone-macro-parentheses)
#define CIUIC_ASSIGN_OR_RETURN(lhs, expr) \
  CIUIC_ASSIGN_OR_RETURN_IMPL_(CIUIC_STATUS_CONCAT_(ciuic_statusor_, __LINE__), lhs, expr)
#define CIUIC_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
// NOLINTEND(bugprone-macro-parentheses)

#endif  // CIUIC_STATUS_H_
