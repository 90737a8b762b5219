// Status and Result<T>: how errors cross module boundaries in GraphPipe.
//
// Library code never throws across its API and never exits; it returns a Status (or a Result<T>
// holding a value or a non-OK Status). Only `main` and thread entry points turn them into exit
// codes or log lines. Codes are numerically identical to grpc::StatusCode so the control service
// converts with a cast. Messages name the offending field and value, e.g.
// `ops[3] 'enc.ffn1' (linear): attrs.out_features = 0, must be > 0`.
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace gp {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message", or "OK".
  std::string to_string() const;

  // Prefixes context, e.g. "loading model.json: " + message; keeps the code.
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string msg) {
  return Status(StatusCode::kInvalidArgument, std::move(msg));
}
inline Status not_found(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
inline Status failed_precondition(std::string msg) {
  return Status(StatusCode::kFailedPrecondition, std::move(msg));
}
inline Status internal_error(std::string msg) {
  return Status(StatusCode::kInternal, std::move(msg));
}
inline Status unimplemented(std::string msg) {
  return Status(StatusCode::kUnimplemented, std::move(msg));
}
inline Status resource_exhausted(std::string msg) {
  return Status(StatusCode::kResourceExhausted, std::move(msg));
}
inline Status unavailable(std::string msg) {
  return Status(StatusCode::kUnavailable, std::move(msg));
}

// Process exit code for a status reaching main: 0 success, 2 bad input, 1 anything else.
int exit_code_for(const Status& status);

// A value or the error that prevented it. Never holds an OK status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : data_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(data_).ok()) {
      data_ = Status(StatusCode::kInternal, "Result constructed from an OK status");
    }
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(data_);
  }
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace gp

#define GP_STATUS_CONCAT_INNER_(a, b) a##b
#define GP_STATUS_CONCAT_(a, b) GP_STATUS_CONCAT_INNER_(a, b)

#define GP_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::gp::Status gp_status_ = (expr);        \
    if (!gp_status_.ok()) return gp_status_; \
  } while (0)

#define GP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

// GP_ASSIGN_OR_RETURN(auto graph, Graph::build(proto));
#define GP_ASSIGN_OR_RETURN(lhs, expr) \
  GP_ASSIGN_OR_RETURN_IMPL_(GP_STATUS_CONCAT_(gp_result_, __LINE__), lhs, expr)

// Invariant check for programmer errors only (never for user input): logs and aborts.
#define GP_CHECK(cond, msg)                                                  \
  do {                                                                       \
    if (!(cond)) ::gp::detail::check_failed(#cond, msg, __FILE__, __LINE__); \
  } while (0)

namespace gp::detail {
[[noreturn]] void check_failed(const char* cond, std::string_view msg, const char* file, int line);
}  // namespace gp::detail
