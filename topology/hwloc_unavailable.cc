// Builds without hwloc (CIUIC_WITH_HWLOC=OFF): the live machine comes from
// /sys (see LoadSysfs), and saved XML topologies cannot be read.
#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "ciuic/topology.h"
#include "common/log.h"
#include "topology/internal.h"

namespace ciuic {
namespace topology {

bool HaveHwloc() { return false; }

StatusOr<Topology> DiscoverLive() {
  StatusOr<Topology> t = LoadSysfs("/");
  if (t.ok()) CIUIC_LOG(kInfo, "topology (sysfs, no hwloc): %s", t->Summary().c_str());
  return t;
}

StatusOr<Topology> LoadXmlString(const std::string& /*xml*/, const std::string& name) {
  return UnimplementedError(name +
                            ": reading hwloc XML needs hwloc; this build has CIUIC_WITH_HWLOC=OFF "
                            "(install libhwloc-dev and reconfigure)");
}

StatusOr<Topology> LoadXmlFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return NotFoundError("topology file " + path + ": " + std::strerror(errno));
  }
  return LoadXmlString("", "topology file " + path);
}

}  // namespace topology
}  // namespace ciuic
