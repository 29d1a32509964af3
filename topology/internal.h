// Helpers shared by the loaders of topology/ (private to this folder).
#ifndef CIUIC_TOPOLOGY_INTERNAL_H_
#define CIUIC_TOPOLOGY_INTERNAL_H_

#include <string>
#include <vector>

#include "ciuic/topology.h"

namespace ciuic {
namespace topology {
namespace internal {

// Parses a Linux cpulist ("0-3,8,10-11"); false on bad syntax.
bool ParseCpuList(const std::string& text, std::vector<int>* out);

// The whole file, or false when it cannot be read.
bool ReadFileToString(const std::string& path, std::string* out);
// The first line without its newline ("" when unreadable).
std::string ReadLine(const std::string& path);

// True for "0000:17:00.0" (domain:bus:device.function).
bool IsPciBusId(const std::string& text);

// Natural order ("mlx5_2" < "mlx5_10").
bool NaturalLess(const std::string& a, const std::string& b);

// Adds the verbs devices of <root>/sys/class/infiniband that `topo` does
// not list yet (virtual ones such as rxe0/siw0 have no PCI device; their
// "parent" netdev gives them the netdev's locality). Merges a netdev-only
// NIC into the verbs device that runs over it.
void AddSysfsVerbsDevices(const std::string& root, Topology* topo);

// Sorts NICs and GPUs, fills defaults (caches, package/NUMA back references)
// and checks the result. Errors: kInternal when a loader built a bad value.
Status Finish(Topology* topo);

}  // namespace internal
}  // namespace topology
}  // namespace ciuic

#endif  // CIUIC_TOPOLOGY_INTERNAL_H_
