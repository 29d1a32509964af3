// ciuic-run end to end: starts the launcher on small /bin/sh ranks (and
// ciuic_run_rank, which talks to the store) and checks its output, exit
// status, the environment of every rank, that stopping leaves no process
// behind (this test process is a child subreaper, so anything ciuic-run
// leaves running becomes our child) and, with --hosts, that the network
// namespaces are removed.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/util/proc.h"

#ifndef CIUIC_RUN_BIN
#error "CIUIC_RUN_BIN must name the ciuic-run executable"
#endif
#ifndef CIUIC_RUN_RANK_BIN
#error "CIUIC_RUN_RANK_BIN must name the ciuic_run_rank executable"
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  int code = -1;  // exit code, or 128 + signal when ciuic-run was killed
  std::string out, err;
  double seconds = 0;
  bool timed_out = false;
};

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// Pids whose parent is this process.
std::vector<pid_t> Children() { return ciuic::testing::ChildrenOf(getpid()); }

std::string Cmdline(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::replace(s.begin(), s.end(), '\0', ' ');
  return s;
}

// Network namespaces whose name starts with `prefix`.
std::vector<std::string> Netns(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir("/run/netns");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (std::string(e->d_name).rfind(prefix, 0) == 0) out.push_back(e->d_name);
  }
  closedir(d);
  return out;
}

// One ciuic-run process with its stdout and stderr captured.
class Launch {
 public:
  Launch(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
    std::vector<std::string> argv_s = {CIUIC_RUN_BIN};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    start_ = Clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
      dup2(out[1], STDOUT_FILENO);
      dup2(err[1], STDERR_FILENO);
      execv(argv[0], argv.data());
      _exit(126);
    }
    close(out[1]);
    close(err[1]);
    out_ = out[0];
    err_ = err[0];
  }
  ~Launch() {
    if (pid_ > 0 && !finished_) Finish(0);
  }

  pid_t pid() const { return pid_; }
  std::string NetnsPrefix() const { return "ciuic-" + std::to_string(pid_) + "-"; }

  void Signal(int sig) { kill(pid_, sig); }

  // Reads stdout until `text` appears (10 s at most), then closes it, as
  // `| head` does. Returns what was read.
  std::string ReadStdoutUntilThenClose(const std::string& text) {
    std::string got;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (got.find(text) == std::string::npos && Clock::now() < deadline) {
      pollfd p{out_, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(out_, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    close(out_);
    out_ = -1;
    return got;
  }

  // Reads stdout/stderr to EOF and waits for the exit, killing ciuic-run
  // after `timeout_s`.
  Result Finish(double timeout_s = 30) {
    Result r;
    finished_ = true;
    if (pid_ <= 0) return r;
    const auto deadline = start_ + std::chrono::duration<double>(timeout_s);
    int fds[2] = {out_, err_};
    std::string* bufs[2] = {&r.out, &r.err};
    while (fds[0] >= 0 || fds[1] >= 0) {
      pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        r.timed_out = true;
        kill(pid_, SIGKILL);
        break;
      }
      if (poll(p, 2, static_cast<int>(left)) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (fds[i] < 0 || p[i].revents == 0) continue;
        char buf[4096];
        const ssize_t n = read(fds[i], buf, sizeof buf);
        if (n > 0) {
          bufs[i]->append(buf, static_cast<size_t>(n));
        } else if (n == 0 || errno != EINTR) {
          close(fds[i]);
          fds[i] = -1;
        }
      }
    }
    for (int fd : fds) {
      if (fd >= 0) close(fd);
    }
    int status = 0;
    waitpid(pid_, &status, 0);
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
    return r;
  }

 private:
  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  Clock::time_point start_;
  bool finished_ = false;
};

class CiuicRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Anything ciuic-run leaves behind is reparented to us.
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    char tmpl[] = "/tmp/ciuic_run_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }

  void TearDown() override {
    ExpectNoOrphans();
    for (const std::string& prefix : netns_prefixes_) {
      EXPECT_TRUE(Netns(prefix).empty()) << "namespaces " << prefix << "* remain after ciuic-run exited";
    }
    DIR* d = opendir("/dev/shm");
    if (d != nullptr) {
      while (dirent* e = readdir(d)) {
        EXPECT_EQ(std::string(e->d_name).find("ciuic"), std::string::npos) << "/dev/shm/" << e->d_name;
      }
      closedir(d);
    }
    std::string cmd = "rm -rf '" + dir_ + "'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }

  // Waits (2 s at most) until no child of ours remains: exited ones are
  // reaped; live ones are reported and killed.
  void ExpectNoOrphans() {
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    for (;;) {
      siginfo_t info;
      std::memset(&info, 0, sizeof info);
      if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG) != 0) return;  // ECHILD: none left
      if (info.si_pid != 0) continue;                                 // reaped a dead one
      if (Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (pid_t pid : Children()) {
      ADD_FAILURE() << "process left behind: " << pid << " " << Cmdline(pid);
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }

  // Waits until `n` ranks have created their ready file (rank scripts
  // below run `touch $D/ready.$CIUIC_RANK`).
  bool WaitReady(int n, double timeout_s = 15) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (Clock::now() < deadline) {
      int ready = 0;
      for (int r = 0; r < n; ++r) {
        struct stat st;
        ready += stat((dir_ + "/ready." + std::to_string(r)).c_str(), &st) == 0;
      }
      if (ready == n) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // A shell rank: D is the test's directory; `ready` touches the ready file.
  std::vector<std::string> Sh(const std::string& script) {
    return {"/bin/sh", "-c", "D='" + dir_ + "'; ready() { touch \"$D/ready.$CIUIC_RANK\"; }; " + script};
  }

  std::vector<std::string> Args(std::vector<std::string> opts, const std::vector<std::string>& prog) {
    opts.push_back("--");
    opts.insert(opts.end(), prog.begin(), prog.end());
    return opts;
  }

  // Skips unless simulated hosts can be made here (root, ip netns).
  bool CanMakeNetns(std::string* why) {
    if (geteuid() != 0) {
      *why = "--hosts needs root (network namespaces); running as uid " + std::to_string(geteuid());
      return false;
    }
    const std::string name = "ciuic-probe-" + std::to_string(getpid());
    const std::string add = "ip netns add " + name + " >/dev/null 2>&1";
    if (std::system(add.c_str()) != 0) {
      *why = "'ip netns add' fails here";
      return false;
    }
    const std::string del = "ip netns del " + name;
    (void)std::system(del.c_str());
    return true;
  }

  void Track(const Launch& l) { netns_prefixes_.push_back(l.NetnsPrefix()); }

  std::string dir_;
  std::vector<std::string> netns_prefixes_;
};

#define SKIP_WITHOUT_NETNS()                 \
  do {                                       \
    std::string why;                         \
    if (!CanMakeNetns(&why)) GTEST_SKIP() << why; \
  } while (0)

TEST_F(CiuicRunTest, NormalRunPrefixesEveryLine) {
  Launch l(Args({"-n", "4"}, Sh("echo hello $CIUIC_RANK; echo oops $CIUIC_RANK >&2")));
  const Result r = l.Finish();
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.code, 0) << r.err;
  const auto lines = Lines(r.out);
  EXPECT_EQ(std::multiset<std::string>(lines.begin(), lines.end()),
            (std::multiset<std::string>{"[0] hello 0", "[1] hello 1", "[2] hello 2", "[3] hello 3"}))
      << r.out;
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(Count(r.err, "[" + std::to_string(k) + "] oops " + std::to_string(k) + "\n"), 1u) << r.err;
  }
  EXPECT_EQ(r.out.find("oops"), std::string::npos) << "stderr leaked into stdout";
}

TEST_F(CiuicRunTest, EnvironmentOfEachRank) {
  // Inherited values of the variables ciuic-run owns must not leak through.
  Launch l(Args({"-n", "3", "--transport", "tcp"},
                Sh("echo \"rank=$CIUIC_RANK size=$CIUIC_WORLD_SIZE local=$CIUIC_LOCAL_RANK "
                   "store=$CIUIC_STORE_ADDR external=$CIUIC_STORE_EXTERNAL secret=${#CIUIC_SECRET} "
                   "secret_file=${CIUIC_SECRET_FILE-unset} transport=$CIUIC_TRANSPORT\"; "
                   "echo \"S=$CIUIC_SECRET\"")),
           {"CIUIC_RANK=7", "CIUIC_SECRET_FILE=/nonexistent", "CIUIC_TRANSPORT=shm", "CIUIC_SECRET=old"});
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  std::set<int> ranks;
  std::set<std::string> ports, secrets;
  for (const std::string& line : Lines(r.out)) {
    int tag = -1, rank = -1, size = -1, local = -1, port = -1, external = -1, secret_len = -1, end = 0;
    char secret_file[64] = {}, transport[16] = {};
    if (std::sscanf(line.c_str(),
                    "[%d] rank=%d size=%d local=%d store=127.0.0.1:%d external=%d secret=%d "
                    "secret_file=%63s transport=%15s%n",
                    &tag, &rank, &size, &local, &port, &external, &secret_len, secret_file, transport,
                    &end) == 9 &&
        end == static_cast<int>(line.size())) {
      EXPECT_EQ(tag, rank) << line;
      EXPECT_EQ(local, rank) << line;
      EXPECT_EQ(size, 3) << line;
      EXPECT_EQ(external, 1) << line;
      EXPECT_EQ(secret_len, 64) << line;
      EXPECT_STREQ(secret_file, "unset") << line;
      EXPECT_STREQ(transport, "tcp") << line;
      ranks.insert(rank);
      ports.insert(std::to_string(port));
    } else if (line.find("S=") != std::string::npos) {
      secrets.insert(line.substr(line.find("S=") + 2));
    } else {
      ADD_FAILURE() << "unexpected line: " << line;
    }
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2})) << r.out;
  EXPECT_EQ(ports.size(), 1u) << "every rank sees the same store";
  ASSERT_EQ(secrets.size(), 1u) << "every rank sees the same secret";
  EXPECT_NE(*secrets.begin(), "old");
  EXPECT_EQ(secrets.begin()->size(), 64u);
  EXPECT_EQ(secrets.begin()->find_first_not_of("0123456789abcdef"), std::string::npos) << *secrets.begin();
}

TEST_F(CiuicRunTest, SecretIsFreshPerJob) {
  Launch a(Args({"-n", "1"}, Sh("echo $CIUIC_SECRET")));
  Launch b(Args({"-n", "1"}, Sh("echo $CIUIC_SECRET")));
  const Result ra = a.Finish(), rb = b.Finish();
  EXPECT_EQ(ra.code, 0);
  EXPECT_EQ(rb.code, 0);
  EXPECT_NE(ra.out, rb.out);
}

TEST_F(CiuicRunTest, RanksReachTheStoreWithTheSecret) {
  Launch l(Args({"-n", "4"}, {CIUIC_RUN_RANK_BIN}));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  for (int k = 0; k < 4; ++k) {
    EXPECT_NE(r.out.find("[" + std::to_string(k) + "] rank " + std::to_string(k) + " of 4: store ok"),
              std::string::npos)
        << r.out << r.err;
  }
}

TEST_F(CiuicRunTest, FailingRankStopsTheOthers) {
  // Rank 2 fails once every other rank sleeps.
  Launch l(Args({"-n", "4"}, Sh("if [ $CIUIC_RANK = 2 ]; then "
                                "while [ $(ls \"$D\" | wc -l) -lt 3 ]; do sleep 0.02; done; "
                                "echo last words; exit 3; fi; ready; exec sleep 30")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_LT(r.seconds, 10) << "the sleeping ranks were not stopped";
  EXPECT_EQ(Count(r.err, "ciuic-run: rank 2 exited with status 3\n"), 1u) << r.err;
  EXPECT_NE(r.out.find("[2] last words\n"), std::string::npos) << r.out;
}

// --keep-going: the others finish on their own (they could name the dead
// rank); the status is still the first failure's, and later failures are
// announced too.
TEST_F(CiuicRunTest, KeepGoingLetsTheOthersFinish) {
  Launch l(Args({"-n", "3", "--keep-going"},
                Sh("if [ $CIUIC_RANK = 1 ]; then "
                   "while [ $(ls \"$D\" | wc -l) -lt 2 ]; do sleep 0.02; done; kill -9 $$; fi; "
                   "ready; sleep 2; echo survived; [ $CIUIC_RANK = 2 ] && exit 4; exit 0")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 128 + 9) << r.err;
  EXPECT_EQ(Count(r.err, "ciuic-run: rank 1 killed by signal SIGKILL (--keep-going: the others run on)\n"), 1u)
      << r.err;
  EXPECT_EQ(Count(r.err, "ciuic-run: rank 2 exited with status 4 (--keep-going: the others run on)\n"), 1u)
      << r.err;
  EXPECT_NE(r.out.find("[0] survived\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[2] survived\n"), std::string::npos) << r.out;
}

TEST_F(CiuicRunTest, RankKilledBySignalGives128PlusSignal) {
  Launch l(Args({"-n", "3"}, Sh("if [ $CIUIC_RANK = 1 ]; then "
                                "while [ $(ls \"$D\" | wc -l) -lt 2 ]; do sleep 0.02; done; kill -9 $$; fi; "
                                "ready; exec sleep 30")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 128 + 9) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_EQ(Count(r.err, "ciuic-run: rank 1 killed by signal SIGKILL\n"), 1u) << r.err;
}

TEST_F(CiuicRunTest, RankIgnoringSigtermIsKilled) {
  // Rank 1 ignores SIGTERM (so does the sleep it execs): SIGKILL after ~2 s.
  Launch l(Args({"-n", "2"}, Sh("if [ $CIUIC_RANK = 0 ]; then "
                                "while [ ! -e \"$D/ready.1\" ]; do sleep 0.02; done; exit 5; fi; "
                                "trap '' TERM; ready; exec sleep 30")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 5) << r.err;
  EXPECT_GT(r.seconds, 1.5) << "SIGKILL should come after the grace period";
  EXPECT_LT(r.seconds, 10);
}

TEST_F(CiuicRunTest, BackgroundProcessOfARankIsStopped) {
  // The rank exits 0 but leaves a sleeper that holds its stdout.
  Launch l(Args({"-n", "2"}, Sh("sleep 30 & echo started")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_EQ(Count(r.out, "started"), 2u);
}

TEST_F(CiuicRunTest, ProcessesThatLeftTheRanksGroupAreStopped) {
  // setsid: the sleepers leave the rank's process group and session; one
  // holds the rank's stdout, the other does not.
  Launch l(Args({"-n", "2"}, Sh("setsid sleep 30 & setsid sleep 31 >/dev/null 2>&1 & echo started")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_EQ(Count(r.out, "started"), 2u);
}

TEST_F(CiuicRunTest, ClosedStdoutEndsTheJobLikeSigpipe) {
  Launch l(Args({"-n", "2"}, {"yes", "y"}));
  EXPECT_NE(l.ReadStdoutUntilThenClose("[1] y\n").find("[1] y\n"), std::string::npos);
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 128 + SIGPIPE) << r.err;
  EXPECT_LT(r.seconds, 10);
}

TEST_F(CiuicRunTest, SigintStopsEverythingWith130) {
  Launch l(Args({"-n", "3"}, Sh("ready; exec sleep 30")));
  ASSERT_TRUE(WaitReady(3));
  l.Signal(SIGINT);
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 130) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("SIGINT"), std::string::npos) << r.err;
}

TEST_F(CiuicRunTest, SigtermStopsEverythingWith143) {
  Launch l(Args({"-n", "2"}, Sh("ready; sleep 30; echo not reached")));
  ASSERT_TRUE(WaitReady(2));
  l.Signal(SIGTERM);
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 143) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_EQ(r.out.find("not reached"), std::string::npos);
}

TEST_F(CiuicRunTest, RanksDieWithAKilledLauncher) {
  // The PR_SET_PDEATHSIG backstop: ciuic-run gets no chance to clean up.
  Launch l(Args({"-n", "2"}, Sh("ready; exec sleep 30")));
  ASSERT_TRUE(WaitReady(2));
  l.Signal(SIGKILL);
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 128 + SIGKILL);
  // TearDown checks that the ranks (now our children) are gone.
}

TEST_F(CiuicRunTest, TimeoutStopsTheJobWith124) {
  Launch l(Args({"-n", "2", "--timeout", "0.5"}, Sh("exec sleep 30")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 124) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("--timeout"), std::string::npos) << r.err;
}

TEST_F(CiuicRunTest, BadUsageExits2NamingTheArgument) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--", "true"}, "-n"},
      {{"true"}, "-n"},
      {{"-n", "0", "--", "true"}, "-n 0"},
      {{"-n", "-3", "--", "true"}, "-n '-3'"},
      {{"-n", "x", "--", "true"}, "-n 'x'"},
      {{"-n", "2", "--transport", "udp", "--", "true"}, "--transport 'udp'"},
      {{"-n", "2", "--bind", "socket", "--", "true"}, "--bind 'socket'"},
      {{"-n", "2", "--timeout", "soon", "--", "true"}, "--timeout 'soon'"},
      {{"-n", "2", "--hosts", "3", "--", "true"}, "--hosts 3"},
      {{"-n", "4", "--hosts", "3+2", "--", "true"}, "--hosts 3+2 places 5 ranks, but -n is 4"},
      {{"-n", "4", "--hosts", "3+0+1", "--", "true"}, "--hosts '3+0+1'"},
      {{"-n", "4", "--hosts", "3+", "--", "true"}, "--hosts '3+'"},
      {{"-n", "4", "--hosts", "+3", "--", "true"}, "--hosts '+3'"},
      {{"-n", "4", "--hosts", "2++2", "--", "true"}, "--hosts '2++2'"},
      {{"-n", "4", "--hosts", "2+a", "--", "true"}, "--hosts '2+a'"},
      {{"-n", "4", "--hosts", "2+-2", "--", "true"}, "--hosts '2+-2'"},
      {{"-n", "4", "--hosts", " 2", "--", "true"}, "--hosts ' 2'"},
      {{"-n", "4", "--hosts", "0", "--", "true"}, "--hosts '0'"},
      {{"-n", "4", "--hosts", "", "--", "true"}, "--hosts ''"},
      {{"-n", "4", "--hosts", "0x2", "--", "true"}, "--hosts '0x2'"},
      {{"-n", "4", "--hosts", "1025+5", "--", "true"}, "--hosts '1025+5'"},
      {{"-n", "251", "--hosts", "1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1+1", "--", "true"}, "at most 250 hosts"},
      {{"-n", "300", "--hosts", "251", "--", "true"}, "--hosts '251'"},
      {{"-n", "2", "--link-rate", "1gbit", "--", "true"}, "--link-rate needs --hosts"},
      {{"-n", "2", "--hosts", "2", "--link-rate", "fast", "--", "true"}, "--link-rate 'fast'"},
      {{"-n", "2", "--frobnicate", "--", "true"}, "--frobnicate"},
      {{"-n", "2"}, "no program"},
      {{"-n", "2", "--"}, "no program"},
      {{"-n"}, "-n needs a value"},
  };
  for (const auto& [args, needle] : cases) {
    Launch l(args);
    const Result r = l.Finish();
    EXPECT_EQ(r.code, 2) << needle << ": " << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty());
  }
}

TEST_F(CiuicRunTest, HelpExits0) {
  Launch l({"--help"});
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("usage: ciuic-run -n N"), std::string::npos);
}

TEST_F(CiuicRunTest, MissingProgramExits127) {
  {
    Launch l({"-n", "2", "--", dir_ + "/no-such-program"});
    const Result r = l.Finish();
    EXPECT_EQ(r.code, 127);
    EXPECT_EQ(r.err, "ciuic-run: cannot run '" + dir_ + "/no-such-program': No such file or directory\n");
  }
  {
    Launch l({"-n", "1", "--", "ciuic-no-such-program-in-path"});
    const Result r = l.Finish();
    EXPECT_EQ(r.code, 127);
    EXPECT_EQ(r.err, "ciuic-run: cannot run 'ciuic-no-such-program-in-path': No such file or directory\n");
  }
  {
    const std::string file = dir_ + "/not-executable";
    std::ofstream(file) << "echo hi\n";
    chmod(file.c_str(), 0644);
    Launch l({"-n", "1", "--", file});
    const Result r = l.Finish();
    EXPECT_EQ(r.code, 127);
    EXPECT_NE(r.err.find("cannot run '" + file + "': Permission denied"), std::string::npos) << r.err;
  }
  {
    // Executable but not a program: execve itself fails in the first rank.
    const std::string file = dir_ + "/garbage";
    std::ofstream(file) << std::string("\x01\x02\x03\x04 not an executable\n");
    chmod(file.c_str(), 0755);
    Launch l({"-n", "3", "--bind", "none", "--", file});
    const Result r = l.Finish();
    EXPECT_EQ(r.code, 127);
    EXPECT_EQ(r.err, "ciuic-run: cannot run '" + file + "': Exec format error\n");
    EXPECT_LT(r.seconds, 10);
  }
}

TEST_F(CiuicRunTest, PartialLinesAreFlushedOnTheirOwnStream) {
  Launch l(Args({"-n", "2"}, Sh("printf 'out-partial'; printf 'err-partial' >&2; "
                                "printf 'a\\nb\\n\\nc'")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0);
  for (int k = 0; k < 2; ++k) {
    const std::string p = "[" + std::to_string(k) + "] ";
    std::vector<std::string> mine;  // rank k's lines, in order (ranks interleave)
    for (const std::string& line : Lines(r.out)) {
      if (line.rfind(p, 0) == 0) mine.push_back(line);
    }
    EXPECT_EQ(mine, (std::vector<std::string>{p + "out-partiala", p + "b", p, p + "c"})) << r.out;
    EXPECT_EQ(r.out.back(), '\n');
    EXPECT_NE(r.err.find(p + "err-partial\n"), std::string::npos) << r.err;
  }
}

std::vector<int> ParseCpuList(const std::string& text) {
  std::vector<int> cpus;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, ',');) {
    const size_t dash = part.find('-');
    const int lo = std::stoi(part.substr(0, dash));
    const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  return cpus;
}

// rank -> CPUs from "[r] Cpus_allowed_list:\t0-1" lines.
std::map<int, std::vector<int>> AllowedCpus(const std::string& out) {
  std::map<int, std::vector<int>> m;
  for (const std::string& line : Lines(out)) {
    int rank = -1;
    char list[256] = {};
    if (std::sscanf(line.c_str(), "[%d] Cpus_allowed_list: %255s", &rank, list) == 2) {
      m[rank] = ParseCpuList(list);
    }
  }
  return m;
}

TEST_F(CiuicRunTest, BindCoreGivesDisjointCpus) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  if (CPU_COUNT(&set) < 2) GTEST_SKIP() << "needs 2 CPUs, this process may use " << CPU_COUNT(&set);
  Launch l(Args({"-n", "2", "--bind", "core"}, Sh("grep Cpus_allowed_list /proc/self/status")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  const auto cpus = AllowedCpus(r.out);
  ASSERT_EQ(cpus.size(), 2u) << r.out;
  std::vector<int> both;
  for (const auto& [rank, list] : cpus) {
    EXPECT_FALSE(list.empty());
    both.insert(both.end(), list.begin(), list.end());
  }
  std::sort(both.begin(), both.end());
  EXPECT_EQ(std::unique(both.begin(), both.end()), both.end()) << "ranks share a CPU: " << r.out;
}

TEST_F(CiuicRunTest, BindNoneKeepsTheLaunchersCpus) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> mine;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) mine.push_back(c);
  }
  Launch l(Args({"-n", "2", "--bind", "none"}, Sh("grep Cpus_allowed_list /proc/self/status")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  const auto cpus = AllowedCpus(r.out);
  ASSERT_EQ(cpus.size(), 2u) << r.out;
  for (const auto& [rank, list] : cpus) EXPECT_EQ(list, mine) << "rank " << rank;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

TEST_F(CiuicRunTest, BindNumaGivesEachRankCpusOfOneNode) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  Launch l(Args({"-n", "2", "--bind", "numa"}, Sh("grep Cpus_allowed_list /proc/self/status")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  const auto cpus = AllowedCpus(r.out);
  ASSERT_EQ(cpus.size(), 2u) << r.out;
  for (const auto& [rank, list] : cpus) {
    EXPECT_FALSE(list.empty());
    for (int c : list) EXPECT_TRUE(CPU_ISSET(c, &set)) << "rank " << rank << " got CPU " << c;
  }
}

TEST_F(CiuicRunTest, MoreRanksThanCoresShareCoresInBlocksByDefault) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int n = CPU_COUNT(&set) + 1;  // more ranks than CPUs, so more than cores
  if (n > 64) GTEST_SKIP() << "too many CPUs for a quick test (" << n - 1 << ")";
  Launch l(Args({"-n", std::to_string(n)}, Sh("grep Cpus_allowed_list /proc/self/status")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Count(r.err, "neighbouring ranks share a core"), 1u) << r.err;
  const auto cpus = AllowedCpus(r.out);
  ASSERT_EQ(cpus.size(), static_cast<size_t>(n)) << r.out;
  // Every rank is bound to CPUs of this process; two ranks' sets are equal
  // (one core) or disjoint; ranks on one core are consecutive, and more than
  // one core is used when there is more than one CPU.
  std::vector<std::vector<int>> distinct;
  std::vector<int> prev;
  for (const auto& [rank, list] : cpus) {
    ASSERT_FALSE(list.empty()) << "rank " << rank;
    for (int c : list) EXPECT_TRUE(CPU_ISSET(c, &set)) << "rank " << rank << " got CPU " << c;
    if (list != prev) {
      for (const auto& d : distinct) {
        EXPECT_NE(d, list) << "rank " << rank << " shares a core with a rank that is not its neighbour: " << r.out;
        std::vector<int> both;
        std::set_intersection(d.begin(), d.end(), list.begin(), list.end(), std::back_inserter(both));
        EXPECT_TRUE(both.empty()) << "overlapping CPU sets: " << r.out;
      }
      distinct.push_back(list);
      prev = list;
    }
  }
  size_t bound = 0;
  for (const auto& d : distinct) bound += d.size();
  EXPECT_EQ(bound, static_cast<size_t>(CPU_COUNT(&set))) << "not every core used: " << r.out;
}

TEST_F(CiuicRunTest, MoreRanksThanCoresWithBindNoneAreNotBound) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const int n = CPU_COUNT(&set) + 1;
  if (n > 64) GTEST_SKIP() << "too many CPUs for a quick test (" << n - 1 << ")";
  Launch l(Args({"-n", std::to_string(n), "--bind", "none"}, Sh("true")));
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

// ---- Simulated hosts ----------------------------------------------------------

TEST_F(CiuicRunTest, HostsGiveEachRankItsHostAndAddress) {
  SKIP_WITHOUT_NETNS();
  Launch l(Args({"-n", "2", "--hosts", "2"},
                Sh("hostname; ip -4 -o addr show; echo \"if=$CIUIC_SOCKET_IFNAME store=$CIUIC_STORE_ADDR\"")));
  Track(l);
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  const std::string subnet = "10.77." + std::to_string(l.pid() % 250) + ".";
  for (int k = 0; k < 2; ++k) {
    const std::string p = "[" + std::to_string(k) + "] ";
    const std::string ifname = "ciuic" + std::to_string(k);
    EXPECT_NE(r.out.find(p + "ciuic-host" + std::to_string(k) + "\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(ifname + "    inet " + subnet + std::to_string(k + 1) + "/24"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find(p + "if=" + ifname + " store=" + subnet + "254:"), std::string::npos) << r.out;
  }
  // Each rank sees only its own namespace: lo and its veth.
  EXPECT_EQ(Count(r.out, "inet "), 4u) << r.out;
}

// --net-only: the hosts are made, and the command runs once in the bridge's
// namespace (it reaches every host), told the namespaces, the subnet and the
// hosts with their rank counts; no rank variables.
TEST_F(CiuicRunTest, NetOnlyRunsTheCommandOnceWhereItReachesEveryHost) {
  SKIP_WITHOUT_NETNS();
  Launch l(Args({"-n", "3", "--hosts", "2+1", "--net-only"},
                Sh("hostname; echo \"hosts=$CIUIC_SIM_HOSTS subnet=$CIUIC_SIM_SUBNET rank=${CIUIC_RANK:-none}\"; "
                   "ip netns exec \"${CIUIC_SIM_NS_PREFIX}1\" ip -4 -o addr show dev ciuic1; "
                   // Refused (not unreachable): host 1's address answers from here.
                   "timeout 5 bash -c \"exec 3<>/dev/tcp/${CIUIC_SIM_SUBNET%0/24}2/9\" 2>&1 | grep -o -m1 refused")));
  Track(l);
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  const std::string subnet = "10.77." + std::to_string(l.pid() % 250) + ".";
  EXPECT_EQ(Count(r.out, "[0] ciuic-bridge\n"), 1u) << r.out;
  EXPECT_EQ(Count(r.out, "[0] hosts=ciuic-host0:2,ciuic-host1:1 subnet=" + subnet + "0/24 rank=none\n"), 1u) << r.out;
  EXPECT_NE(r.out.find("ciuic1    inet " + subnet + "2/24"), std::string::npos) << r.out;
  EXPECT_EQ(Count(r.out, "[0] refused\n"), 1u) << r.out;
  EXPECT_EQ(Count(r.out, "[1]"), 0u) << r.out;
}

TEST_F(CiuicRunTest, NetOnlyNeedsHosts) {
  Launch l(Args({"-n", "2", "--net-only"}, Sh("true")));
  const Result r = l.Finish();
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--net-only needs --hosts"), std::string::npos) << r.err;
}

TEST_F(CiuicRunTest, HostsRanksReachTheStoreFromEveryNamespace) {
  SKIP_WITHOUT_NETNS();
  // Ranks 0,1 on host 0 and 2,3 on host 1 (blocks).
  Launch l(Args({"-n", "4", "--hosts", "2"}, {CIUIC_RUN_RANK_BIN}));
  Track(l);
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Count(r.out, "store ok, hosts ciuic-host0,ciuic-host0,ciuic-host1,ciuic-host1\n"), 4u)
      << r.out << r.err;
}

TEST_F(CiuicRunTest, HostsUnevenRanksUseShmInsideAHostAndTcpBetween) {
  SKIP_WITHOUT_NETNS();
  // 3 + 1: ranks 0-2 on host 0 (shm among them, tcp to rank 3), rank 3
  // alone on host 1 (tcp only). Every collective's result is checked by the
  // rank program; rank 0 says which pairs use what.
  Launch l(Args({"-n", "4", "--hosts", "3+1"}, {CIUIC_HOSTS_COMM_BIN}), {"CIUIC_DEBUG=INFO"});
  Track(l);
  const Result r = l.Finish(60);
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(Count(r.out, "[" + std::to_string(k) + "] rank " + std::to_string(k) + " of 4 on ciuic-host0: shm+tcp ok;"),
              1u) << r.out;
  }
  EXPECT_EQ(Count(r.out, "[3] rank 3 of 4 on ciuic-host1: tcp ok;"), 1u) << r.out;
  EXPECT_NE(r.err.find("transports: 2 hosts (ciuic-host0: ranks 0-2; ciuic-host1: ranks 3): shm inside hosts (3 "
                       "pairs), between hosts tcp (3 pairs) and verbs (0 pairs)"),
            std::string::npos)
      << r.err;
}

TEST_F(CiuicRunTest, HostsEvenAndForcedTransport) {
  SKIP_WITHOUT_NETNS();
  {
    Launch l(Args({"-n", "4", "--hosts", "2"}, {CIUIC_HOSTS_COMM_BIN}));
    Track(l);
    const Result r = l.Finish(60);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    // The two-level model picks the hierarchical all-reduce for 4 MiB.
    EXPECT_EQ(Count(r.out, "shm+tcp ok; 4 MiB all-reduce: hier ("), 4u) << r.out;
  }
  {
    // --transport tcp: tcp for every pair, inside hosts too.
    Launch l(Args({"-n", "4", "--hosts", "2", "--transport", "tcp"}, {CIUIC_HOSTS_COMM_BIN}));
    Track(l);
    const Result r = l.Finish(60);
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_EQ(Count(r.out, ": tcp ok;"), 4u) << r.out;
  }
}

TEST_F(CiuicRunTest, HostsARankDeadOnOneHostIsNamedOnTheOther) {
  SKIP_WITHOUT_NETNS();
  // Rank 3 (host 1) exits after the first all-reduce: the ranks of host 0
  // fail their next call naming it, well within the timeout.
  Launch l(Args({"-n", "4", "--hosts", "2+2", "--keep-going"}, {CIUIC_HOSTS_COMM_BIN, "die-on", "3"}),
           {"CIUIC_TIMEOUT_MS=20000"});
  Track(l);
  const Result r = l.Finish(60);
  EXPECT_NE(r.code, 0);
  EXPECT_LT(r.seconds, 20) << r.err;
  for (int k = 0; k < 2; ++k) {
    const std::string prefix = "[" + std::to_string(k) + "] rank " + std::to_string(k) + ": after rank 3 died: ";
    const size_t at = r.err.find(prefix);
    ASSERT_NE(at, std::string::npos) << r.err;
    const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
    EXPECT_NE(line.find("rank 3"), std::string::npos) << line;
  }
}

TEST_F(CiuicRunTest, HostsAreRemovedAfterAFailingRank) {
  SKIP_WITHOUT_NETNS();
  Launch l(Args({"-n", "3", "--hosts", "3"},
                Sh("if [ $CIUIC_RANK = 0 ]; then while [ $(ls \"$D\" | wc -l) -lt 2 ]; do sleep 0.02; done; "
                   "exit 4; fi; ready; exec sleep 30")));
  Track(l);
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_TRUE(Netns(l.NetnsPrefix()).empty());
}

TEST_F(CiuicRunTest, HostsAreRemovedAfterSigint) {
  SKIP_WITHOUT_NETNS();
  Launch l(Args({"-n", "2", "--hosts", "2"}, Sh("ready; exec sleep 30")));
  Track(l);
  ASSERT_TRUE(WaitReady(2));
  EXPECT_EQ(Netns(l.NetnsPrefix()).size(), 3u) << "two hosts and the bridge";
  l.Signal(SIGINT);
  const Result r = l.Finish();
  EXPECT_EQ(r.code, 130) << r.err;
  EXPECT_TRUE(Netns(l.NetnsPrefix()).empty());
}

TEST_F(CiuicRunTest, HostsLeftByAKilledLauncherAreRemovedByTheNext) {
  SKIP_WITHOUT_NETNS();
  Launch killed(Args({"-n", "1", "--hosts", "1"}, Sh("ready; exec sleep 30")));
  Track(killed);
  ASSERT_TRUE(WaitReady(1));
  killed.Signal(SIGKILL);
  EXPECT_EQ(killed.Finish().code, 128 + SIGKILL);
  EXPECT_EQ(Netns(killed.NetnsPrefix()).size(), 2u) << "nobody removed them yet";
  Launch next(Args({"-n", "1", "--hosts", "1"}, Sh("true")));
  Track(next);
  const Result r = next.Finish();
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("removed stale network namespace " + killed.NetnsPrefix()), std::string::npos) << r.err;
  EXPECT_TRUE(Netns(killed.NetnsPrefix()).empty());
}

TEST_F(CiuicRunTest, HostsSigintAtAnyMomentGives130AndCleansUp) {
  SKIP_WITHOUT_NETNS();
  // Whether it lands during namespace setup, the store start, the spawns or
  // the run, a Ctrl-C ends with 130 and leaves nothing behind.
  for (int delay_ms : {0, 2, 5, 10, 20, 50}) {
    Launch l(Args({"-n", "2", "--hosts", "2"}, Sh("exec sleep 30")));
    Track(l);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    l.Signal(SIGINT);
    const Result r = l.Finish();
    EXPECT_EQ(r.code, 130) << "after " << delay_ms << " ms: " << r.err;
    EXPECT_TRUE(Netns(l.NetnsPrefix()).empty()) << "after " << delay_ms << " ms";
  }
}

TEST_F(CiuicRunTest, HostsLinkRateShapesBothEnds) {
  SKIP_WITHOUT_NETNS();
  Launch l(Args({"-n", "2", "--hosts", "2", "--link-rate", "100mbit"},
                Sh("tc qdisc show dev $CIUIC_SOCKET_IFNAME; "
                   "if [ $CIUIC_RANK = 0 ]; then tc -n ciuic-$PPID-br qdisc show | grep tbf | sed 's/^/bridge /'; fi")));
  Track(l);
  const Result r = l.Finish();
  if (r.code == 1 && r.err.find("tbf") != std::string::npos) GTEST_SKIP() << "no tbf here: " << r.err;
  EXPECT_EQ(r.code, 0) << r.err;
  // The host ends (one per rank) and the two bridge ends.
  EXPECT_EQ(Count(r.out, "qdisc tbf"), 4u) << r.out;
  EXPECT_EQ(Count(r.out, "rate 100Mbit"), 4u) << r.out;
  EXPECT_EQ(Count(r.out, "[0] bridge qdisc tbf"), 2u) << r.out;
}

TEST_F(CiuicRunTest, HostsLinkDelayNeedsNetem) {
  SKIP_WITHOUT_NETNS();
  Launch l(Args({"-n", "2", "--hosts", "2", "--link-delay", "1ms"},
                Sh("tc qdisc show dev $CIUIC_SOCKET_IFNAME")));
  Track(l);
  const Result r = l.Finish();
  if (r.code == 0) {
    EXPECT_EQ(Count(r.out, "qdisc netem"), 2u) << r.out;  // this kernel has netem
  } else {
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("--link-delay: tc netem is not available"), std::string::npos) << r.err;
  }
}

TEST_F(CiuicRunTest, HostsWithoutCapabilitiesIsAClearError) {
  if (geteuid() != 0) {
    // Not root: ciuic-run must refuse by itself.
    Launch l(Args({"-n", "2", "--hosts", "2"}, Sh("true")));
    const Result r = l.Finish();
    EXPECT_EQ(r.code, 1);
    EXPECT_NE(r.err.find("--hosts 2 needs root"), std::string::npos) << r.err;
    return;
  }
  if (std::system("setpriv --inh-caps=-all --bounding-set=-net_admin true >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "setpriv cannot drop CAP_NET_ADMIN here";
  }
  const std::string cmd = std::string("setpriv --inh-caps=-all --bounding-set=-net_admin,-sys_admin ") +
                          CIUIC_RUN_BIN + " -n 2 --hosts 2 -- true 2>'" + dir_ + "/err'";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream in(dir_ + "/err");
  const std::string err((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(err.find("--hosts 2 needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"), std::string::npos) << err;
}

}  // namespace
