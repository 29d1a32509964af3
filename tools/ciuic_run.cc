// ciuic-run: the local launcher. Starts N ranks of a ciuic program on this
// machine, serves their rendezvous store, binds them to cores, forwards
// their output line by line with a "[rank] " prefix and stops the whole job
// when one rank fails. With --hosts K the ranks run in K network namespaces
// joined by a bridge: simulated hosts, each with its own address and host
// name, so that the communicator talks tcp between them.
//
//   ciuic-run -n N [--transport shm|tcp|verbs|auto] [--bind core|numa|none]
//             [--timeout SEC] [--hosts K [--link-rate RATE] [--link-delay D]]
//             [--keep-going] [--] prog args...
//
// Every rank gets CIUIC_RANK, CIUIC_WORLD_SIZE, CIUIC_LOCAL_RANK,
// CIUIC_STORE_ADDR (the store ciuic-run serves), CIUIC_STORE_EXTERNAL=1,
// CIUIC_SECRET (fresh per job), CIUIC_TRANSPORT (with --transport) and
// CIUIC_SOCKET_IFNAME (with --hosts). Stdin of every rank is /dev/null.
//
// Exit status: 0 when every rank exits 0; the first failing rank's exit code
// (128 + signal number when it was killed; with --keep-going the others run
// on to their own end, for fault-tolerance experiments); 124 after --timeout; 128 + signal
// when ciuic-run itself is stopped by SIGINT/SIGTERM/SIGHUP; 127 when the
// program cannot be executed; 2 for bad usage; 1 when the job cannot be set
// up (store, namespaces).
//
// Process model: each rank is the leader of its own process group (so that
// stopping a rank also stops what it started) and dies with ciuic-run
// (PR_SET_PDEATHSIG). Ranks that exited are observed with WNOWAIT and reaped
// only at the very end, so their process-group ids cannot be reused while
// ciuic-run may still signal those groups. ciuic-run is also a child
// subreaper: what a rank started in a session of its own (setsid) becomes
// ciuic-run's child when the rank dies and is stopped with the job.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/status.h"
#include "ciuic/topology.h"
#include "transport/transport.h"

extern char** environ;

namespace {

using ciuic::InvalidArgumentError;
using ciuic::Status;
using ciuic::StatusOr;
using Clock = std::chrono::steady_clock;

constexpr int kExitSetup = 1;
constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotRun = 127;
constexpr int kMaxRanks = 1024;
// The simulated hosts share one /24: .1 ... .K for hosts, .254 the bridge.
constexpr int kMaxHosts = 250;
// Grace between SIGTERM and SIGKILL when stopping ranks.
constexpr auto kTermGrace = std::chrono::milliseconds(2000);
// After every rank exited: how long output pipes may stay open (held by
// something a rank left behind) before that is stopped too.
constexpr auto kLinger = std::chrono::milliseconds(500);
// After SIGKILL: how long to wait for the pipes to close before giving up
// on them (only something that left the rank's process group holds them).
constexpr auto kKillGrace = std::chrono::milliseconds(1000);
// What a failed rank's pipes are read for (buffers of 64 KiB) before its
// failure is announced: all it wrote, unless something it started keeps
// writing.
constexpr int kFinalReads = 64;
// A line longer than this is forwarded in pieces.
constexpr size_t kMaxLine = 64 * 1024;

const char kUsage[] =
    "usage: ciuic-run -n N [options] [--] prog args...\n"
    "Starts N ranks of prog on this machine with a rendezvous store.\n"
    "  -n, -np, --np N         number of ranks (1-1024)\n"
    "  --transport T           CIUIC_TRANSPORT for every rank: shm, tcp, verbs or auto\n"
    "  --bind core|numa|none   bind each rank to its cores / NUMA node (default: core;\n"
    "                          with more ranks than cores, neighbouring ranks share one)\n"
    "  --timeout SEC           stop the job after SEC seconds (exit 124)\n"
    "  --hosts K               simulated hosts: K network namespaces joined by a bridge\n"
    "                          (needs root); rank r runs on host r*K/N\n"
    "  --hosts A+B+...         uneven hosts: A ranks on the first, B on the next, ...\n"
    "                          (the counts add up to N)\n"
    "  --link-rate RATE        with --hosts: limit every host link (tc tbf), e.g. 10gbit\n"
    "  --link-delay D          with --hosts: one-way delay per host (tc netem), e.g. 50us\n"
    "  --keep-going            when a rank fails, let the others run to their own end\n"
    "                          (they see the failure: fault-tolerance experiments)\n"
    "  --net-only              with --hosts: make the hosts, then run prog once in the\n"
    "                          bridge's namespace (which reaches every host) instead of\n"
    "                          the ranks, with CIUIC_SIM_NS_PREFIX (host k's namespace\n"
    "                          is PREFIXk), CIUIC_SIM_SUBNET and CIUIC_SIM_HOSTS\n"
    "                          (ciuic-host0:RANKS,...): for other launchers (mpirun)\n"
    "  -h, --help              this text\n"
    "Output lines are prefixed with [rank]; when a rank fails the others are\n"
    "stopped (unless --keep-going) and ciuic-run exits with its status\n"
    "(128+signal when killed).\n";

// ---- Small utilities ------------------------------------------------------

// Writes all of [p, p+n) to `fd`, waiting when it is non-blocking and full.
// Returns false on an error other than EINTR/EAGAIN (e.g. EPIPE).
bool WriteAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && errno == EAGAIN) {
      pollfd pfd{fd, POLLOUT, 0};
      poll(&pfd, 1, 100);
    } else {
      return false;
    }
  }
  return true;
}

// One "ciuic-run: ..." line on stderr, written with one write().
void Say(const std::string& text) {
  const std::string line = "ciuic-run: " + text + "\n";
  WriteAll(STDERR_FILENO, line.data(), line.size());
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

bool StartsWith(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Strict decimal integer in [lo, hi].
bool ParseInt(const std::string& text, long lo, long hi, long* out) {
  if (text.empty() || text.size() > 9) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  const long v = std::strtol(text.c_str(), nullptr, 10);
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

// A non-negative decimal number ("2", "0.5"), the leading part of `text`;
// `rest` receives what follows it.
bool ParseNumberPrefix(const std::string& text, double* value, std::string* rest) {
  size_t i = 0;
  bool digits = false, dot = false;
  for (; i < text.size(); ++i) {
    if (text[i] >= '0' && text[i] <= '9') {
      digits = true;
    } else if (text[i] == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) return false;
  *value = std::strtod(text.substr(0, i).c_str(), nullptr);
  *rest = text.substr(i);
  return std::isfinite(*value);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// ---- Options --------------------------------------------------------------

enum class Bind { kDefault, kCore, kNuma, kNone };

struct Options {
  int nranks = -1;
  std::string transport;  // empty: CIUIC_TRANSPORT is left as it is
  Bind bind = Bind::kDefault;
  double timeout_s = 0;   // 0: none
  int hosts = 0;          // 0: no simulated hosts
  std::string hosts_text;  // as given: "2" or "3+1"
  // --hosts A+B+...: ranks per host, in rank order (empty: an even split).
  std::vector<int> host_sizes;
  uint64_t link_rate_bps = 0;
  std::string link_rate_text;
  std::string link_delay;  // tc syntax ("50us"); empty: none
  std::vector<std::string> command;
  bool keep_going = false;  // a failed rank does not stop the others
  bool net_only = false;    // run the command once in the bridge namespace, not the ranks
  bool help = false;
};

// A tc-style rate in bits per second: a bare number or bit are bits/s;
// k/m/g/t multiply by 1000; "bps" means bytes/s (as in tc(8)).
StatusOr<uint64_t> ParseRate(const std::string& text) {
  double v = 0;
  std::string unit;
  const auto bad = [&] {
    return InvalidArgumentError("--link-rate '" + text +
                                "': expected a rate such as 100mbit, 10gbit, 1gbps or 500kbit");
  };
  if (!ParseNumberPrefix(text, &v, &unit)) return bad();
  unit = Lower(unit);
  double mult = 1;
  if (!unit.empty() && std::string("kmgt").find(unit[0]) != std::string::npos) {
    const int power = static_cast<int>(std::string("kmgt").find(unit[0])) + 1;
    mult = std::pow(1000.0, power);
    unit = unit.substr(1);
  }
  if (unit == "bps") {
    mult *= 8;
  } else if (!unit.empty() && unit != "bit") {
    return bad();
  }
  const double bps = v * mult;
  if (bps < 8000 || bps > 1e13) {
    return InvalidArgumentError("--link-rate '" + text + "': must be between 8kbit and 10tbit");
  }
  return static_cast<uint64_t>(bps);
}

// A delay in tc syntax: a number followed by us, ms or s.
StatusOr<std::string> ParseDelay(const std::string& text) {
  double v = 0;
  std::string unit;
  if (!ParseNumberPrefix(text, &v, &unit) || (unit != "us" && unit != "ms" && unit != "s") ||
      v <= 0) {
    return InvalidArgumentError("--link-delay '" + text + "': expected a delay such as 50us, 2ms or 0.1s");
  }
  return text;
}

StatusOr<Options> ParseArgs(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      return o;
    }
    if (arg == "--keep-going") {
      o.keep_going = true;
      continue;
    }
    if (arg == "--net-only") {
      o.net_only = true;
      continue;
    }
    std::string name = arg, value;
    bool has_value = false;
    const size_t eq = arg.find('=');
    if (StartsWith(arg, "--") && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    } else if (StartsWith(arg, "-n") && arg != "-np" && arg.size() > 2 && arg[2] != '-') {
      name = "-n";  // -n4
      value = arg.substr(2);
      has_value = true;
    }
    static const char* const kWithValue[] = {"-n", "-np", "--np", "--transport", "--bind",
                                             "--timeout", "--hosts", "--link-rate", "--link-delay"};
    bool known = false;
    for (const char* k : kWithValue) known |= name == k;
    if (!known) return InvalidArgumentError("unknown option '" + arg + "'");
    if (!has_value) {
      if (i + 1 >= argc) return InvalidArgumentError(name + " needs a value");
      value = argv[++i];
    }
    if (name == "-n" || name == "-np" || name == "--np") {
      long n = 0;
      if (!ParseInt(value, 0, 1L << 30, &n)) {
        return InvalidArgumentError(name + " '" + value + "': expected the number of ranks (1-" +
                                    std::to_string(kMaxRanks) + ")");
      }
      if (n < 1 || n > kMaxRanks) {
        return InvalidArgumentError(name + " " + value + ": the number of ranks must be between 1 and " +
                                    std::to_string(kMaxRanks));
      }
      o.nranks = static_cast<int>(n);
    } else if (name == "--transport") {
      if (value != "shm" && value != "tcp" && value != "verbs" && value != "auto") {
        return InvalidArgumentError("--transport '" + value + "': expected shm, tcp, verbs or auto");
      }
      o.transport = value;
    } else if (name == "--bind") {
      if (value == "core") {
        o.bind = Bind::kCore;
      } else if (value == "numa") {
        o.bind = Bind::kNuma;
      } else if (value == "none") {
        o.bind = Bind::kNone;
      } else {
        return InvalidArgumentError("--bind '" + value + "': expected core, numa or none");
      }
    } else if (name == "--timeout") {
      double t = 0;
      std::string rest;
      if (!ParseNumberPrefix(value, &t, &rest) || !rest.empty() || t <= 0 || t > 1e7) {
        return InvalidArgumentError("--timeout '" + value + "': expected a positive number of seconds");
      }
      o.timeout_s = t;
    } else if (name == "--hosts") {
      o.hosts_text = value;
      if (value.find('+') == std::string::npos) {
        long k = 0;
        if (!ParseInt(value, 1, kMaxHosts, &k)) {
          return InvalidArgumentError("--hosts '" + value + "': expected a number of simulated hosts (1-" +
                                      std::to_string(kMaxHosts) + ") or ranks per host (3+1)");
        }
        o.hosts = static_cast<int>(k);
        o.host_sizes.clear();
      } else {
        // Uneven hosts: the ranks of each, in rank order.
        o.host_sizes.clear();
        for (size_t at = 0;;) {
          const size_t plus = std::min(value.find('+', at), value.size());
          long m = 0;
          if (!ParseInt(value.substr(at, plus - at), 1, 1024, &m) ||
              o.host_sizes.size() >= static_cast<size_t>(kMaxHosts)) {
            return InvalidArgumentError("--hosts '" + value + "': expected ranks per host as A+B+... (each 1-1024, " +
                                        "at most " + std::to_string(kMaxHosts) + " hosts)");
          }
          o.host_sizes.push_back(static_cast<int>(m));
          if (plus == value.size()) break;
          at = plus + 1;
        }
        o.hosts = static_cast<int>(o.host_sizes.size());
      }
    } else if (name == "--link-rate") {
      auto rate = ParseRate(value);
      if (!rate.ok()) return rate.status();
      o.link_rate_bps = *rate;
      o.link_rate_text = value;
    } else if (name == "--link-delay") {
      auto delay = ParseDelay(value);
      if (!delay.ok()) return delay.status();
      o.link_delay = *delay;
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.nranks < 0) return InvalidArgumentError("missing -n N (the number of ranks)");
  if (o.command.empty()) return InvalidArgumentError("no program to run (ciuic-run -n N -- prog args...)");
  if (o.command[0].empty()) return InvalidArgumentError("the program name is empty");
  if (!o.host_sizes.empty()) {
    int64_t sum = 0;
    for (int m : o.host_sizes) sum += m;
    if (sum != o.nranks) {
      return InvalidArgumentError("--hosts " + o.hosts_text + " places " + std::to_string(sum) + " ranks, but -n is " +
                                  std::to_string(o.nranks));
    }
  }
  if (o.hosts > o.nranks) {
    return InvalidArgumentError("--hosts " + std::to_string(o.hosts) + " exceeds -n " + std::to_string(o.nranks) +
                                ": every simulated host needs at least one rank");
  }
  if (o.hosts == 0 && o.link_rate_bps != 0) return InvalidArgumentError("--link-rate needs --hosts");
  if (o.hosts == 0 && !o.link_delay.empty()) return InvalidArgumentError("--link-delay needs --hosts");
  if (o.net_only && o.hosts == 0) return InvalidArgumentError("--net-only needs --hosts");
  if (o.net_only && !o.transport.empty()) {
    return InvalidArgumentError("--net-only starts no ranks: --transport has nothing to apply to");
  }
  return o;
}

// The file execve() will run for `name`: as given when it contains '/',
// else the first executable regular file in $PATH. On failure returns the
// errno to report (ENOENT, EACCES, EISDIR).
int ResolveProgram(const std::string& name, std::string* path) {
  const auto check = [](const std::string& p) {
    struct stat st;
    if (stat(p.c_str(), &st) != 0) return errno;
    if (S_ISDIR(st.st_mode)) return EISDIR;
    if (!S_ISREG(st.st_mode) || access(p.c_str(), X_OK) != 0) return EACCES;
    return 0;
  };
  if (name.find('/') != std::string::npos) {
    *path = name;
    return check(name);
  }
  const char* env = std::getenv("PATH");
  const std::string dirs = env != nullptr ? env : "/usr/local/bin:/usr/bin:/bin";
  int first_error = ENOENT;
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string candidate = dir + "/" + name;
    const int e = check(candidate);
    if (e == 0) {
      *path = candidate;
      return 0;
    }
    if (e != ENOENT && e != ENOTDIR && first_error == ENOENT) first_error = e;
    start = end + 1;
  }
  return first_error;
}

// 32 random bytes from /dev/urandom as 64 hex digits.
StatusOr<std::string> MakeSecret() {
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ciuic::UnavailableError(std::string("/dev/urandom: ") + std::strerror(errno));
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t r = read(fd, bytes + got, sizeof bytes - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      close(fd);
      return ciuic::UnavailableError("/dev/urandom: short read");
    }
    got += static_cast<size_t>(r);
  }
  close(fd);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

// True when the effective capability set has every bit in `bits`.
bool HaveCapabilities(const std::vector<int>& bits) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (!StartsWith(line, "CapEff:")) continue;
    const unsigned long long eff = std::strtoull(line.c_str() + 7, nullptr, 16);
    for (int b : bits) {
      if ((eff & (1ull << b)) == 0) return false;
    }
    return true;
  }
  return geteuid() == 0;
}

// Runs a helper program (ip, tc) to completion: stdout discarded, stderr
// captured into `err`. Returns its exit status (-1 when it could not run).
int RunHelper(const std::vector<std::string>& args, std::string* err) {
  std::string path;
  if (ResolveProgram(args[0], &path) != 0) {
    *err = args[0] + ": not found in PATH";
    return -1;
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int pfd[2];
  if (pipe2(pfd, O_CLOEXEC) != 0) {
    *err = std::string("pipe: ") + std::strerror(errno);
    return -1;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    *err = std::string("fork: ") + std::strerror(errno);
    close(pfd[0]);
    close(pfd[1]);
    return -1;
  }
  if (pid == 0) {
    // A group of its own: a Ctrl-C at the terminal reaches ciuic-run, which
    // lets a setup or teardown step finish before it stops the job.
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    const int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, STDIN_FILENO);
      dup2(devnull, STDOUT_FILENO);
    }
    dup2(pfd[1], STDERR_FILENO);
    execv(path.c_str(), argv.data());
    _exit(127);
  }
  close(pfd[1]);
  err->clear();
  char buf[1024];
  for (;;) {
    const ssize_t r = read(pfd[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    err->append(buf, static_cast<size_t>(r));
  }
  close(pfd[0]);
  while (!err->empty() && (err->back() == '\n' || err->back() == ' ')) err->pop_back();
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Join(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

// ---- Simulated hosts --------------------------------------------------------

// K network namespaces ciuic-<pid>-<k> (the hosts), each with a veth
// "ciuic<k>" whose peer "v<k>" sits in ciuic-<pid>-br on the bridge
// "ciuicbr". Addresses 10.77.<pid%250>.<k+1>/24, the bridge .254. The
// bridge lives in a namespace of its own, so the root namespace's network
// is never touched; the store listens there, on the bridge address.
class SimNet {
 public:
  explicit SimNet(int hosts)
      : hosts_(hosts),
        prefix_("ciuic-" + std::to_string(getpid()) + "-"),
        subnet_("10.77." + std::to_string(getpid() % 250) + ".") {}
  ~SimNet() { Teardown(); }
  SimNet(const SimNet&) = delete;
  SimNet& operator=(const SimNet&) = delete;

  std::string HostNs(int k) const { return prefix_ + std::to_string(k); }
  const std::string& Prefix() const { return prefix_; }
  std::string Subnet() const { return subnet_ + "0/24"; }
  std::string BridgeNs() const { return prefix_ + "br"; }
  std::string HostIf(int k) const { return "ciuic" + std::to_string(k); }
  std::string HostAddr(int k) const { return subnet_ + std::to_string(k + 1); }
  std::string BridgeAddr() const { return subnet_ + "254"; }
  int HostNsFd(int k) const { return host_fds_[k]; }
  int BridgeNsFd() const { return bridge_fd_; }

  // Creates namespaces, veths, bridge, addresses and qdiscs. What was made
  // before an error is removed by Teardown(). Errors: kUnavailable /
  // kFailedPrecondition with the failing command and its message.
  Status Create(const Options& o) {
    const std::string br = BridgeNs();
    CIUIC_RETURN_IF_ERROR(AddNs(br));
    CIUIC_RETURN_IF_ERROR(Ip({"ip", "-n", br, "link", "set", "lo", "up"}));
    CIUIC_RETURN_IF_ERROR(Ip({"ip", "-n", br, "link", "add", "ciuicbr", "type", "bridge"}));
    CIUIC_RETURN_IF_ERROR(Ip({"ip", "-n", br, "addr", "add", BridgeAddr() + "/24", "dev", "ciuicbr"}));
    CIUIC_RETURN_IF_ERROR(Ip({"ip", "-n", br, "link", "set", "ciuicbr", "up"}));
    for (int k = 0; k < hosts_; ++k) {
      const std::string ns = HostNs(k), peer = "v" + std::to_string(k);
      CIUIC_RETURN_IF_ERROR(AddNs(ns));
      CIUIC_RETURN_IF_ERROR(Ip({"ip", "link", "add", HostIf(k), "netns", ns, "type", "veth", "peer", "name",
                                peer, "netns", br}));
      CIUIC_RETURN_IF_ERROR(Ip({"ip", "-n", br, "link", "set", peer, "master", "ciuicbr"}));
      CIUIC_RETURN_IF_ERROR(Ip({"ip", "-n", br, "link", "set", peer, "up"}));
      CIUIC_RETURN_IF_ERROR(Ip({"ip", "-n", ns, "link", "set", "lo", "up"}));
      CIUIC_RETURN_IF_ERROR(Ip({"ip", "-n", ns, "addr", "add", HostAddr(k) + "/24", "dev", HostIf(k)}));
      CIUIC_RETURN_IF_ERROR(Ip({"ip", "-n", ns, "link", "set", HostIf(k), "up"}));
      CIUIC_RETURN_IF_ERROR(Shape(o, k, ns, peer));
    }
    bridge_fd_ = open(("/run/netns/" + br).c_str(), O_RDONLY | O_CLOEXEC);
    if (bridge_fd_ < 0) return ciuic::UnavailableError("/run/netns/" + br + ": " + std::strerror(errno));
    for (int k = 0; k < hosts_; ++k) {
      const int fd = open(("/run/netns/" + HostNs(k)).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return ciuic::UnavailableError("/run/netns/" + HostNs(k) + ": " + std::strerror(errno));
      host_fds_.push_back(fd);
    }
    return Status();
  }

  // Removes every namespace Create made (their veths and the bridge go with
  // them). Idempotent; reports failures on stderr.
  void Teardown() {
    for (int fd : host_fds_) close(fd);
    host_fds_.clear();
    if (bridge_fd_ >= 0) close(bridge_fd_);
    bridge_fd_ = -1;
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
      std::string err;
      if (RunHelper({"ip", "netns", "del", *it}, &err) != 0) {
        Say("cannot remove network namespace " + *it + ": " + err);
      }
    }
    made_.clear();
  }

  // Removes namespaces ciuic-<pid>-* left by a ciuic-run that no longer
  // exists (killed with SIGKILL before it could clean up).
  static void RemoveStale() {
    DIR* d = opendir("/run/netns");
    if (d == nullptr) return;
    std::vector<std::string> stale;
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (!StartsWith(name, "ciuic-")) continue;
      const size_t dash = name.find('-', 6);
      long pid = 0;
      if (dash == std::string::npos || !ParseInt(name.substr(6, dash - 6), 1, 1L << 30, &pid)) continue;
      if (pid == getpid() || kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
      stale.push_back(name);
    }
    closedir(d);
    for (const std::string& name : stale) {
      std::string err;
      if (RunHelper({"ip", "netns", "del", name}, &err) == 0) {
        Say("removed stale network namespace " + name + " (its ciuic-run is gone)");
      }
    }
  }

 private:
  Status AddNs(const std::string& ns) {
    CIUIC_RETURN_IF_ERROR(Ip({"ip", "netns", "add", ns}));
    made_.push_back(ns);
    return Status();
  }

  static Status Ip(const std::vector<std::string>& args) {
    std::string err;
    const int rc = RunHelper(args, &err);
    if (rc == 0) return Status();
    return ciuic::UnavailableError("'" + Join(args) + "' failed" + (err.empty() ? "" : ": " + err));
  }

  // Rate limit (tbf) on both ends of host k's link; delay (netem) on the
  // host's end, so a message between two hosts is delayed once each way.
  Status Shape(const Options& o, int k, const std::string& ns, const std::string& peer) {
    std::vector<std::string> tbf;
    if (o.link_rate_bps != 0) {
      // Burst: 10 ms at the rate, at least a few full frames; a queue of
      // at most 50 ms before drops.
      const uint64_t burst = std::max<uint64_t>(o.link_rate_bps / 8 / 100, 16 * 1024);
      tbf = {"tbf", "rate", std::to_string(o.link_rate_bps) + "bit", "burst", std::to_string(burst),
             "latency", "50ms"};
    }
    const auto qdisc = [](const std::string& in_ns, const std::string& dev, const std::string& where,
                          const std::vector<std::string>& spec) {
      std::vector<std::string> cmd = {"tc", "-n", in_ns, "qdisc", "add", "dev", dev};
      std::istringstream w(where);
      for (std::string t; w >> t;) cmd.push_back(t);
      cmd.insert(cmd.end(), spec.begin(), spec.end());
      return cmd;
    };
    if (!o.link_delay.empty()) {
      std::string err;
      const auto cmd = qdisc(ns, HostIf(k), "root handle 1:", {"netem", "delay", o.link_delay});
      if (RunHelper(cmd, &err) != 0) {
        if (err.find("unknown") != std::string::npos || err.find("Unknown") != std::string::npos) {
          return ciuic::FailedPreconditionError(
              "--link-delay: tc netem is not available on this kernel (" + err +
              "); --link-rate (tbf) works without it");
        }
        return ciuic::UnavailableError("'" + Join(cmd) + "' failed: " + err);
      }
      if (!tbf.empty()) CIUIC_RETURN_IF_ERROR(Ip(qdisc(ns, HostIf(k), "parent 1:1 handle 10:", tbf)));
    } else if (!tbf.empty()) {
      CIUIC_RETURN_IF_ERROR(Ip(qdisc(ns, HostIf(k), "root", tbf)));
    }
    if (!tbf.empty()) CIUIC_RETURN_IF_ERROR(Ip(qdisc(BridgeNs(), peer, "root", tbf)));
    return Status();
  }

  int hosts_;
  std::string prefix_;
  std::string subnet_;
  std::vector<std::string> made_;
  std::vector<int> host_fds_;
  int bridge_fd_ = -1;
};

// Starts the store in namespace `ns_fd` (-1: this one): the listening socket
// belongs to the namespace it is created in, so this thread enters `ns_fd`
// for the Start() call and comes back.
StatusOr<std::unique_ptr<ciuic::transport::TcpStoreServer>> StartStore(const std::string& host, int ns_fd,
                                                                       const std::string& secret) {
  if (ns_fd < 0) return ciuic::transport::TcpStoreServer::Start(host, 0, secret);
  const int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (self < 0) return ciuic::UnavailableError(std::string("/proc/thread-self/ns/net: ") + std::strerror(errno));
  if (setns(ns_fd, CLONE_NEWNET) != 0) {
    const int e = errno;
    close(self);
    return ciuic::UnavailableError(std::string("setns into the bridge namespace: ") + std::strerror(e));
  }
  auto server = ciuic::transport::TcpStoreServer::Start(host, 0, secret);
  const int back = setns(self, CLONE_NEWNET);
  close(self);
  if (back != 0) return ciuic::InternalError(std::string("setns back: ") + std::strerror(errno));
  return server;
}

// ---- CPU binding ------------------------------------------------------------

// The CPUs each rank is bound to (an empty list: not bound).
std::vector<std::vector<int>> PlanBinding(const Options& o) {
  std::vector<std::vector<int>> out(o.nranks);
  if (o.bind == Bind::kNone) return out;
  // Placing CPU ranks needs cores and NUMA nodes only: hwloc's I/O
  // plugins are switched off for this discovery (faster; and the PCI
  // plugin's library state, unloaded with the plugin, reads as a leak
  // under LeakSanitizer). The user's HWLOC_COMPONENTS, if any, is kept;
  // ours is removed again before any rank's environment is built. Called
  // before any other thread exists (setenv).
  const bool own_components = std::getenv("HWLOC_COMPONENTS") == nullptr;
  if (own_components) setenv("HWLOC_COMPONENTS", "-pci,-opencl,-gl,-cuda,-nvml,-rsmi,-levelzero", 1);
  auto topo = ciuic::topology::DiscoverLive();
  if (own_components) unsetenv("HWLOC_COMPONENTS");
  if (!topo.ok()) {
    Say("cannot discover the topology (" + topo.status().ToString() + "): ranks are not bound");
    return out;
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return out;
  // The cores this process may use, each as its usable CPUs, in topology order.
  std::vector<std::vector<int>> cores;
  for (const auto& core : topo->cores) {
    std::vector<int> usable;
    for (int cpu : core.cpus) {
      if (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &allowed)) usable.push_back(cpu);
    }
    if (!usable.empty()) cores.push_back(std::move(usable));
  }
  const int ncores = static_cast<int>(cores.size());
  if (o.bind != Bind::kNuma && ncores > 0 && ncores < o.nranks) {
    // More ranks than cores: each rank on one core, neighbouring ranks
    // sharing it (rank r on core r * cores / N), so neighbours (ring and
    // recursive-doubling partners) hand over on one core; unbound, the
    // scheduler moves them about and small-call times vary from start to
    // start.
    for (int r = 0; r < o.nranks; ++r) {
      out[r] = cores[static_cast<size_t>(static_cast<int64_t>(r) * ncores / o.nranks)];
    }
    Say(std::to_string(o.nranks) + " ranks on " + std::to_string(ncores) + (ncores == 1 ? " core" : " cores") +
        ": neighbouring ranks share a core (--bind none leaves them unbound)");
    return out;
  }
  auto placement = ciuic::topology::PlaceRanks(*topo, o.nranks, {}, /*use_gpus=*/false);
  if (!placement.ok()) {
    Say("cannot place ranks (" + placement.status().ToString() + "): ranks are not bound");
    return out;
  }
  for (int r = 0; r < o.nranks; ++r) {
    const auto& p = (*placement)[r];
    std::vector<int> cpus = p.cpus;
    if (o.bind == Bind::kNuma && p.numa_node >= 0 && !topo->numa_nodes[p.numa_node].cpus.empty()) {
      cpus = topo->numa_nodes[p.numa_node].cpus;
    }
    std::vector<int> usable;
    for (int cpu : cpus) {
      if (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, &allowed)) usable.push_back(cpu);
    }
    if (usable.empty()) {
      // The placement uses CPUs this process may not (taskset, cpusets).
      Say("the placement of rank " + std::to_string(r) + " (CPUs " + ciuic::topology::FormatCpuList(cpus) +
          ") is outside this process's CPUs: ranks are not bound");
      return std::vector<std::vector<int>>(o.nranks);
    }
    out[r] = usable;
  }
  return out;
}

// ---- Ranks and their output ---------------------------------------------------

// What a child reports through its status pipe when a step before exec
// fails (fatal) or is skipped (warning). Exec success closes the pipe.
struct ChildReport {
  int32_t step;
  int32_t err;
};
enum ChildStep : int32_t {
  kStepExec = 1,
  kStepDup,
  kStepSetns,
  kStepUnshare,
  kStepHostname,
  kStepAffinity,  // warning
  kStepSysfs,     // warning: /sys still shows the root namespace's devices
};

const char* StepName(int32_t step) {
  switch (step) {
    case kStepDup: return "redirecting stdio";
    case kStepSetns: return "entering its network namespace";
    case kStepUnshare: return "unsharing its UTS/mount namespace";
    case kStepHostname: return "setting its host name";
    case kStepAffinity: return "binding to its CPUs (running unbound)";
    case kStepSysfs: return "mounting /sys of its network namespace (continuing)";
    default: return "starting";
  }
}

// Everything a child needs, prepared before fork() so that the child only
// makes system calls.
struct ChildPlan {
  std::string path;
  std::vector<char*> argv;
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  cpu_set_t cpus;
  bool bind = false;
  int netns_fd = -1;
  std::string hostname;
};

void ReportFromChild(int fd, int32_t step, int32_t err) {
  ChildReport rep{step, err};
  ssize_t w;
  do {
    w = write(fd, &rep, sizeof rep);
  } while (w < 0 && errno == EINTR);
}

// In the child after fork(): process group, death signal, stdio,
// namespaces, binding, exec. Never returns.
[[noreturn]] void ChildMain(const ChildPlan& plan, pid_t parent, int devnull, int out_w, int err_w, int status_w) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(kExitSetup);  // ciuic-run already died
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  signal(SIGPIPE, SIG_DFL);
  if (dup2(devnull, STDIN_FILENO) < 0 || dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0) {
    ReportFromChild(status_w, kStepDup, errno);
    _exit(kExitSetup);
  }
  if (plan.netns_fd >= 0) {
    if (setns(plan.netns_fd, CLONE_NEWNET) != 0) {
      ReportFromChild(status_w, kStepSetns, errno);
      _exit(kExitSetup);
    }
    if (unshare(CLONE_NEWUTS | CLONE_NEWNS) != 0) {
      ReportFromChild(status_w, kStepUnshare, errno);
      _exit(kExitSetup);
    }
    if (sethostname(plan.hostname.data(), plan.hostname.size()) != 0) {
      ReportFromChild(status_w, kStepHostname, errno);
      _exit(kExitSetup);
    }
    // As `ip netns exec` does: a /sys that shows this namespace's devices
    // (what topology discovery reads), without propagating to the host.
    if (mount(nullptr, "/", nullptr, MS_SLAVE | MS_REC, nullptr) != 0 || umount2("/sys", MNT_DETACH) != 0 ||
        mount("sysfs", "/sys", "sysfs", 0, nullptr) != 0) {
      ReportFromChild(status_w, kStepSysfs, errno);
    }
  }
  if (plan.bind && sched_setaffinity(0, sizeof plan.cpus, &plan.cpus) != 0) {
    ReportFromChild(status_w, kStepAffinity, errno);
  }
  execve(plan.path.c_str(), plan.argv.data(), plan.envp.data());
  ReportFromChild(status_w, kStepExec, errno);
  _exit(kExitCannotRun);
}

// One output pipe of one rank.
struct Stream {
  int fd = -1;
  int rank = 0;
  int dest = STDOUT_FILENO;
  std::string partial;  // bytes after the last newline
};

struct RankState {
  pid_t pid = -1;
  bool exited = false;
};

class Launcher {
 public:
  explicit Launcher(Options o) : o_(std::move(o)), ranks_(o_.net_only ? 1 : o_.nranks) {}

  int Run() {
    if (!BlockSignals()) return kExitSetup;
    // What a rank leaves behind in a session of its own comes to us when
    // the rank dies, so that it can be stopped too.
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    RaiseFdLimit();

    std::string path;
    if (const int e = ResolveProgram(o_.command[0], &path); e != 0) {
      Say("cannot run '" + o_.command[0] + "': " + std::strerror(e));
      return kExitCannotRun;
    }
    auto secret = MakeSecret();
    if (!secret.ok()) {
      Say("cannot make the job secret: " + secret.status().ToString());
      return kExitSetup;
    }

    // First, while this process has one thread (PlanBinding sets
    // environment variables).
    const std::vector<std::vector<int>> cpus = PlanBinding(o_);

    std::string store_host = "127.0.0.1";
    int store_ns = -1;
    if (o_.hosts > 0) {
      if (!HaveCapabilities({12 /*CAP_NET_ADMIN*/, 21 /*CAP_SYS_ADMIN*/})) {
        Say("--hosts " + o_.hosts_text +
            " needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network namespaces; run ciuic-run as root "
            "or drop --hosts");
        return kExitSetup;
      }
      SimNet::RemoveStale();
      net_ = std::make_unique<SimNet>(o_.hosts);
      if (Status s = net_->Create(o_); !s.ok()) {
        Say("--hosts " + o_.hosts_text + ": " + s.message());
        net_->Teardown();
        return kExitSetup;
      }
      store_host = net_->BridgeAddr();
      store_ns = net_->BridgeNsFd();
    }
    auto store = StartStore(store_host, store_ns, *secret);
    if (!store.ok()) {
      Say("cannot start the rendezvous store on " + store_host + ": " + store.status().ToString());
      return kExitSetup;
    }
    store_ = std::move(*store);
    const std::string store_addr = store_host + ":" + std::to_string(store_->port());

    const int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0) {
      Say(std::string("/dev/null: ") + std::strerror(errno));
      return kExitSetup;
    }
    int rc = 0;
    if (o_.net_only) {
      rc = StopRequested() ? 0 : Spawn(0, MakeNetOnlyPlan(path), devnull);
    }
    for (int r = 0; r < o_.nranks && rc == 0 && !o_.net_only; ++r) {
      if (StopRequested()) break;  // Ctrl-C during setup: start no more ranks
      ChildPlan plan = MakePlan(r, path, store_addr, *secret, cpus[r]);
      rc = Spawn(r, plan, devnull);
    }
    close(devnull);
    if (rc != 0) {
      cause_ = rc;
      BeginStop();
    }
    if (o_.timeout_s > 0) job_deadline_ = Clock::now() + std::chrono::microseconds(
                                              static_cast<int64_t>(o_.timeout_s * 1e6));
    Loop();
    Finish();
    return cause_;
  }

 private:
  bool BlockSignals() {
    // SIGPIPE: a closed stdout of ciuic-run must not kill it (the ranks
    // would lose their reader); children get the default back before exec.
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
    // Blocked before any thread (the store's) starts, so that no thread
    // takes these signals with the default action.
    if (sigprocmask(SIG_BLOCK, &set, nullptr) != 0) return false;
    sigfd_ = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sigfd_ < 0) {
      Say(std::string("signalfd: ") + std::strerror(errno));
      return false;
    }
    return true;
  }

  // True when SIGINT, SIGTERM or SIGHUP is pending (the loop handles it).
  static bool StopRequested() {
    sigset_t pending;
    sigemptyset(&pending);
    if (sigpending(&pending) != 0) return false;
    return sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1 ||
           sigismember(&pending, SIGHUP) == 1;
  }

  void RaiseFdLimit() {
    rlimit lim;
    const rlim_t need = 2 * static_cast<rlim_t>(o_.nranks) + 64;
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < need) {
      lim.rlim_cur = std::min(need, lim.rlim_max);
      setrlimit(RLIMIT_NOFILE, &lim);
    }
  }

  ChildPlan MakePlan(int r, const std::string& path, const std::string& store_addr, const std::string& secret,
                     const std::vector<int>& cpus) {
    ChildPlan plan;
    plan.path = path;
    for (const std::string& a : o_.command) plan.argv.push_back(const_cast<char*>(a.c_str()));
    plan.argv.push_back(nullptr);
    // Variables ciuic-run defines replace inherited ones; CIUIC_SECRET_FILE
    // goes too, since DiscoverJob refuses both secret knobs at once.
    static const char* const kOwned[] = {"CIUIC_RANK=",           "CIUIC_WORLD_SIZE=", "CIUIC_LOCAL_RANK=",
                                         "CIUIC_STORE_ADDR=",     "CIUIC_STORE_EXTERNAL=",
                                         "CIUIC_SECRET=",         "CIUIC_SECRET_FILE="};
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      const std::string var = *e;
      bool owned = false;
      for (const char* k : kOwned) owned |= StartsWith(var, k);
      owned |= !o_.transport.empty() && StartsWith(var, "CIUIC_TRANSPORT=");
      owned |= o_.hosts > 0 && StartsWith(var, "CIUIC_SOCKET_IFNAME=");
      if (!owned) plan.env_storage.push_back(var);
    }
    int local_rank = r;
    int host = -1;
    if (!o_.host_sizes.empty()) {
      host = 0;
      int first = 0;  // the lowest rank on this host
      while (r >= first + o_.host_sizes[static_cast<size_t>(host)]) first += o_.host_sizes[static_cast<size_t>(host++)];
      local_rank = r - first;
    } else if (o_.hosts > 0) {
      host = static_cast<int>(static_cast<int64_t>(r) * o_.hosts / o_.nranks);
      int first = 0;  // the lowest rank on this host
      while (static_cast<int64_t>(first) * o_.hosts / o_.nranks < host) ++first;
      local_rank = r - first;
    }
    plan.env_storage.push_back("CIUIC_RANK=" + std::to_string(r));
    plan.env_storage.push_back("CIUIC_WORLD_SIZE=" + std::to_string(o_.nranks));
    plan.env_storage.push_back("CIUIC_LOCAL_RANK=" + std::to_string(local_rank));
    plan.env_storage.push_back("CIUIC_STORE_ADDR=" + store_addr);
    plan.env_storage.push_back("CIUIC_STORE_EXTERNAL=1");
    plan.env_storage.push_back("CIUIC_SECRET=" + secret);
    if (!o_.transport.empty()) plan.env_storage.push_back("CIUIC_TRANSPORT=" + o_.transport);
    if (host >= 0) {
      plan.env_storage.push_back("CIUIC_SOCKET_IFNAME=" + net_->HostIf(host));
      plan.netns_fd = net_->HostNsFd(host);
      plan.hostname = "ciuic-host" + std::to_string(host);
    }
    for (std::string& v : plan.env_storage) plan.envp.push_back(v.data());
    plan.envp.push_back(nullptr);
    CPU_ZERO(&plan.cpus);
    for (int cpu : cpus) CPU_SET(cpu, &plan.cpus);
    plan.bind = !cpus.empty();
    return plan;
  }

  // --net-only: the command once, in the bridge's namespace, told where the
  // hosts are; unbound, with a host name no host has (so a launcher treats
  // every simulated host as remote).
  ChildPlan MakeNetOnlyPlan(const std::string& path) {
    ChildPlan plan;
    plan.path = path;
    for (const std::string& a : o_.command) plan.argv.push_back(const_cast<char*>(a.c_str()));
    plan.argv.push_back(nullptr);
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      if (!StartsWith(*e, "CIUIC_SIM_")) plan.env_storage.emplace_back(*e);
    }
    std::string hosts;
    for (int k = 0; k < o_.hosts; ++k) {
      int ranks = 0;
      if (!o_.host_sizes.empty()) {
        ranks = o_.host_sizes[static_cast<size_t>(k)];
      } else {
        for (int r = 0; r < o_.nranks; ++r) ranks += static_cast<int64_t>(r) * o_.hosts / o_.nranks == k ? 1 : 0;
      }
      hosts += (k > 0 ? "," : "") + std::string("ciuic-host") + std::to_string(k) + ":" + std::to_string(ranks);
    }
    plan.env_storage.push_back("CIUIC_SIM_NS_PREFIX=" + net_->Prefix());
    plan.env_storage.push_back("CIUIC_SIM_SUBNET=" + net_->Subnet());
    plan.env_storage.push_back("CIUIC_SIM_HOSTS=" + hosts);
    for (std::string& v : plan.env_storage) plan.envp.push_back(v.data());
    plan.envp.push_back(nullptr);
    CPU_ZERO(&plan.cpus);
    plan.netns_fd = net_->BridgeNsFd();
    plan.hostname = "ciuic-bridge";
    return plan;
  }

  // Starts rank r. Returns 0, or the exit status for a failure to start it
  // (127: cannot execute; 1: a setup step failed), after saying why.
  int Spawn(int r, const ChildPlan& plan, int devnull) {
    int out[2], err[2], status[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(status, O_CLOEXEC) != 0) {
      Say("rank " + std::to_string(r) + ": pipe: " + std::strerror(errno));
      return kExitSetup;
    }
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
      Say("rank " + std::to_string(r) + ": fork: " + std::strerror(errno));
      for (int fd : {out[0], out[1], err[0], err[1], status[0], status[1]}) close(fd);
      return kExitSetup;
    }
    if (pid == 0) ChildMain(plan, parent, devnull, out[1], err[1], status[1]);
    setpgid(pid, pid);  // also here, so that it holds before we signal it
    ranks_[r].pid = pid;
    close(out[1]);
    close(err[1]);
    close(status[1]);
    for (auto [fd, dest] : {std::pair{out[0], STDOUT_FILENO}, std::pair{err[0], STDERR_FILENO}}) {
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
      Stream s;
      s.fd = fd;
      s.rank = r;
      s.dest = dest;
      streams_.push_back(std::move(s));
    }
    // Wait for exec (EOF) or a report of what failed before it.
    int result = 0;
    for (;;) {
      ChildReport rep;
      const ssize_t n = read(status[0], &rep, sizeof rep);
      if (n < 0 && errno == EINTR) continue;
      if (n != static_cast<ssize_t>(sizeof rep)) break;
      if (rep.step == kStepExec) {
        Say("cannot run '" + o_.command[0] + "': " + std::strerror(rep.err));
        result = kExitCannotRun;
      } else if (rep.step == kStepAffinity || rep.step == kStepSysfs) {
        if (!warned_[rep.step]) Say("rank " + std::to_string(r) + ": " + StepName(rep.step) + ": " +
                                    std::strerror(rep.err));
        warned_[rep.step] = true;
      } else {
        Say("rank " + std::to_string(r) + ": " + StepName(rep.step) + " failed: " + std::strerror(rep.err));
        result = kExitSetup;
      }
    }
    close(status[0]);
    if (result != 0) ranks_[r].exited = true;  // not a rank failure to report
    return result;
  }

  // Children of ours that are not ranks: what a rank started and left
  // behind in a session of its own (setsid), reparented to us because
  // ciuic-run is a child subreaper. Their pids are safe to signal: a child
  // keeps its pid until we reap it.
  std::vector<pid_t> Orphans() const {
    std::vector<pid_t> out;
    DIR* d = opendir("/proc");
    if (d == nullptr) return out;
    const pid_t self = getpid();
    while (dirent* e = readdir(d)) {
      long pid = 0;
      if (!ParseInt(e->d_name, 1, 1L << 30, &pid)) continue;
      std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
      std::string stat;
      std::getline(in, stat);
      const size_t paren = stat.rfind(')');  // the name may hold spaces and ')'
      if (paren == std::string::npos || paren + 4 > stat.size()) continue;
      const long ppid = std::strtol(stat.c_str() + paren + 4, nullptr, 10);
      if (ppid != self) continue;
      bool rank = false;
      for (const RankState& r : ranks_) rank |= r.pid == pid;
      if (!rank) out.push_back(static_cast<pid_t>(pid));
    }
    closedir(d);
    return out;
  }

  void SignalGroups(int sig) {
    for (const RankState& r : ranks_) {
      if (r.pid > 0) killpg(r.pid, sig);
    }
    for (pid_t pid : Orphans()) kill(pid, sig);
  }

  void BeginStop() {
    if (phase_ != Phase::kRunning) return;
    phase_ = Phase::kTerm;
    SignalGroups(SIGTERM);
    phase_deadline_ = Clock::now() + kTermGrace;
  }

  void Escalate() {
    phase_ = Phase::kKill;
    SignalGroups(SIGKILL);
    phase_deadline_ = Clock::now() + kKillGrace;
  }

  // Forwards complete lines of `s` (all of it at EOF) with the rank prefix.
  void Emit(Stream& s, bool eof) {
    std::string out;
    const std::string prefix = "[" + std::to_string(s.rank) + "] ";
    size_t start = 0;
    for (;;) {
      const size_t nl = s.partial.find('\n', start);
      if (nl == std::string::npos) break;
      out += prefix;
      out.append(s.partial, start, nl + 1 - start);
      start = nl + 1;
    }
    s.partial.erase(0, start);
    if (!s.partial.empty() && (eof || s.partial.size() >= kMaxLine)) {
      out += prefix + s.partial + "\n";
      s.partial.clear();
    }
    if (!out.empty() && !dest_broken_[s.dest]) {
      if (!WriteAll(s.dest, out.data(), out.size())) {
        dest_broken_[s.dest] = true;
        // The reader went away (`ciuic-run ... | head`): end the job as a
        // plain writer would end, by SIGPIPE, instead of draining forever.
        if (errno == EPIPE && phase_ == Phase::kRunning) {
          if (cause_ == 0) cause_ = 128 + SIGPIPE;
          BeginStop();
        }
      }
    }
  }

  // Reads what `s` has now, at most `max_reads` buffers (so that one rank
  // writing without pause cannot starve the others); closes it at EOF.
  // Returns true at EOF.
  bool Drain(Stream& s, int max_reads) {
    char buf[65536];
    for (int reads = 0; reads < max_reads;) {
      const ssize_t n = read(s.fd, buf, sizeof buf);
      if (n > 0) {
        s.partial.append(buf, static_cast<size_t>(n));
        Emit(s, false);
        ++reads;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return false;
      Emit(s, true);  // EOF (or an error: treat as the end)
      close(s.fd);
      s.fd = -1;
      return true;
    }
    return false;
  }

  // Notes every rank that has exited (without reaping it).
  void CheckRanks() {
    for (size_t r = 0; r < ranks_.size(); ++r) {
      RankState& rank = ranks_[r];
      if (rank.pid <= 0 || rank.exited) continue;
      siginfo_t info;
      std::memset(&info, 0, sizeof info);
      if (waitid(P_PID, static_cast<id_t>(rank.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) continue;
      if (info.si_pid != rank.pid) continue;
      rank.exited = true;
      const bool killed = info.si_code == CLD_KILLED || info.si_code == CLD_DUMPED;
      if ((killed || info.si_status != 0) && phase_ == Phase::kRunning) {
        // Its last words first, then why the job stops.
        for (Stream& s : streams_) {
          if (s.rank == static_cast<int>(r) && s.fd >= 0) Drain(s, kFinalReads);
        }
        const std::string going = o_.keep_going ? " (--keep-going: the others run on)" : "";
        if (killed) {
          Say("rank " + std::to_string(r) + " killed by signal " + SignalName(info.si_status) + going);
        } else {
          Say("rank " + std::to_string(r) + " exited with status " + std::to_string(info.si_status) + going);
        }
        if (cause_ == 0) cause_ = killed ? 128 + info.si_status : info.si_status;  // the first failure's
        if (!o_.keep_going) BeginStop();
      }
    }
  }

  void OnSignals() {
    signalfd_siginfo si;
    while (read(sigfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
      const int sig = static_cast<int>(si.ssi_signo);
      if (sig == SIGCHLD) continue;  // CheckRanks() runs after every wakeup
      if (phase_ == Phase::kRunning) {
        Say(SignalName(sig) + " received: stopping " + std::to_string(ranks_.size()) +
            (ranks_.size() == 1 ? " rank" : " ranks"));
        if (cause_ == 0) cause_ = 128 + sig;
        BeginStop();
      } else if (phase_ == Phase::kTerm) {
        Escalate();  // asked twice: do not wait for the grace period
      }
    }
  }

  bool AllExited() const {
    for (const RankState& r : ranks_) {
      if (r.pid > 0 && !r.exited) return false;  // pid -1: never started
    }
    return true;
  }

  void Loop() {
    std::vector<pollfd> fds;
    std::vector<Stream*> owners;
    bool lingering = false;
    for (;;) {
      CheckRanks();
      const bool exited = AllExited();
      size_t open = 0;
      for (const Stream& s : streams_) open += s.fd >= 0;
      if (exited && open == 0) {
        OnSignals();  // a Ctrl-C that came before any rank started still counts
        return;
      }

      const auto now = Clock::now();
      if (phase_ == Phase::kRunning && job_deadline_ && now >= *job_deadline_) {
        Say("timeout: the job ran longer than --timeout " + FormatSeconds(o_.timeout_s) + " s; stopping it");
        if (cause_ == 0) cause_ = kExitTimeout;
        BeginStop();
      }
      if (exited && phase_ == Phase::kRunning) {
        // Every rank is gone but something it started still holds a pipe.
        if (!lingering) {
          lingering = true;
          phase_deadline_ = now + kLinger;
        } else if (now >= phase_deadline_) {
          BeginStop();
        }
      } else if (phase_ == Phase::kTerm && now >= phase_deadline_) {
        Escalate();
      } else if (phase_ == Phase::kKill && now >= phase_deadline_) {
        // Only a process that left the rank's group can hold the pipes now.
        for (Stream& s : streams_) {
          if (s.fd < 0) continue;
          Emit(s, true);
          close(s.fd);
          s.fd = -1;
        }
        if (exited) return;
        phase_deadline_ = now + kKillGrace;
      }

      fds.clear();
      owners.clear();
      fds.push_back({sigfd_, POLLIN, 0});
      owners.push_back(nullptr);
      for (Stream& s : streams_) {
        if (s.fd < 0) continue;
        fds.push_back({s.fd, POLLIN, 0});
        owners.push_back(&s);
      }
      std::optional<Clock::time_point> wake;
      if (phase_ != Phase::kRunning || lingering) wake = phase_deadline_;
      if (phase_ == Phase::kRunning && job_deadline_ && (!wake || *job_deadline_ < *wake)) wake = job_deadline_;
      int timeout_ms = -1;
      if (wake) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*wake - Clock::now()).count();
        timeout_ms = static_cast<int>(std::clamp<int64_t>(left + 1, 0, 60000));
      }
      const int n = poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0 && errno != EINTR) {
        Say(std::string("poll: ") + std::strerror(errno));
        cause_ = cause_ != 0 ? cause_ : kExitSetup;
        BeginStop();
        Escalate();
        return;
      }
      if (n <= 0) continue;
      if (fds[0].revents != 0) OnSignals();
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) Drain(*owners[i], 1);
      }
    }
  }

  // Stops whatever is left in the ranks' groups, reaps the ranks and
  // removes the simulated network.
  void Finish() {
    SignalGroups(SIGKILL);
    for (RankState& r : ranks_) {
      if (r.pid <= 0) continue;
      while (waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    // Now every rank is gone, whatever they left is ours: kill and reap it
    // (a killed orphan's own children come to us in turn).
    for (int round = 0; round < 100; ++round) {
      const std::vector<pid_t> orphans = Orphans();
      if (orphans.empty()) break;
      for (pid_t pid : orphans) {
        kill(pid, SIGKILL);
        while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
        }
      }
    }
    for (Stream& s : streams_) {
      if (s.fd >= 0) {
        Emit(s, true);
        close(s.fd);
        s.fd = -1;
      }
    }
    store_.reset();
    if (net_) net_->Teardown();
  }

  static std::string FormatSeconds(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", s);
    return buf;
  }

  enum class Phase { kRunning, kTerm, kKill };

  Options o_;
  std::vector<RankState> ranks_;
  std::vector<Stream> streams_;
  std::unique_ptr<SimNet> net_;
  std::unique_ptr<ciuic::transport::TcpStoreServer> store_;
  int sigfd_ = -1;
  int cause_ = 0;  // the exit status; the first cause wins
  Phase phase_ = Phase::kRunning;
  Clock::time_point phase_deadline_;
  std::optional<Clock::time_point> job_deadline_;
  bool dest_broken_[3] = {false, false, false};
  bool warned_[16] = {};
};

}  // namespace

int main(int argc, char** argv) {
  auto options = ParseArgs(argc, argv);
  if (!options.ok()) {
    Say(options.status().message());
    Say("see ciuic-run --help");
    return kExitUsage;
  }
  if (options->help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Launcher launcher(std::move(*options));
  return launcher.Run();
}
