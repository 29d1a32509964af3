// ciuic C++ API, all of it: the communicator and fusion buckets
// (collectives.h), the store interface a framework implements to bring its
// own rendezvous (store.h), knobs (config.h), errors (status.h), local
// reductions (kernels.h) and the machine's topology (topology.h). The C ABI
// (ciuic.h) wraps the same core.
#ifndef CIUIC_CIUIC_HPP_
#define CIUIC_CIUIC_HPP_

#include "ciuic/ciuic.h"
#include "ciuic/collectives.h"
#include "ciuic/config.h"
#include "ciuic/kernels.h"
#include "ciuic/status.h"
#include "ciuic/store.h"
#include "ciuic/topology.h"

#endif  // CIUIC_CIUIC_HPP_
