/* Every collective of the C ABI, blocking and async, on the ranks ciuic-run
 * starts: results checked element by element against values computed here,
 * bad input checked for an error that names the argument, and the
 * communicator still usable after it. Prints "c api: ok" and exits 0 when
 * everything holds; otherwise names the first call that went wrong. */
#include <ciuic/ciuic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "c_checks.h"

/* The call must fail with INVALID_ARGUMENT and a message naming `needle`. */
#define EXPECT_REFUSED(call, needle)                                                             \
  do {                                                                                           \
    ciuic_status_t s_ = (call);                                                                  \
    EXPECT(s_ == CIUIC_ERROR_INVALID_ARGUMENT && strstr(ciuic_last_error(), needle) != NULL,     \
           "%s: want INVALID_ARGUMENT naming '%s', got %s: %s", #call, needle,                   \
           ciuic_status_string(s_), ciuic_last_error());                                         \
  } while (0)

/* Rank r's element i: small integers, exact in float. */
static float V(int r, size_t i) { return (float)((r + 1) * 3 + (int)(i % 7)); }

static int Collectives(ciuic_comm_t comm, int rank, int n, size_t count) {
  float* in = malloc(n * count * sizeof(float) + 4);
  float* out = malloc(n * count * sizeof(float) + 4);
  size_t* counts = malloc(n * sizeof(size_t));
  EXPECT(in != NULL && out != NULL && counts != NULL, "out of memory");
  for (size_t i = 0; i < n * count; ++i) in[i] = V(rank, i);

  /* all-reduce, out of place and in place; the i-form with wait and test. */
  CHECK(ciuic_allreduce(in, out, count, CIUIC_FLOAT32, CIUIC_SUM, comm));
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += V(r, i);
    EXPECT(out[i] == want, "allreduce count %zu: element %zu is %g, want %g", count, i, out[i], want);
  }
  memcpy(out, in, count * sizeof(float));
  ciuic_request_t req;
  CHECK(ciuic_iallreduce(out, out, count, CIUIC_FLOAT32, CIUIC_MAX, comm, &req));
  int done = 0;
  while (!done) CHECK(ciuic_test(req, &done));
  for (size_t i = 0; i < count; ++i) EXPECT(out[i] == V(n - 1, i), "iallreduce max: element %zu is %g", i, out[i]);

  /* broadcast from the last rank (blocking) and from rank 0 (async). */
  for (size_t i = 0; i < count; ++i) out[i] = rank == n - 1 ? V(n - 1, i) : -1.0f;
  CHECK(ciuic_broadcast(out, count, CIUIC_FLOAT32, n - 1, comm));
  for (size_t i = 0; i < count; ++i) EXPECT(out[i] == V(n - 1, i), "broadcast: element %zu is %g", i, out[i]);
  for (size_t i = 0; i < count; ++i) out[i] = rank == 0 ? V(0, i) : -1.0f;
  CHECK(ciuic_ibroadcast(out, count, CIUIC_FLOAT32, 0, comm, &req));
  CHECK(ciuic_wait(req));
  for (size_t i = 0; i < count; ++i) EXPECT(out[i] == V(0, i), "ibroadcast: element %zu is %g", i, out[i]);

  /* reduce to the last rank, blocking and async. */
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < count; ++i) out[i] = -1.0f;
    if (pass == 0) {
      CHECK(ciuic_reduce(in, out, count, CIUIC_FLOAT32, CIUIC_SUM, n - 1, comm));
    } else {
      CHECK(ciuic_ireduce(in, out, count, CIUIC_FLOAT32, CIUIC_SUM, n - 1, comm, &req));
      CHECK(ciuic_wait(req));
    }
    if (rank != n - 1) continue;
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += V(r, i);
      EXPECT(out[i] == want, "reduce pass %d: element %zu is %g, want %g", pass, i, out[i], want);
    }
  }

  /* all-gather: block r from rank r. */
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0) {
      CHECK(ciuic_allgather(in, out, count, CIUIC_FLOAT32, comm));
    } else {
      CHECK(ciuic_iallgather(in, out, count, CIUIC_FLOAT32, comm, &req));
      CHECK(ciuic_wait(req));
    }
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        EXPECT(out[r * count + i] == V(r, i), "allgather pass %d: block %d element %zu is %g", pass, r, i,
               out[r * count + i]);
  }

  /* reduce-scatter: rank r gets block r summed. */
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0) {
      CHECK(ciuic_reduce_scatter(in, out, count, CIUIC_FLOAT32, CIUIC_SUM, comm));
    } else {
      CHECK(ciuic_ireduce_scatter(in, out, count, CIUIC_FLOAT32, CIUIC_SUM, comm, &req));
      CHECK(ciuic_wait(req));
    }
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += V(r, rank * count + i);
      EXPECT(out[i] == want, "reduce_scatter pass %d: element %zu is %g, want %g", pass, i, out[i], want);
    }
  }

  /* v-forms with uneven counts: rank r has (r + 1) * count / n elements. */
  size_t total = 0;
  for (int r = 0; r < n; ++r) {
    counts[r] = (size_t)(r + 1) * count / (size_t)n;
    total += counts[r];
  }
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0) {
      CHECK(ciuic_allgatherv(in, out, counts, CIUIC_FLOAT32, comm));
    } else {
      CHECK(ciuic_iallgatherv(in, out, counts, CIUIC_FLOAT32, comm, &req));
      CHECK(ciuic_wait(req));
    }
    size_t at = 0;
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < counts[r]; ++i, ++at)
        EXPECT(out[at] == V(r, i), "allgatherv pass %d: rank %d's element %zu is %g", pass, r, i, out[at]);
    }
  }
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0) {
      CHECK(ciuic_reduce_scatterv(in, out, counts, CIUIC_FLOAT32, CIUIC_SUM, comm));
    } else {
      CHECK(ciuic_ireduce_scatterv(in, out, counts, CIUIC_FLOAT32, CIUIC_SUM, comm, &req));
      CHECK(ciuic_wait(req));
    }
    size_t first = 0;
    for (int r = 0; r < rank; ++r) first += counts[r];
    for (size_t i = 0; i < counts[rank]; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) want += V(r, first + i);
      EXPECT(out[i] == want, "reduce_scatterv pass %d: element %zu is %g, want %g", pass, i, out[i], want);
    }
  }
  (void)total;

  /* all-to-all: block r of rank q's output is block q of rank r's input. */
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0) {
      CHECK(ciuic_alltoall(in, out, count, CIUIC_FLOAT32, comm));
    } else {
      CHECK(ciuic_ialltoall(in, out, count, CIUIC_FLOAT32, comm, &req));
      CHECK(ciuic_wait(req));
    }
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i)
        EXPECT(out[r * count + i] == V(r, rank * count + i), "alltoall pass %d: block %d element %zu is %g", pass, r,
               i, out[r * count + i]);
  }

  /* send/recv around the ring, blocking (even ranks send first) and async. */
  if (n > 1) {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    if (rank % 2 == 0) {
      CHECK(ciuic_send(in, count, CIUIC_FLOAT32, next, comm));
      CHECK(ciuic_recv(out, count, CIUIC_FLOAT32, prev, comm));
    } else {
      CHECK(ciuic_recv(out, count, CIUIC_FLOAT32, prev, comm));
      CHECK(ciuic_send(in, count, CIUIC_FLOAT32, next, comm));
    }
    for (size_t i = 0; i < count; ++i) EXPECT(out[i] == V(prev, i), "recv: element %zu is %g", i, out[i]);
    ciuic_request_t sreq, rreq;
    CHECK(ciuic_irecv(out, count, CIUIC_FLOAT32, next, comm, &rreq));
    CHECK(ciuic_isend(in, count, CIUIC_FLOAT32, prev, comm, &sreq));
    CHECK(ciuic_wait(sreq));
    CHECK(ciuic_wait(rreq));
    for (size_t i = 0; i < count; ++i) EXPECT(out[i] == V(next, i), "irecv: element %zu is %g", i, out[i]);
  }

  /* gather to the last rank, scatter from it; blocking and async. */
  for (int pass = 0; pass < 2; ++pass) {
    const int root = n - 1;
    for (size_t i = 0; i < n * count; ++i) out[i] = -1;
    if (pass == 0) {
      CHECK(ciuic_gather(in, out, count, CIUIC_FLOAT32, root, comm));
    } else {
      CHECK(ciuic_igather(in, out, count, CIUIC_FLOAT32, root, comm, &req));
      CHECK(ciuic_wait(req));
    }
    if (rank == root) {
      for (int r = 0; r < n; ++r)
        for (size_t i = 0; i < count; ++i)
          EXPECT(out[r * count + i] == V(r, i), "gather pass %d: block %d element %zu is %g", pass, r, i,
                 out[r * count + i]);
    }
    for (size_t i = 0; i < count; ++i) out[i] = -1;
    if (pass == 0) {
      CHECK(ciuic_scatter(in, out, count, CIUIC_FLOAT32, root, comm));
    } else {
      CHECK(ciuic_iscatter(in, out, count, CIUIC_FLOAT32, root, comm, &req));
      CHECK(ciuic_wait(req));
    }
    for (size_t i = 0; i < count; ++i)
      EXPECT(out[i] == V(root, rank * count + i), "scatter pass %d: element %zu is %g", pass, i, out[i]);
  }

  /* all-to-all-v: rank r sends (r + p) % 3 * count / 3 elements to rank p,
   * packed; blocks land packed in rank order. */
  {
    size_t* sc = malloc(n * sizeof(size_t));
    size_t* rc = malloc(n * sizeof(size_t));
    EXPECT(sc != NULL && rc != NULL, "out of memory");
    for (int p = 0; p < n; ++p) {
      sc[p] = (size_t)((rank + p) % 3) * count / 3;
      rc[p] = (size_t)((p + rank) % 3) * count / 3;
    }
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < n * count; ++i) out[i] = -1;
      if (pass == 0) {
        CHECK(ciuic_alltoallv(in, sc, NULL, out, rc, NULL, CIUIC_FLOAT32, comm));
      } else {
        CHECK(ciuic_ialltoallv(in, sc, NULL, out, rc, NULL, CIUIC_FLOAT32, comm, &req));
        CHECK(ciuic_wait(req));
      }
      size_t at = 0;
      for (int p = 0; p < n; ++p) {
        /* Rank p's block for this rank starts after p's blocks for lower ranks. */
        size_t from = 0;
        for (int q = 0; q < rank; ++q) from += (size_t)((p + q) % 3) * count / 3;
        for (size_t i = 0; i < rc[p]; ++i)
          EXPECT(out[at + i] == V(p, from + i), "alltoallv pass %d: from rank %d element %zu is %g", pass, p, i,
                 out[at + i]);
        at += rc[p];
      }
    }
    free(sc);
    free(rc);
  }

  /* Tagged messages overtake each other: tag 7 is sent first, tag 3
   * received first. */
  if (n > 1) {
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    ciuic_request_t s7, s3, r3, r7;
    float* out2 = malloc(count * sizeof(float));
    EXPECT(out2 != NULL, "out of memory");
    CHECK(ciuic_isend_tagged(in, count, CIUIC_FLOAT32, next, 7, comm, &s7));
    CHECK(ciuic_isend_tagged(in + 1, count - 1, CIUIC_FLOAT32, next, 3, comm, &s3));
    CHECK(ciuic_irecv_tagged(out2, count - 1, CIUIC_FLOAT32, prev, 3, comm, &r3));
    CHECK(ciuic_irecv_tagged(out, count, CIUIC_FLOAT32, prev, 7, comm, &r7));
    CHECK(ciuic_wait(s7));
    CHECK(ciuic_wait(s3));
    CHECK(ciuic_wait(r3));
    CHECK(ciuic_wait(r7));
    for (size_t i = 0; i < count; ++i) EXPECT(out[i] == V(prev, i), "tag 7: element %zu is %g", i, out[i]);
    for (size_t i = 0; i + 1 < count; ++i) EXPECT(out2[i] == V(prev, i + 1), "tag 3: element %zu is %g", i, out2[i]);
    if (rank % 2 == 0) {
      CHECK(ciuic_send_tagged(in, count, CIUIC_FLOAT32, next, 5, comm));
      CHECK(ciuic_recv_tagged(out, count, CIUIC_FLOAT32, prev, 5, comm));
    } else {
      CHECK(ciuic_recv_tagged(out, count, CIUIC_FLOAT32, prev, 5, comm));
      CHECK(ciuic_send_tagged(in, count, CIUIC_FLOAT32, next, 5, comm));
    }
    for (size_t i = 0; i < count; ++i) EXPECT(out[i] == V(prev, i), "tag 5: element %zu is %g", i, out[i]);
    free(out2);
  }

  CHECK(ciuic_barrier(comm));
  CHECK(ciuic_ibarrier(comm, &req));
  CHECK(ciuic_wait(req));
  free(in);
  free(out);
  free(counts);
  return 0;
}

int main(void) {
  ciuic_comm_t comm;
  CHECK(ciuic_comm_init_from_env(&comm));
  int rank, n;
  CHECK(ciuic_comm_rank(comm, &rank));
  CHECK(ciuic_comm_size(comm, &n));
  g_rank = rank;

  /* Counts: one element, a prime, one above a typical chunk, and 1 MiB of floats. */
  const size_t counts[] = {1, 1009, 131073, 262144};
  for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); ++k) {
    if (Collectives(comm, rank, n, counts[k]) != 0) return 1;
  }

  /* premul_sum ops, the 16-bit integers with a bitwise op, fp8 moved and
   * summed (small integers: exact in e4m3 at these rank counts). */
  {
    ciuic_redop_t quarter;
    CHECK(ciuic_redop_create_premul_sum(&quarter, 0.25, comm));
    EXPECT((int)quarter >= 256, "premul op %d below 256", (int)quarter);
    float p[3] = {4.0f * (rank + 1), 8, -4}, q[3];
    CHECK(ciuic_allreduce(p, q, 3, CIUIC_FLOAT32, quarter, comm));
    EXPECT(q[0] == (float)(n * (n + 1) / 2) && q[1] == 2.0f * n && q[2] == -1.0f * n, "premul_sum: %g %g %g", q[0],
           q[1], q[2]);
    CHECK(ciuic_redop_destroy(quarter, comm));
    EXPECT_REFUSED(ciuic_redop_destroy(quarter, comm), "not a live op");
    EXPECT_REFUSED(ciuic_allreduce(p, q, 3, CIUIC_FLOAT32, quarter, comm), "op");
    int16_t a[2] = {(int16_t)(1 << rank), -1}, b[2];
    CHECK(ciuic_allreduce(a, b, 2, CIUIC_INT16, CIUIC_BOR, comm));
    EXPECT(b[0] == (int16_t)((1 << n) - 1) && b[1] == -1, "int16 bor: %d %d", b[0], b[1]);
    EXPECT_REFUSED(ciuic_allreduce(a, b, 2, CIUIC_INT16, quarter, comm), "op");
    const float one[2] = {1.0f, (float)rank};
    uint8_t e[2], sum[2];
    CHECK(ciuic_convert(one, CIUIC_FLOAT32, e, CIUIC_FLOAT8_E4M3, 2));
    CHECK(ciuic_allreduce(e, sum, 2, CIUIC_FLOAT8_E4M3, CIUIC_SUM, comm));
    /* The exact sums rounded once to e4m3 (0+1+...+6 = 21 is 20 there). */
    const float exact[2] = {(float)n, (float)(n * (n - 1) / 2)};
    uint8_t rounded8[2];
    float back[2], want[2];
    CHECK(ciuic_convert(exact, CIUIC_FLOAT32, rounded8, CIUIC_FLOAT8_E4M3, 2));
    CHECK(ciuic_convert(rounded8, CIUIC_FLOAT8_E4M3, want, CIUIC_FLOAT32, 2));
    CHECK(ciuic_convert(sum, CIUIC_FLOAT8_E4M3, back, CIUIC_FLOAT32, 2));
    EXPECT(back[0] == want[0] && back[1] == want[1], "e4m3 sum: %g %g, want %g %g", back[0], back[1], want[0],
           want[1]);
  }

  /* Bad input: refused, named, and the communicator stays usable. */
  float x[4] = {1, 2, 3, 4};
  ciuic_request_t req = NULL;
  EXPECT_REFUSED(ciuic_allreduce(NULL, x, 4, CIUIC_FLOAT32, CIUIC_SUM, comm), "sendbuf");
  EXPECT_REFUSED(ciuic_allreduce(x, NULL, 4, CIUIC_FLOAT32, CIUIC_SUM, comm), "recvbuf");
  EXPECT_REFUSED(ciuic_allreduce(x, x, 4, (ciuic_datatype_t)42, CIUIC_SUM, comm), "dtype");
  EXPECT_REFUSED(ciuic_allreduce(x, x, 4, CIUIC_FLOAT32, (ciuic_redop_t)42, comm), "op");
  EXPECT_REFUSED(ciuic_allreduce(x, x, 4, CIUIC_FLOAT32, CIUIC_SUM, NULL), "comm");
  EXPECT_REFUSED(ciuic_broadcast(x, 4, CIUIC_FLOAT32, n, comm), "root");
  EXPECT_REFUSED(ciuic_reduce(x, x, 4, CIUIC_FLOAT32, CIUIC_SUM, -1, comm), "root");
  EXPECT_REFUSED(ciuic_send(x, 4, CIUIC_FLOAT32, rank, comm), "peer");
  EXPECT_REFUSED(ciuic_recv(x, 4, CIUIC_FLOAT32, n, comm), "peer");
  if (n > 1) EXPECT_REFUSED(ciuic_send_tagged(x, 4, CIUIC_FLOAT32, (rank + 1) % n, 1 << 16, comm), "tag");
  EXPECT_REFUSED(ciuic_gather(x, x, 4, CIUIC_FLOAT32, n, comm), "root");
  EXPECT_REFUSED(ciuic_scatter(NULL, x, 4, CIUIC_FLOAT32, rank, comm), "sendbuf");
  EXPECT_REFUSED(ciuic_alltoallv(x, NULL, NULL, x, NULL, NULL, CIUIC_FLOAT32, comm), "sendcounts");
  EXPECT_REFUSED(ciuic_barrier(NULL), "comm");
  EXPECT_REFUSED(ciuic_iallreduce(x, x, 4, CIUIC_FLOAT32, CIUIC_SUM, comm, NULL), "req");
  EXPECT_REFUSED(ciuic_wait(NULL), "req");
  (void)req;
  CHECK(ciuic_allreduce(x, x, 4, CIUIC_FLOAT32, CIUIC_SUM, comm));
  EXPECT(x[0] == (float)n && x[3] == 4.0f * n, "the communicator is unusable after refused input: %g %g", x[0], x[3]);

  /* Sub-communicators: even and odd ranks (by key in reverse), CIUIC_UNDEFINED
   * on rank 0, a duplicate; a bad color refused on every rank. */
  ciuic_comm_t parity = NULL, others = NULL, dup = NULL;
  CHECK(ciuic_comm_split(comm, rank % 2, -rank, &parity));
  int prank, pn;
  CHECK(ciuic_comm_rank(parity, &prank));
  CHECK(ciuic_comm_size(parity, &pn));
  EXPECT(pn == (n + 1 - rank % 2) / 2 && prank == pn - 1 - rank / 2, "split: rank %d of %d", prank, pn);
  int32_t mine = rank, total = 0;
  CHECK(ciuic_allreduce(&mine, &total, 1, CIUIC_INT32, CIUIC_SUM, parity));
  int32_t want = 0;
  for (int r = rank % 2; r < n; r += 2) want += r;
  EXPECT(total == want, "sum over the ranks of parity %d: %d, want %d", rank % 2, total, want);
  CHECK(ciuic_comm_split(comm, rank == 0 ? CIUIC_UNDEFINED : 1, 0, &others));
  EXPECT((others == NULL) == (rank == 0), "CIUIC_UNDEFINED gives NULL, and only it");
  CHECK(ciuic_comm_dup(comm, &dup));
  CHECK(ciuic_comm_rank(dup, &prank));
  EXPECT(prank == rank, "dup: rank %d", prank);
  ciuic_comm_t none = NULL;
  {
    ciuic_status_t s = ciuic_comm_split(comm, rank == n - 1 ? -7 : 0, 0, &none);
    char needle[64];
    snprintf(needle, sizeof(needle), "color -7 of rank %d", n - 1);
    EXPECT(s == CIUIC_ERROR_INVALID_ARGUMENT && strstr(ciuic_last_error(), needle) != NULL && none == NULL,
           "a bad color: %s: %s", ciuic_status_string(s), ciuic_last_error());
  }
  EXPECT_REFUSED(ciuic_comm_split(NULL, 0, 0, &none), "comm");
  EXPECT_REFUSED(ciuic_comm_split(comm, 0, 0, NULL), "newcomm");
  EXPECT_REFUSED(ciuic_comm_dup(comm, NULL), "newcomm");

  /* A unique id made on rank 0 and broadcast: a communicator of the same
   * ranks without the environment's rendezvous. */
  ciuic_unique_id_t id;
  memset(&id, 0, sizeof(id));
  if (rank == 0) CHECK(ciuic_get_unique_id(&id));
  CHECK(ciuic_broadcast(&id, sizeof(id), CIUIC_UINT8, 0, comm));
  ciuic_comm_t by_id = NULL;
  CHECK(ciuic_comm_init_from_id(&by_id, rank, n, &id));
  mine = rank + 1;
  CHECK(ciuic_allreduce(&mine, &total, 1, CIUIC_INT32, CIUIC_SUM, by_id));
  EXPECT(total == n * (n + 1) / 2, "sum over the id's communicator: %d", total);
  {
    ciuic_unique_id_t junk;
    memset(&junk, 'x', sizeof(junk));
    ciuic_status_t s = ciuic_comm_init_from_id(&none, rank, n, &junk);
    EXPECT(s == CIUIC_ERROR_DATA_LOSS && strstr(ciuic_last_error(), "not a ciuic unique id") != NULL,
           "a junk id: %s: %s", ciuic_status_string(s), ciuic_last_error());
  }
  EXPECT_REFUSED(ciuic_comm_init_from_id(&none, rank, n, NULL), "id");
  EXPECT_REFUSED(ciuic_comm_init_from_id(&none, n, n, &id), "outside [0,");
  EXPECT_REFUSED(ciuic_get_unique_id(NULL), "id");
  {
    /* An id that carries an error fails every rank it reaches, naming it. */
    ciuic_unique_id_t failed;
    CHECK(ciuic_unique_id_set_error(&failed, "rank 0 had no usable interface"));
    ciuic_status_t s = ciuic_comm_init_from_id(&none, rank, n, &failed);
    EXPECT(s == CIUIC_ERROR_UNAVAILABLE && strstr(ciuic_last_error(), "rank 0 had no usable interface") != NULL &&
               none == NULL,
           "an error id: %s: %s", ciuic_status_string(s), ciuic_last_error());
    EXPECT_REFUSED(ciuic_unique_id_set_error(&failed, NULL), "why");
  }

  /* The splits outlive their parent. */
  CHECK(ciuic_comm_destroy(comm));
  CHECK(ciuic_allreduce(&mine, &total, 1, CIUIC_INT32, CIUIC_SUM, dup));
  EXPECT(total == n * (n + 1) / 2, "sum over the duplicate after the parent went: %d", total);
  if (others != NULL) {
    CHECK(ciuic_barrier(others));
    CHECK(ciuic_comm_destroy(others));
  }
  CHECK(ciuic_comm_destroy(parity));
  CHECK(ciuic_comm_destroy(dup));
  CHECK(ciuic_comm_destroy(by_id));
  printf("rank %d of %d: c api: ok\n", rank, n);
  return 0;
}
