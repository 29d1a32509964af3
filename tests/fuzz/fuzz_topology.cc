// Topology inputs: hwloc XML (CIUIC_TOPO_FILE) and CPU lists (sysfs,
// CIUIC_PROGRESS_CPU). A parsed CPU list formats and parses to itself.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <cstdlib>
#include <vector>

#include "ciuic/topology.h"
#include "fuzz_check.h"
#include "topology/internal.h"

namespace topo = ciuic::topology;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // hwloc's plugins leak in their own init (see .ci/run); XML needs none.
  setenv("HWLOC_COMPONENTS", "-pci,-opencl,-gl", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string s = FuzzText(data, size);
  if (auto list = topo::ParseCpuList(s); list.ok()) {
    auto again = topo::ParseCpuList(topo::FormatCpuList(*list));
    FUZZ_CHECK(again.ok());
    std::vector<int> sorted = *list;
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    FUZZ_CHECK(*again == sorted);
  }
  std::vector<int> cpus;
  if (topo::internal::ParseCpuList(s, &cpus)) {
    for (int c : cpus) FUZZ_CHECK(c >= 0 && c <= (1 << 20));
  }
  if (size > 0 && data[0] == '<') {
    // Through the file path CIUIC_TOPO_FILE takes, whose trial parse in a
    // child keeps hwloc's own crashes on malformed XML (tests/fuzz/README.md)
    // from the caller: what crashes here is ciuic's (the Builder over what
    // hwloc accepted), or the guard.
    static const struct TempFile {
      std::string path = "/tmp/ciuic-fuzz-topology-" + std::to_string(getpid()) + ".xml";
      ~TempFile() { std::remove(path.c_str()); }
    } temp;
    const std::string& path = temp.path;
    FILE* f = std::fopen(path.c_str(), "wb");
    FUZZ_CHECK(f != nullptr && std::fwrite(data, 1, size, f) == size);
    std::fclose(f);
    auto t = topo::LoadXmlFile(path);
    if (!t.ok()) {
      const auto code = t.status().code();
      FUZZ_CHECK(code == ciuic::StatusCode::kDataLoss || code == ciuic::StatusCode::kUnimplemented ||
                 code == ciuic::StatusCode::kInvalidArgument || code == ciuic::StatusCode::kDeadlineExceeded);
    } else {
      (void)t->Summary();
    }
  }
  return 0;
}
