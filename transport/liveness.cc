// Liveness of peer processes on this host, read from /proc (see
// transport.h: ProcessIdentity, ProcessGone).
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "transport/transport.h"

namespace ciuic::transport {

namespace {

std::string ReadLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string PidNamespace() {
  char buf[128];
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// State (field 3) and start time (field 22, clock ticks since boot) of
// /proc/<pid>/stat; false when the process does not exist.
bool ReadStat(const std::string& pid, char* state, std::string* start) {
  const std::string line = ReadLine("/proc/" + pid + "/stat");
  const size_t paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos) return false;
  std::istringstream rest(line.substr(paren + 1));
  std::string field;
  rest >> *state;
  for (int f = 4; f <= 22 && rest >> field; ++f) {
    if (f == 22) *start = field;
  }
  return !start->empty();
}

}  // namespace

std::string ProcessIdentity() {
  const std::string pid = std::to_string(getpid());
  char state = 0;
  std::string start;
  ReadStat(pid, &state, &start);
  const std::string boot = ReadLine("/proc/sys/kernel/random/boot_id");
  const std::string ns = PidNamespace();
  if (boot.empty() || ns.empty() || start.empty()) return "";  // no /proc: nothing to tell peers
  return boot + " " + ns + " " + pid + " " + start;
}

bool ProcessGone(const std::string& identity) {
  std::istringstream in(identity);
  std::string boot, ns, pid, start;
  if (!(in >> boot >> ns >> pid >> start)) return false;
  if (boot != ReadLine("/proc/sys/kernel/random/boot_id") || ns != PidNamespace()) return false;  // elsewhere
  char state = 0;
  std::string now_start;
  if (!ReadStat(pid, &state, &now_start)) return true;  // no such process
  return now_start != start || state == 'Z' || state == 'X';  // another process now, or exited
}

}  // namespace ciuic::transport
