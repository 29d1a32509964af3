#include "common/log.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ciuic {
namespace {

struct Sink {
  std::mutex mu;
  std::atomic<int> level{-1};  // -1: not configured yet
  FILE* file = nullptr;        // nullptr: stderr
  int rank = -1;
  char host[64] = "?";
  bool settled = false;  // a communicator adopted it, or ConfigureLogging ran
};

Sink& GetSink() {
  // Never destroyed: usable during exit. Fork waits for the mutex, so a
  // child never inherits it held by a thread that is not there.
  static Sink* sink = [] {
    Sink* s = new Sink();
    pthread_atfork([] { GetSink().mu.lock(); }, [] { GetSink().mu.unlock(); }, [] { GetSink().mu.unlock(); });
    return s;
  }();
  return *sink;
}

std::string ExpandPath(const std::string& pattern, const char* host, int rank) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      const char c = pattern[++i];
      if (c == 'h') out += host;
      else if (c == 'p') out += std::to_string(getpid());
      else if (c == 'r') out += rank < 0 ? std::string("-") : std::to_string(rank);
      else out += c;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

Status ApplyLocked(Sink& s, const Config& config, int rank) {
  gethostname(s.host, sizeof(s.host) - 1);
  s.rank = rank;
  FILE* f = nullptr;
  if (!config.debug_file.empty()) {
    const std::string path = ExpandPath(config.debug_file, s.host, rank);
    f = std::fopen(path.c_str(), "a");
    if (f == nullptr) {
      return InvalidArgumentError("CIUIC_DEBUG_FILE='" + config.debug_file + "': cannot open " +
                                  path + ": " + std::strerror(errno));
    }
  }
  if (s.file != nullptr) std::fclose(s.file);
  s.file = f;
  s.level.store(static_cast<int>(config.debug), std::memory_order_release);
  return Status::Ok();
}

void EnsureConfigured() {
  Sink& s = GetSink();
  if (s.level.load(std::memory_order_acquire) >= 0) return;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.level.load(std::memory_order_relaxed) >= 0) return;
  StatusOr<Config> config = Config::FromEnv();
  if (!config.ok()) {
    // A bad CIUIC_* value: log at WARN to stderr so the reason is visible;
    // the call that reads the config reports the error itself.
    s.level.store(static_cast<int>(LogLevel::kWarn), std::memory_order_release);
    return;
  }
  // A per-rank file (%r) waits for the rank: stderr until a communicator
  // adopts the sink, not a stray file named "-".
  Config c = *config;
  if (c.debug_file.find("%r") != std::string::npos) c.debug_file.clear();
  if (!ApplyLocked(s, c, -1).ok()) {
    s.level.store(static_cast<int>(config->debug), std::memory_order_release);
  }
}

}  // namespace

Status ConfigureLogging(const Config& config, int rank) {
  Sink& s = GetSink();
  std::lock_guard<std::mutex> lock(s.mu);
  s.settled = true;
  return ApplyLocked(s, config, rank);
}

Status AdoptLogging(const Config& config, int rank) {
  EnsureConfigured();
  Config c = config;
  if (c.debug_file.empty()) {
    // A Config made in code has no file: the environment's, if any (read
    // before the lock: nothing under it may log).
    StatusOr<Config> env = Config::FromEnv();
    if (env.ok()) c.debug_file = env->debug_file;
  }
  Sink& s = GetSink();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.settled) return Status::Ok();
  c.debug = std::max(c.debug, static_cast<LogLevel>(s.level.load(std::memory_order_relaxed)));
  CIUIC_RETURN_IF_ERROR(ApplyLocked(s, c, rank));
  s.settled = true;
  return Status::Ok();
}

bool LogEnabled(LogLevel level) {
  // Asked on every cached small all-reduce: one load once configured.
  const Sink& s = GetSink();
  int current = s.level.load(std::memory_order_acquire);
  if (current < 0) {
    EnsureConfigured();
    current = s.level.load(std::memory_order_acquire);
  }
  return static_cast<int>(level) <= current;
}

std::string LogSafe(const std::string& in, size_t max) {
  std::string out;
  size_t i = 0;
  for (; i < in.size() && out.size() < max; ++i) {
    const auto c = static_cast<unsigned char>(in[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (i < in.size()) out += "...";
  return out;
}

std::string LogPrefix() {
  EnsureConfigured();
  Sink& s = GetSink();
  std::lock_guard<std::mutex> lock(s.mu);
  return std::string(s.host) + ":" + std::to_string(getpid()) + ":" +
         (s.rank < 0 ? std::string("-") : std::to_string(s.rank));
}

void LogLine(LogLevel level, const char* file, int line, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  const std::string prefix = LogPrefix();
  Sink& s = GetSink();
  std::lock_guard<std::mutex> lock(s.mu);
  FILE* out = s.file ? s.file : stderr;
  std::fprintf(out, "%s %s %s:%d %s\n", prefix.c_str(), LogLevelName(level), base, line, msg);
  std::fflush(out);
}

namespace internal {
void ResetLoggingForTest() {
  Sink& s = GetSink();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.file != nullptr) std::fclose(s.file);
  s.file = nullptr;
  s.rank = -1;
  s.settled = false;
  s.level.store(-1, std::memory_order_release);
}

void CheckFailed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "ciuic: internal check failed at %s:%d: %s (a bug; please report)\n", file,
               line, cond);
  std::abort();
}
}  // namespace internal

}  // namespace ciuic
