// Helpers for the topology tests.
#ifndef CIUIC_TESTS_UNIT_TOPOLOGY_TEST_UTIL_H_
#define CIUIC_TESTS_UNIT_TOPOLOGY_TEST_UTIL_H_

#include <string>
#include <vector>

#include "ciuic/topology.h"

namespace ciuic::topology::topo_test {

inline std::string FixturePath(const std::string& name) {
  return std::string(CIUIC_TOPO_FIXTURES) + "/" + name;
}

// Index of the NIC named `name` (the test fails on -1 through the caller).
inline int Nic(const Topology& t, const std::string& name) { return t.FindNic(name); }

inline std::vector<std::string> NicNames(const Topology& t, const std::vector<int>& idx) {
  std::vector<std::string> out;
  for (int i : idx) out.push_back(i >= 0 && i < static_cast<int>(t.nics.size()) ? t.nics[i].name : "?");
  return out;
}

}  // namespace ciuic::topology::topo_test

#define CIUIC_SKIP_WITHOUT_HWLOC()                                                            \
  do {                                                                                        \
    if (!::ciuic::topology::HaveHwloc())                                                      \
      GTEST_SKIP() << "built with CIUIC_WITH_HWLOC=OFF: hwloc XML fixtures cannot be read";   \
  } while (0)

#endif  // CIUIC_TESTS_UNIT_TOPOLOGY_TEST_UTIL_H_
