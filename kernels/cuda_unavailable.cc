// ciuic_reduce_local_cuda in a build without CUDA (CIUIC_WITH_CUDA=OFF or no
// nvcc): a clear UNIMPLEMENTED error, never a crash.
#include "ciuic/ciuic.h"
#include "common/c_api.h"

extern "C" ciuic_status_t ciuic_reduce_local_cuda(void*, const void* const*, int, size_t,
                                                  ciuic_datatype_t, ciuic_redop_t, void*) {
  return ciuic::ToCStatus(ciuic::UnimplementedError(
      "ciuic_reduce_local_cuda: this ciuic was built without CUDA (CIUIC_WITH_CUDA)"));
}
