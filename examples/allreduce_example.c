/* The README's example of the C API: every rank runs this program (started
 * by ciuic-run, mpirun or srun; or by hand with CIUIC_RANK, CIUIC_WORLD_SIZE
 * and CIUIC_STORE_ADDR set). The tests compile and run it, so it cannot rot.
 * Exits 0 when every result is right. */
#include <ciuic/ciuic.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                  \
  do {                                                                               \
    ciuic_status_t s_ = (call);                                                      \
    if (s_ != CIUIC_SUCCESS) {                                                       \
      fprintf(stderr, "%s failed: %s: %s\n", #call, ciuic_status_string(s_), ciuic_last_error()); \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

int main(void) {
  ciuic_comm_t comm;
  CHECK(ciuic_comm_init_from_env(&comm));
  int rank, size;
  CHECK(ciuic_comm_rank(comm, &rank));
  CHECK(ciuic_comm_size(comm, &size));

  /* Blocking all-reduce, in place. */
  enum { N = 1 << 20 };
  float* grad = malloc(N * sizeof(float));
  for (int i = 0; i < N; ++i) grad[i] = (float)(rank + 1);
  CHECK(ciuic_allreduce(grad, grad, N, CIUIC_FLOAT32, CIUIC_SUM, comm));
  const float expect = (float)size * (size + 1) / 2;

  /* Async all-reduce: the progress thread communicates while we compute. */
  float* more = malloc(N * sizeof(float));
  for (int i = 0; i < N; ++i) more[i] = 1.0f;
  ciuic_request_t req;
  CHECK(ciuic_iallreduce(more, more, N, CIUIC_FLOAT32, CIUIC_SUM, comm, &req));
  double work = 0;
  for (int i = 0; i < 10000000; ++i) work += i * 1e-9; /* overlapped computation */
  CHECK(ciuic_wait(req));

  /* Fusion: many small tensors packed into few all-reduces. */
  ciuic_bucket_t bucket;
  CHECK(ciuic_bucket_create(comm, CIUIC_FLOAT32, CIUIC_AVG, 0, &bucket));
  float small[64][100];
  for (int t = 0; t < 64; ++t) {
    for (int i = 0; i < 100; ++i) small[t][i] = (float)rank;
    CHECK(ciuic_bucket_add(bucket, small[t], 100));
  }
  CHECK(ciuic_bucket_wait(bucket)); /* results are back in small[][] */
  CHECK(ciuic_bucket_destroy(bucket));

  int wrong = 0;
  for (int i = 0; i < N; ++i) wrong += grad[i] != expect || more[i] != (float)size;
  for (int t = 0; t < 64; ++t) wrong += small[t][7] != (float)(size - 1) / 2;
  if (rank == 0) printf("ranks %d: %s (work %.1f)\n", size, wrong ? "WRONG" : "ok", work);
  free(grad);
  free(more);
  CHECK(ciuic_comm_destroy(comm));
  return wrong != 0;
}
