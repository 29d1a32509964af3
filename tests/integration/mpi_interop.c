/* ciuic beside MPI (include/ciuic/ciuic_mpi.h) under Open MPI's mpirun: a
 * ciuic communicator made from MPI_COMM_WORLD and one from an
 * MPI_Comm_split of it, with the MPI ranks and sizes; the same buffers
 * reduced by both libraries give the same results; an MPI call that fails
 * is a ciuic error naming it. Prints "ciuic beside mpi: ok" per rank. */
#include <mpi.h>
#include <ciuic/ciuic_mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "c_checks.h"

/* Both libraries reduce the same input; small integers, exact in float. */
static int SameSums(MPI_Comm mpi, ciuic_comm_t comm, int salt) {
  enum { kCount = 70001 };
  static float in[kCount], by_mpi[kCount], by_ciuic[kCount];
  int rank, n, crank, cn;
  MPI_Comm_rank(mpi, &rank);
  MPI_Comm_size(mpi, &n);
  CHECK(ciuic_comm_rank(comm, &crank));
  CHECK(ciuic_comm_size(comm, &cn));
  EXPECT(crank == rank && cn == n, "ciuic rank %d of %d, MPI rank %d of %d", crank, cn, rank, n);
  for (int i = 0; i < kCount; ++i) in[i] = (float)((g_rank * 7 + i + salt) % 13);
  MPI_Allreduce(in, by_mpi, kCount, MPI_FLOAT, MPI_SUM, mpi);
  CHECK(ciuic_allreduce(in, by_ciuic, kCount, CIUIC_FLOAT32, CIUIC_SUM, comm));
  EXPECT(memcmp(by_mpi, by_ciuic, sizeof(by_mpi)) == 0, "MPI_Allreduce and ciuic_allreduce differ");
  return 0;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int n;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);

  ciuic_comm_t world;
  CHECK(ciuic_comm_init_from_mpi(MPI_COMM_WORLD, &world));
  if (SameSums(MPI_COMM_WORLD, world, 0) != 0) return 1;

  /* From an MPI sub-communicator: the odd and even world ranks apart. */
  MPI_Comm parity;
  MPI_Comm_split(MPI_COMM_WORLD, g_rank % 2, g_rank, &parity);
  ciuic_comm_t half;
  CHECK(ciuic_comm_init_from_mpi(parity, &half));
  if (SameSums(parity, half, 5) != 0) return 1;
  /* ...and the same split made by ciuic from its world communicator. */
  ciuic_comm_t split;
  CHECK(ciuic_comm_split(world, g_rank % 2, g_rank, &split));
  if (SameSums(parity, split, 9) != 0) return 1;

  /* An MPI call that fails is a ciuic error naming it (MPI set to return
   * errors rather than abort). */
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  ciuic_comm_t none = NULL;
  ciuic_status_t s = ciuic_comm_init_from_mpi(MPI_COMM_NULL, &none);
  EXPECT(s == CIUIC_ERROR_UNAVAILABLE && strstr(ciuic_last_error(), "MPI_Comm_rank failed") != NULL && none == NULL,
         "on MPI_COMM_NULL: %s: %s", ciuic_status_string(s), ciuic_last_error());

  CHECK(ciuic_comm_destroy(split));
  CHECK(ciuic_comm_destroy(half));
  CHECK(ciuic_comm_destroy(world));
  MPI_Comm_free(&parity);
  printf("rank %d of %d: ciuic beside mpi: ok\n", g_rank, n);
  MPI_Finalize();
  return 0;
}
