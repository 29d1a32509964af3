// Built without PMIx (CIUIC_WITH_PMIX=OFF or libpmix-dev missing): the
// launcher's PMIx server is not used; rank and size come from the other
// launcher variables and the store from CIUIC_STORE_ADDR.
#include "transport/pmix.h"

namespace ciuic::transport::pmix {
namespace {
Status NotBuilt() {
  return UnimplementedError("ciuic was built without PMIx (CIUIC_WITH_PMIX; apt-get install libpmix-dev)");
}
}  // namespace

bool Available() { return false; }

StatusOr<Identity> Discover(const Lookup&) { return NotBuilt(); }

StatusOr<std::unique_ptr<TcpStoreServer>> Rendezvous(JobInfo*, const std::string&) { return NotBuilt(); }

}  // namespace ciuic::transport::pmix
