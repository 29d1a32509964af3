// Private: the whole transport layer's internal interface (bootstrap,
// backends, pools, links), for the layers above and the tests.
#ifndef CIUIC_TRANSPORT_TRANSPORT_H_
#define CIUIC_TRANSPORT_TRANSPORT_H_

#include "ciuic/store.h"
#include "transport/backend.h"
#include "transport/bootstrap.h"
#include "transport/link.h"
#include "transport/pool.h"

#endif  // CIUIC_TRANSPORT_TRANSPORT_H_
