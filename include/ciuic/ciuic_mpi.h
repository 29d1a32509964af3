/* ciuic beside MPI: a ciuic communicator with the ranks of an MPI
 * communicator. Header-only, so libciuic has no MPI dependency: include it
 * after <mpi.h> in a program built with the MPI compiler wrapper (mpicc,
 * mpicxx) and linked with libciuic.
 *
 *   MPI_Init(&argc, &argv);
 *   ciuic_comm_t comm;
 *   if (ciuic_comm_init_from_mpi(MPI_COMM_WORLD, &comm) != CIUIC_SUCCESS)
 *     fprintf(stderr, "%s\n", ciuic_last_error());
 *
 * Rank and size are the MPI communicator's. Its rank 0 makes a unique id
 * (ciuic_get_unique_id: the store in that process and a fresh secret) and
 * broadcasts it with MPI_Bcast; every rank then creates its communicator
 * from it (ciuic_comm_init_from_id), knobs from the environment. Collective
 * over `mpi_comm`; works on any intracommunicator (MPI_Comm_split's too).
 * A failure to make the id on rank 0 reaches every rank through the id
 * (CIUIC_ERROR_UNAVAILABLE naming why). */
#ifndef CIUIC_CIUIC_MPI_H_
#define CIUIC_CIUIC_MPI_H_

#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "ciuic/ciuic.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An MPI call failed: an id that carries the failure, so that
 * ciuic_comm_init_from_id returns it with its text (the one way a header
 * sets ciuic_last_error()). */
static inline ciuic_status_t ciuic_mpi_fail_(const char* call, int rc, ciuic_comm_t* comm) {
  ciuic_unique_id_t id;
  char why[200];
  snprintf(why, sizeof(why), "ciuic_comm_init_from_mpi: %s failed (MPI error %d)", call, rc);
  (void)ciuic_unique_id_set_error(&id, why);
  return ciuic_comm_init_from_id(comm, 0, 1, &id);
}

/* Errors: those of ciuic_comm_init_from_id; CIUIC_ERROR_UNAVAILABLE naming
 * the MPI call that failed, where MPI returns errors instead of aborting. */
static inline ciuic_status_t ciuic_comm_init_from_mpi(MPI_Comm mpi_comm, ciuic_comm_t* comm) {
  ciuic_unique_id_t id;
  int rank = 0, size = 0, rc;
  memset(&id, 0, sizeof(id));
  if ((rc = MPI_Comm_rank(mpi_comm, &rank)) != MPI_SUCCESS) return ciuic_mpi_fail_("MPI_Comm_rank", rc, comm);
  if ((rc = MPI_Comm_size(mpi_comm, &size)) != MPI_SUCCESS) return ciuic_mpi_fail_("MPI_Comm_size", rc, comm);
  if (rank == 0) (void)ciuic_get_unique_id(&id); /* on failure the id carries why */
  if ((rc = MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, mpi_comm)) != MPI_SUCCESS) {
    return ciuic_mpi_fail_("MPI_Bcast of the unique id", rc, comm);
  }
  return ciuic_comm_init_from_id(comm, rank, size, &id);
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CIUIC_CIUIC_MPI_H_ */
