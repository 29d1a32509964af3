// Test helper: run a body in N forked processes ("ranks") that share a
// rendezvous FileStore, and collect how each ended.
//
// Each child runs body(rank, store); an OK status exits 0, an error writes
// its message to a pipe and exits 1. The parent waits until every child has
// ended or `timeout` passes, then SIGKILLs the rest (reported as timed out),
// so a hanging rank fails the test instead of hanging it. Not thread-safe;
// call from the test's main thread.
#ifndef CIUIC_TESTS_UTIL_MULTIPROC_H_
#define CIUIC_TESTS_UTIL_MULTIPROC_H_

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"

namespace ciuic::testing {

struct RankResult {
  int rank = -1;
  bool exited = false;  // false: killed by a signal (or by the timeout)
  int exit_code = -1;
  int signal = 0;
  bool timed_out = false;
  std::string message;  // the body's error message
  bool ok() const { return exited && exit_code == 0; }
  std::string Describe() const {
    std::string s = "rank " + std::to_string(rank) + ": ";
    if (timed_out) return s + "timed out (killed)";
    if (!exited) return s + "killed by signal " + std::to_string(signal);
    return s + "exit " + std::to_string(exit_code) + (message.empty() ? "" : " (" + message + ")");
  }
};

// A fresh directory removed on destruction.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/ciuic-test-XXXXXX";
    path_ = mkdtemp(tmpl) != nullptr ? tmpl : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<RankResult> RunRanks(
    int n, const std::function<Status(int rank, transport::Store& store)>& body,
    std::chrono::milliseconds timeout) {
  TempDir dir;
  std::vector<RankResult> results(n);
  std::vector<pid_t> pids(n, -1);
  std::vector<int> pipes(n, -1);
  std::fflush(nullptr);
  for (int r = 0; r < n; ++r) {
    results[r].rank = r;
    int fds[2];
    if (pipe(fds) != 0) {
      results[r].message = "pipe failed";
      continue;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      for (int i = 0; i < r; ++i) close(pipes[i]);
      std::string msg;
      auto store = transport::FileStore::Open(dir.path());
      Status s = store.ok() ? body(r, **store) : store.status();
      if (!s.ok()) {
        msg = s.ToString();
        ssize_t w = write(fds[1], msg.data(), msg.size());
        (void)w;
      }
      close(fds[1]);
      std::fflush(nullptr);
      _exit(s.ok() ? 0 : 1);
    }
    close(fds[1]);
    pids[r] = pid;
    pipes[r] = fds[0];
    if (pid < 0) results[r].message = "fork failed";
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int left = 0;
  for (pid_t p : pids) left += p > 0;
  while (left > 0) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      results[r].exited = WIFEXITED(status);
      results[r].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      results[r].signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
      pids[r] = 0;
      --left;
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (int r = 0; r < n; ++r) {
        if (pids[r] <= 0) continue;
        kill(pids[r], SIGKILL);
        waitpid(pids[r], nullptr, 0);
        results[r].timed_out = true;
        pids[r] = 0;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  for (int r = 0; r < n; ++r) {
    if (pipes[r] < 0) continue;
    char buf[4096];
    ssize_t got;
    while ((got = read(pipes[r], buf, sizeof(buf))) > 0) results[r].message.append(buf, got);
    close(pipes[r]);
  }
  return results;
}

}  // namespace ciuic::testing

#endif  // CIUIC_TESTS_UTIL_MULTIPROC_H_
