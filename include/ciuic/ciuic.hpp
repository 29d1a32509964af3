// ciuic C++ API: the same core as the C ABI (ciuic.h), with Status/StatusOr
// errors. This header grows with the layers: today the kernels
// (ciuic::kernels::Reducer) and the topology (ciuic::topology).
#ifndef CIUIC_CIUIC_HPP_
#define CIUIC_CIUIC_HPP_

#include "ciuic/ciuic.h"
#include "ciuic/config.h"
#include "ciuic/kernels.h"
#include "ciuic/status.h"
#include "ciuic/topology.h"

#endif  // CIUIC_CIUIC_HPP_
