// Internal logging: CIUIC_LOG(kInfo, "fmt", ...). Lines are prefixed
// "host:pid:rank LEVEL " and go to stderr or CIUIC_DEBUG_FILE.
// The process-wide sink is configured from the environment on first use,
// then by the process's first communicator (AdoptLogging: its rank and
// Config), or by ConfigureLogging(), which wins over both. Thread contract:
// all functions are thread-safe; lines from different threads are never
// interleaved.
#ifndef CIUIC_COMMON_LOG_H_
#define CIUIC_COMMON_LOG_H_

#include <string>

#include "ciuic/config.h"

namespace ciuic {

// Applies config.debug / config.debug_file; `rank` < 0 prints "-".
// Errors: kInvalidArgument when the log file cannot be opened (named).
Status ConfigureLogging(const Config& config, int rank);

// Called for every communicator made; only the process's first one counts,
// and none after a ConfigureLogging(). It puts its rank in the prefix, opens
// config.debug_file with %r as that rank (a file per rank), and raises the
// level to config.debug (never below what CIUIC_DEBUG set: the operator's
// knob). Errors: kInvalidArgument when the log file cannot be opened (named).
Status AdoptLogging(const Config& config, int rank);

// True when a message at `level` would be written.
bool LogEnabled(LogLevel level);

// Writes one line (printf format) when `level` is enabled.
void LogLine(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

// The "host:pid:rank" prefix for the current configuration.
std::string LogPrefix();

// A stranger's bytes in a log line or error: printable ASCII kept, the rest
// as \xNN, cut at `max` characters (no forged lines, no megabyte warnings).
std::string LogSafe(const std::string& in, size_t max = 64);

}  // namespace ciuic

#define CIUIC_LOG(level, ...)                                              \
  do {                                                                     \
    if (::ciuic::LogEnabled(::ciuic::LogLevel::level))                     \
      ::ciuic::LogLine(::ciuic::LogLevel::level, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

// For bugs only (never for bad input): prints and aborts.
#define CIUIC_CHECK(cond)                                                        \
  do {                                                                           \
    if (!(cond)) ::ciuic::internal::CheckFailed(#cond, __FILE__, __LINE__);      \
  } while (0)

namespace ciuic::internal {
[[noreturn]] void CheckFailed(const char* cond, const char* file, int line);
// Tests only: back to "not configured" (the next line reads the environment).
void ResetLoggingForTest();
}  // namespace ciuic::internal

#endif  // CIUIC_COMMON_LOG_H_
