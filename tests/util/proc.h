// /proc helpers for tests that check a launcher leaves no process behind.
#ifndef CIUIC_TESTS_UTIL_PROC_H_
#define CIUIC_TESTS_UTIL_PROC_H_

#include <dirent.h>
#include <sys/types.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace ciuic::testing {

// The pids whose parent is `parent` (read from /proc/<pid>/stat).
inline std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    std::getline(stat, text);
    const size_t paren = text.rfind(')');  // the command name may hold spaces
    if (paren == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(text.c_str() + paren + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) {
      out.push_back(pid);
    }
  }
  closedir(d);
  return out;
}

}  // namespace ciuic::testing

#endif  // CIUIC_TESTS_UTIL_PROC_H_
