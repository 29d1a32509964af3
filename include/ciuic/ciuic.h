/* ciuic C ABI: what frameworks link. Every function returns a
 * ciuic_status_t; on error, ciuic_last_error() (thread-local) says what was
 * wrong, naming the argument, variable or peer. Nothing here aborts the
 * process or throws.
 * Thread contract: every function may be called from any thread; the
 * last-error string belongs to the calling thread. */
#ifndef CIUIC_CIUIC_H_
#define CIUIC_CIUIC_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  CIUIC_INT8 = 0,
  CIUIC_UINT8 = 1,
  CIUIC_INT32 = 2,
  CIUIC_UINT32 = 3,
  CIUIC_INT64 = 4,
  CIUIC_UINT64 = 5,
  CIUIC_FLOAT16 = 6,  /* IEEE binary16; a kernel computes in f32 and rounds once (RNE);
                         across ranks see CIUIC_ACCUMULATE */
  CIUIC_BFLOAT16 = 7, /* bfloat16; as float16 */
  CIUIC_FLOAT32 = 8,
  CIUIC_FLOAT64 = 9,
  CIUIC_INT16 = 10,
  CIUIC_UINT16 = 11,
  CIUIC_BOOL = 12,        /* one byte, 0 = false; reduced as bytes */
  CIUIC_FLOAT8_E4M3 = 13, /* OCP FP8 E4M3: no Inf, NaN = S.1111.111, max 448;
                             as float16, rounding RNE and saturating */
  CIUIC_FLOAT8_E5M2 = 14, /* OCP FP8 E5M2: IEEE-like, max 57344; as float16,
                             overflow to Inf. A NaN result's sign and payload
                             are unspecified (CPU and CUDA differ) */
  CIUIC_NUM_DATATYPES = 15
} ciuic_datatype_t;

/* Which op is defined on which dtype: the bitwise ops on integers and
 * bool; PREMUL_SUM on floating-point types; bool takes MIN, MAX, SUM (= or),
 * PROD (= and) and the bitwise ops. Anything else is
 * CIUIC_ERROR_INVALID_ARGUMENT naming op and dtype. */
typedef enum {
  CIUIC_SUM = 0,  /* integers wrap like C unsigned arithmetic */
  CIUIC_PROD = 1, /* integers wrap */
  CIUIC_MIN = 2,  /* floats: a NaN in any input gives NaN */
  CIUIC_MAX = 3,  /* floats: a NaN in any input gives NaN */
  CIUIC_AVG = 4,  /* sum / n; integers: wrapped sum / n, truncated toward 0 */
  CIUIC_BAND = 5, /* bitwise and */
  CIUIC_BOR = 6,  /* bitwise or */
  CIUIC_BXOR = 7, /* bitwise xor */
  CIUIC_PREMUL_SUM = 8, /* sum of factor x input, the factor applied to each
                           input first (as NCCL's ncclRedOpCreatePreMulSum):
                           in collectives, through an op made by
                           ciuic_redop_create_premul_sum; plain, a factor of 1 */
  CIUIC_NUM_REDOPS = 9,
  CIUIC_REDOP_MAX_ = 0x7fffffff /* the range ciuic_redop_create_premul_sum's ops take */
} ciuic_redop_t;

/* The same codes as ciuic::StatusCode. */
typedef enum {
  CIUIC_SUCCESS = 0,
  CIUIC_ERROR_INVALID_ARGUMENT = 1,
  CIUIC_ERROR_NOT_FOUND = 2,
  CIUIC_ERROR_FAILED_PRECONDITION = 3,
  CIUIC_ERROR_RESOURCE_EXHAUSTED = 4,
  CIUIC_ERROR_UNAVAILABLE = 5,
  CIUIC_ERROR_DEADLINE_EXCEEDED = 6,
  CIUIC_ERROR_ABORTED = 7,
  CIUIC_ERROR_UNIMPLEMENTED = 8,
  CIUIC_ERROR_DATA_LOSS = 9,
  CIUIC_ERROR_INTERNAL = 10
} ciuic_status_t;

/* A static name for a status ("CIUIC_ERROR_INVALID_ARGUMENT"). */
const char* ciuic_status_string(ciuic_status_t status);
/* The message of the last error returned on this thread ("" if none). */
const char* ciuic_last_error(void);
/* "0.1.0" */
const char* ciuic_version(void);
/* Bytes per element of `dtype`, 0 for an unknown dtype. */
size_t ciuic_datatype_size(ciuic_datatype_t dtype);

/* dst[i] = op(srcs[0][i], ..., srcs[nsrcs-1][i]) for i in [0, count).
 * nsrcs is 1..16. dst may be identical to any source (in place); any other
 * overlap between dst and a source is an error. Pointers need only the
 * natural alignment of nothing (any byte address works). One pass: each
 * input is read once and dst written once (integer AVG adds a pass over
 * dst). Uses the best SIMD target of this CPU, capped by CIUIC_SIMD_TARGET,
 * and the CIUIC_KERNEL_* knobs, read from the environment once per process
 * (at the first local call) or when ciuic_local_reconfigure() is called.
 * Errors: CIUIC_ERROR_INVALID_ARGUMENT (null pointer with count > 0, nsrcs
 * out of range, unknown dtype/op, overlapping ranges, bad CIUIC_* value). */
ciuic_status_t ciuic_reduce_local(void* dst, const void* const* srcs, int nsrcs, size_t count,
                                  ciuic_datatype_t dtype, ciuic_redop_t op);
/* The same for CIUIC_PREMUL_SUM with `factor`: dst = factor x srcs[0] +
 * factor x srcs[1] + ... (computed in f32 for the 8- and 16-bit floats, in
 * f64 for f64). Errors: as ciuic_reduce_local, and a dtype that is not a
 * floating-point type. */
ciuic_status_t ciuic_reduce_local_premul_sum(void* dst, const void* const* srcs, int nsrcs,
                                             size_t count, ciuic_datatype_t dtype, double factor);

/* Rebuilds the local calls' kernels from the environment now (after a
 * change to CIUIC_SIMD_TARGET or CIUIC_KERNEL_*). Thread-safe; calls in
 * flight on other threads finish with the previous settings.
 * Errors: CIUIC_ERROR_INVALID_ARGUMENT naming a bad CIUIC_* value (every
 * local call returns it until a reconfiguration succeeds). */
ciuic_status_t ciuic_local_reconfigure(void);

/* Conversions, round-to-nearest-even; NaN stays NaN, overflow gives Inf.
 * src and dst must not overlap. Errors: CIUIC_ERROR_INVALID_ARGUMENT. */
ciuic_status_t ciuic_convert_f32_to_bf16(const float* src, uint16_t* dst, size_t count);
ciuic_status_t ciuic_convert_bf16_to_f32(const uint16_t* src, float* dst, size_t count);
ciuic_status_t ciuic_convert_f32_to_f16(const float* src, uint16_t* dst, size_t count);
ciuic_status_t ciuic_convert_f16_to_f32(const uint16_t* src, float* dst, size_t count);
/* Between CIUIC_FLOAT32 and a narrow float (CIUIC_FLOAT16, CIUIC_BFLOAT16,
 * CIUIC_FLOAT8_E4M3, CIUIC_FLOAT8_E5M2), either way: round to nearest even;
 * NaN stays NaN; overflow gives Inf, except e4m3 (no Inf), which saturates
 * to +-448 (Inf too). Errors: CIUIC_ERROR_INVALID_ARGUMENT (another pair of
 * types, null or overlapping buffers). */
ciuic_status_t ciuic_convert(const void* src, ciuic_datatype_t from, void* dst, ciuic_datatype_t to,
                             size_t count);

/* ciuic_reduce_local on device memory (CUDA): enqueued on `cuda_stream`
 * (a cudaStream_t, NULL = the default stream); returns once enqueued.
 * `srcs` is a host array of nsrcs device pointers. Same semantics and
 * rounding as the CPU kernels.
 * Errors: as ciuic_reduce_local; CIUIC_ERROR_UNIMPLEMENTED when built
 * without CUDA; CIUIC_ERROR_UNAVAILABLE when no GPU/driver is usable. */
ciuic_status_t ciuic_reduce_local_cuda(void* dst, const void* const* srcs, int nsrcs,
                                       size_t count, ciuic_datatype_t dtype, ciuic_redop_t op,
                                       void* cuda_stream);


/* ---- Communicators and collectives --------------------------------------
 * Every rank of a job creates one communicator (collectively) and issues the
 * same collectives in the same order. sendbuf == recvbuf means in place.
 * Errors common to all: CIUIC_ERROR_INVALID_ARGUMENT (null buffer with
 * count > 0, unknown dtype/op, root/peer out of range, null comm);
 * CIUIC_ERROR_UNAVAILABLE naming a peer that died or closed;
 * CIUIC_ERROR_DEADLINE_EXCEEDED after CIUIC_TIMEOUT_MS without progress;
 * CIUIC_ERROR_ABORTED after ciuic_comm_abort. After a peer failure every
 * later call on that communicator returns the first error.
 * Thread contract: one thread at a time per communicator; requests may be
 * waited on from any thread.
 * Buffers may be CUDA device memory: NCCL runs such calls when every rank
 * has a GPU of its own (CIUIC_GPU, CIUIC_NCCL_LIB), else they run on host
 * copies; the input must be ready (work on the legacy default stream is
 * waited for, other streams must be synchronised by the caller). */
typedef struct ciuic_comm* ciuic_comm_t;
typedef struct ciuic_request* ciuic_request_t;

/* Rank, size and rendezvous from the environment: CIUIC_RANK,
 * CIUIC_WORLD_SIZE, CIUIC_STORE_ADDR (host:port; rank 0 serves it unless
 * CIUIC_STORE_EXTERNAL=1), or the variables of Open MPI, Slurm or PMI. */
ciuic_status_t ciuic_comm_init_from_env(ciuic_comm_t* comm);
/* Explicit rank, size and store address "host:port" (rank 0 serves it unless
 * CIUIC_STORE_EXTERNAL=1); every other knob from the environment. */
ciuic_status_t ciuic_comm_init(ciuic_comm_t* comm, int rank, int size, const char* store_addr);
/* A rendezvous id (as NCCL's ncclUniqueId), for jobs whose launcher gives
 * no store address (MPI programs: see ciuic_mpi.h). One process calls
 * ciuic_get_unique_id, which starts the store in that process (on every
 * interface, a free port; CIUIC_SOCKET_IFNAME picks the address it
 * advertises) and a fresh job secret (or CIUIC_SECRET's); it hands the id
 * to every rank by its own means, and each creates its communicator with
 * ciuic_comm_init_from_id. The store lives in the making process as long as
 * a communicator made there from the id does (to the process's end when
 * none is). The id holds the secret: send it only over a trusted channel.
 * When making it fails, the id still carries why, so the ranks it is sent
 * to fail naming it (CIUIC_ERROR_UNAVAILABLE). */
#define CIUIC_UNIQUE_ID_BYTES 256
typedef struct {
  char internal[CIUIC_UNIQUE_ID_BYTES];
} ciuic_unique_id_t;
/* Errors: CIUIC_ERROR_INVALID_ARGUMENT (null id, a CIUIC_* value),
 * CIUIC_ERROR_UNAVAILABLE (no interface or randomness, the store could
 * not start). */
ciuic_status_t ciuic_get_unique_id(ciuic_unique_id_t* id);
/* This rank of `size` over the store `id` names; every rank passes the same
 * id. Other knobs from the environment. Errors: as ciuic_comm_init, and
 * CIUIC_ERROR_DATA_LOSS (not an id), CIUIC_ERROR_UNAVAILABLE (an id that
 * says it could not be made, and why). */
ciuic_status_t ciuic_comm_init_from_id(ciuic_comm_t* comm, int rank, int size, const ciuic_unique_id_t* id);
/* For code that hands ids around (ciuic_mpi.h): makes *id an id that carries
 * `why` (cut to fit) instead of an address, so the ranks it reaches fail in
 * ciuic_comm_init_from_id naming it. Errors: CIUIC_ERROR_INVALID_ARGUMENT
 * (null id or why). */
ciuic_status_t ciuic_unique_id_set_error(ciuic_unique_id_t* id, const char* why);

/* Sub-communicators, as MPI_Comm_split: collective over `comm` (in call
 * order with its collectives). Ranks passing the same color (>= 0) get a
 * new communicator in *newcomm, ranked by key (ties by rank in comm); a rank
 * passing CIUIC_UNDEFINED takes part and gets NULL. The new communicator
 * has comm's knobs and store, its own connections, queue and progress
 * thread: collectives on it run concurrently with comm and its siblings,
 * and it stays usable after comm is destroyed (a process serving the store
 * keeps it to its end once a communicator it serves was split). Destroy it with
 * ciuic_comm_destroy. Errors: CIUIC_ERROR_INVALID_ARGUMENT naming a rank
 * that passed a negative color other than CIUIC_UNDEFINED (on every rank),
 * comm's errors, those of creating a communicator. */
#define CIUIC_UNDEFINED (-32766)
ciuic_status_t ciuic_comm_split(ciuic_comm_t comm, int color, int key, ciuic_comm_t* newcomm);
/* ciuic_comm_split(comm, 0, rank, newcomm): the same ranks, a communicator
 * of their own (e.g. for a library that must not share the caller's). */
ciuic_status_t ciuic_comm_dup(ciuic_comm_t comm, ciuic_comm_t* newcomm);

ciuic_status_t ciuic_comm_rank(ciuic_comm_t comm, int* rank);
ciuic_status_t ciuic_comm_size(ciuic_comm_t comm, int* size);
/* Waits for nothing: pending requests fail with CIUIC_ERROR_ABORTED. */
ciuic_status_t ciuic_comm_destroy(ciuic_comm_t comm);
/* Fails every pending and later operation of `comm` with ABORTED; returns at
 * once (then destroy it). */
ciuic_status_t ciuic_comm_abort(ciuic_comm_t comm);

/* A premul_sum op of `comm` (as NCCL's ncclRedOpCreatePreMulSum): wherever a
 * ciuic_redop_t goes on this communicator (allreduce, reduce,
 * reduce_scatter(v), buckets), on floating-point dtypes, each rank's input
 * is multiplied by `factor` before the sum. *op is 256 or more.
 * Errors: CIUIC_ERROR_INVALID_ARGUMENT (factor not finite, null op),
 * CIUIC_ERROR_RESOURCE_EXHAUSTED (65536 live ops). */
ciuic_status_t ciuic_redop_create_premul_sum(ciuic_redop_t* op, double factor, ciuic_comm_t comm);
/* Errors: CIUIC_ERROR_INVALID_ARGUMENT naming an op that is not a live op of
 * ciuic_redop_create_premul_sum on `comm`. */
ciuic_status_t ciuic_redop_destroy(ciuic_redop_t op, ciuic_comm_t comm);

ciuic_status_t ciuic_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                               ciuic_datatype_t dtype, ciuic_redop_t op, ciuic_comm_t comm);
ciuic_status_t ciuic_broadcast(void* buf, size_t count, ciuic_datatype_t dtype, int root,
                               ciuic_comm_t comm);
/* recvbuf is used at the root only. */
ciuic_status_t ciuic_reduce(const void* sendbuf, void* recvbuf, size_t count,
                            ciuic_datatype_t dtype, ciuic_redop_t op, int root, ciuic_comm_t comm);
/* recvbuf holds size * sendcount elements, rank r's at r * sendcount. */
ciuic_status_t ciuic_allgather(const void* sendbuf, void* recvbuf, size_t sendcount,
                               ciuic_datatype_t dtype, ciuic_comm_t comm);
/* recvcounts[size]; rank r contributes recvcounts[r] elements, placed after
 * the blocks of ranks < r. */
ciuic_status_t ciuic_allgatherv(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                ciuic_datatype_t dtype, ciuic_comm_t comm);
/* sendbuf holds size * recvcount elements; rank r gets block r reduced. */
ciuic_status_t ciuic_reduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                    ciuic_datatype_t dtype, ciuic_redop_t op, ciuic_comm_t comm);
ciuic_status_t ciuic_reduce_scatterv(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                     ciuic_datatype_t dtype, ciuic_redop_t op, ciuic_comm_t comm);
/* sendbuf holds size blocks of count elements; block p goes to rank p. */
ciuic_status_t ciuic_alltoall(const void* sendbuf, void* recvbuf, size_t count,
                              ciuic_datatype_t dtype, ciuic_comm_t comm);
ciuic_status_t ciuic_barrier(ciuic_comm_t comm);
ciuic_status_t ciuic_send(const void* buf, size_t count, ciuic_datatype_t dtype, int peer,
                          ciuic_comm_t comm);
ciuic_status_t ciuic_recv(void* buf, size_t count, ciuic_datatype_t dtype, int peer,
                          ciuic_comm_t comm);
/* Send and receive with a tag in [0, 65536): messages between two ranks
 * match in order per tag (ciuic_send and ciuic_recv use tag 0). Each tag in
 * use between two ranks has a connection (and ring buffers) of its own. */
ciuic_status_t ciuic_send_tagged(const void* buf, size_t count, ciuic_datatype_t dtype, int peer, int tag,
                                 ciuic_comm_t comm);
ciuic_status_t ciuic_recv_tagged(void* buf, size_t count, ciuic_datatype_t dtype, int peer, int tag,
                                 ciuic_comm_t comm);
/* The root's recvbuf gets size blocks of count elements, rank r's at
 * r * count (sendbuf == recvbuf + root * count at the root: in place);
 * recvbuf is used at the root only. */
ciuic_status_t ciuic_gather(const void* sendbuf, void* recvbuf, size_t count, ciuic_datatype_t dtype,
                            int root, ciuic_comm_t comm);
/* Rank r gets block r (count elements) of the root's sendbuf (recvbuf ==
 * sendbuf + root * count at the root: in place); sendbuf is used at the
 * root only. */
ciuic_status_t ciuic_scatter(const void* sendbuf, void* recvbuf, size_t count, ciuic_datatype_t dtype,
                             int root, ciuic_comm_t comm);
/* sendcounts[p] elements at sdispls[p] go to rank p; recvcounts[p]
 * elements from rank p land at rdispls[p] (NULL displacements: packed in
 * rank order). Rank p's sendcounts[r] must equal rank r's recvcounts[p]
 * (else an error naming the peer). Not in place. */
ciuic_status_t ciuic_alltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                               void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                               ciuic_datatype_t dtype, ciuic_comm_t comm);

/* Async forms: return at once with a request; the operation runs on the
 * progress thread (CIUIC_PROGRESS=thread) while the caller computes, or
 * inside wait/test (CIUIC_PROGRESS=caller). Several may be outstanding;
 * they complete in call order. Buffers must stay valid until completion. */
ciuic_status_t ciuic_iallreduce(const void* sendbuf, void* recvbuf, size_t count,
                                ciuic_datatype_t dtype, ciuic_redop_t op, ciuic_comm_t comm,
                                ciuic_request_t* req);
ciuic_status_t ciuic_ibroadcast(void* buf, size_t count, ciuic_datatype_t dtype, int root,
                                ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_ireduce(const void* sendbuf, void* recvbuf, size_t count,
                             ciuic_datatype_t dtype, ciuic_redop_t op, int root, ciuic_comm_t comm,
                             ciuic_request_t* req);
ciuic_status_t ciuic_iallgather(const void* sendbuf, void* recvbuf, size_t sendcount,
                                ciuic_datatype_t dtype, ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_iallgatherv(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                 ciuic_datatype_t dtype, ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_ireduce_scatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                     ciuic_datatype_t dtype, ciuic_redop_t op, ciuic_comm_t comm,
                                     ciuic_request_t* req);
ciuic_status_t ciuic_ireduce_scatterv(const void* sendbuf, void* recvbuf,
                                      const size_t* recvcounts, ciuic_datatype_t dtype,
                                      ciuic_redop_t op, ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_ialltoall(const void* sendbuf, void* recvbuf, size_t count,
                               ciuic_datatype_t dtype, ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_ibarrier(ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_isend(const void* buf, size_t count, ciuic_datatype_t dtype, int peer,
                           ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_irecv(void* buf, size_t count, ciuic_datatype_t dtype, int peer,
                           ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_isend_tagged(const void* buf, size_t count, ciuic_datatype_t dtype, int peer, int tag,
                                  ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_irecv_tagged(void* buf, size_t count, ciuic_datatype_t dtype, int peer, int tag,
                                  ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_igather(const void* sendbuf, void* recvbuf, size_t count, ciuic_datatype_t dtype,
                             int root, ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_iscatter(const void* sendbuf, void* recvbuf, size_t count, ciuic_datatype_t dtype,
                              int root, ciuic_comm_t comm, ciuic_request_t* req);
ciuic_status_t ciuic_ialltoallv(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls,
                                void* recvbuf, const size_t* recvcounts, const size_t* rdispls,
                                ciuic_datatype_t dtype, ciuic_comm_t comm, ciuic_request_t* req);
/* Blocks until done, returns the operation's status and frees the request. */
ciuic_status_t ciuic_wait(ciuic_request_t req);
/* *done = 1 when finished (then the status is the operation's and the
 * request is freed), 0 otherwise. */
ciuic_status_t ciuic_test(ciuic_request_t req, int* done);

/* ---- Fusion buckets ------------------------------------------------------
 * Many small tensors of one dtype packed into one all-reduce. Adding a
 * tensor copies it into the bucket; when the bucket reaches its capacity
 * (bytes; 0 = CIUIC_BUFFER_SIZE) it is all-reduced asynchronously; flush
 * sends what is pending; wait scatters every result back into the tensors
 * (which must stay valid until then). Every rank must add the same tensor
 * sizes in the same order. A tensor larger than the capacity gets an
 * all-reduce of its own. */
typedef struct ciuic_bucket* ciuic_bucket_t;
ciuic_status_t ciuic_bucket_create(ciuic_comm_t comm, ciuic_datatype_t dtype, ciuic_redop_t op,
                                   size_t capacity_bytes, ciuic_bucket_t* bucket);
ciuic_status_t ciuic_bucket_add(ciuic_bucket_t bucket, void* tensor, size_t count);
ciuic_status_t ciuic_bucket_flush(ciuic_bucket_t bucket);
/* Flushes, waits for every all-reduce of the bucket and writes the results
 * back into the tensors; the bucket is empty and reusable afterwards. */
ciuic_status_t ciuic_bucket_wait(ciuic_bucket_t bucket);
ciuic_status_t ciuic_bucket_destroy(ciuic_bucket_t bucket);

/* ---- Balanced partition --------------------------------------------------
 * Splits items 0..n-1 with costs[i] >= 0 into `parts` contiguous ranges
 * minimising the largest range's total cost; bounds[0..parts] receives the
 * boundaries (range p is [bounds[p], bounds[p+1])). Use it to give ranks
 * uneven but balanced work (with the v-collectives). */
ciuic_status_t ciuic_partition(const double* costs, size_t n, int parts, size_t* bounds);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CIUIC_CIUIC_H_ */
