// Build identity: version, git revision and the options ciuic was built with.
#ifndef CIUIC_COMMON_VERSION_H_
#define CIUIC_COMMON_VERSION_H_

namespace ciuic {
const char* Version();        // "0.1.0"
const char* GitRevision();    // short hash, "+dirty" when built from a modified tree
const char* BuildOptions();   // "hwloc=ON verbs=ON cuda=ON nccl=ON sanitize=..."
}  // namespace ciuic

#endif  // CIUIC_COMMON_VERSION_H_
