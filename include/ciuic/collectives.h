// ciuic::Communicator: collectives over the transports (C++ API; the C ABI
// in ciuic.h wraps it).
//
// Every operation has a blocking form and an async form (I-prefix) that
// returns a Request. Async operations are queued and run in call order by a
// progress thread (CIUIC_PROGRESS=thread, the default), so the caller's
// computation overlaps the communication; with CIUIC_PROGRESS=caller they
// run inside Wait/Test. Every rank must issue the same collectives in the
// same order (as with MPI/NCCL). sendbuf == recvbuf means in place.
//
// Errors: bad arguments are kInvalidArgument naming the argument; a peer
// that dies or stops responding fails the operation on every surviving rank
// (kUnavailable naming the peer, or kDeadlineExceeded after CIUIC_TIMEOUT_MS)
// and the communicator keeps returning that first error (sticky). Nothing
// aborts the process.
//
// GPU buffers: any buffer may be CUDA device memory. At the first
// collective on device memory the ranks decide together: NCCL (loaded at
// run time) when every rank has a GPU of its own, else host copies of the
// buffers around the host collectives (CIUIC_GPU=auto|nccl|host|off). As
// with CUDA-aware MPI the input must be ready when the call is made (work
// on the legacy default stream is waited for); the output is in device
// memory when the call or its Wait returns.
//
// Thread contract: a Communicator's methods may be called from one thread
// at a time (the usual "one thread per communicator"); Request::Wait/Test
// may be called from any thread.
#ifndef CIUIC_COLLECTIVES_H_
#define CIUIC_COLLECTIVES_H_

#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "ciuic/kernels.h"
#include "ciuic/status.h"
#include "ciuic/store.h"

namespace ciuic {

namespace collectives {
struct OpDesc;
struct OpState;
class CommImpl;
}  // namespace collectives


// The handle of an async operation. Copyable (shared state).
class Request {
 public:
  Request() = default;
  // Blocks until the operation is done; its status. Errors: the operation's.
  Status Wait();
  // The same for at most `timeout`: kDeadlineExceeded when it is not done
  // by then (it goes on; wait again). In caller mode (CIUIC_PROGRESS=caller)
  // the operations run inside the wait, so it may take longer.
  Status Wait(std::chrono::milliseconds timeout);
  // Whether it is done (without blocking). Errors: the operation's, once done.
  StatusOr<bool> Test();
  bool valid() const { return state_ != nullptr; }

 private:
  friend class collectives::CommImpl;
  friend class Communicator;
  std::shared_ptr<collectives::OpState> state_;
  std::shared_ptr<collectives::CommImpl> comm_;
};

// The color of a rank that takes part in a Split but joins no new
// communicator (MPI_UNDEFINED's role; CIUIC_UNDEFINED in the C ABI).
inline constexpr int kUndefinedColor = -32766;

// A rendezvous id (the role of NCCL's ncclUniqueId): one process makes it,
// which starts the store in that process, and hands it to every rank by
// its own means (MPI_Bcast, a file, a framework's store); every rank then
// creates its communicator from it. It holds the job secret: pass it only
// over a channel the job trusts.
struct UniqueId {
  static constexpr size_t kBytes = 256;
  char bytes[kBytes] = {};
};

class Communicator {
 public:
  // Rank, size and store from the environment (CIUIC_RANK / CIUIC_WORLD_SIZE
  // / CIUIC_STORE_ADDR, or Open MPI / Slurm / PMI variables); rank 0 serves
  // the store unless CIUIC_STORE_EXTERNAL=1. Errors: those of DiscoverJob,
  // store connection, backend opening.
  static StatusOr<std::unique_ptr<Communicator>> CreateFromEnv();
  // The same with the knobs of `config` (rank, size and rendezvous still
  // from it and the launcher's variables).
  static StatusOr<std::unique_ptr<Communicator>> CreateFromEnv(Config config);
  // Explicit rank/size/store address ("host:port"); other knobs from the
  // environment (`config`).
  static StatusOr<std::unique_ptr<Communicator>> Create(int rank, int size,
                                                        const std::string& store_addr,
                                                        const Config& config);
  // Over the TCP store at host:port proving `secret`; rank 0 serves it
  // unless `external`. Errors: as Create.
  static StatusOr<std::unique_ptr<Communicator>> CreateTcp(int rank, int size, const std::string& host,
                                                           uint16_t port, bool external,
                                                           const std::string& secret,
                                                           const Config& config);
  // With a store the caller made (tests, embedding frameworks). Its keys
  // go under a per-process count of communicators ("ciuic/commN"), so every
  // process must create its communicators over one store in the same order
  // (Split's communicators are named by their parent instead).
  static StatusOr<std::unique_ptr<Communicator>> CreateWithStore(
      int rank, int size, const std::shared_ptr<transport::Store>& store, const Config& config);
  // The same with the keys under `prefix`, which names this communicator
  // alike on its ranks and no other in the job: for groups that not every
  // process makes, or not in the same order (a framework's subgroups, each
  // on its own store prefix). Errors: kInvalidArgument for an empty prefix.
  static StatusOr<std::unique_ptr<Communicator>> CreateWithStore(
      int rank, int size, const std::shared_ptr<transport::Store>& store, const Config& config,
      const std::string& prefix);
  // Makes a rendezvous id in this process: starts a store server on every
  // interface (a free port; the address of the interface
  // CIUIC_SOCKET_IFNAME selects) with config.secret, or a fresh random
  // secret when that is empty. The server lives in this process for as long
  // as a communicator made here from the id does (until the process ends
  // when none is). On failure the id still says why (see CreateFromId), so
  // a process that broadcasts it passes the error on.
  // Errors: kInvalidArgument (null id, a secret too long for the id:
  // UniqueId holds 243 bytes of host and secret), kUnavailable (no
  // interface, no randomness, the server could not start).
  static Status MakeUniqueId(const Config& config, UniqueId* id);
  // This rank of `size` over the store an id names (every rank passes the
  // same id). Errors: kInvalidArgument (rank or size out of range),
  // kDataLoss (the bytes are not an id), kUnavailable (the id says it could
  // not be made, and why), those of Create.
  static StatusOr<std::unique_ptr<Communicator>> CreateFromId(int rank, int size, const UniqueId& id,
                                                              const Config& config);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  // "shm", "tcp" or "verbs"; on several hosts the kinds this rank's pairs
  // use, joined by '+': "shm+tcp" (shm inside its host, tcp between hosts).
  std::string transport_name() const;
  // The kinds any pair of the communicator uses, alike on every rank (a
  // benchmark header's): "shm+tcp" even on a rank alone on its host.
  std::string job_transport_name() const;
  // Each rank's host, numbered in order of first appearance (rank 0 is on
  // host 0): ranks with one number share memory (shm between them).
  std::vector<int> host_of() const;

  Status AllReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op);
  Status Broadcast(void* buf, size_t count, DataType dtype, int root);
  Status Reduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, ReduceOp op,
                int root);
  Status AllGather(const void* sendbuf, void* recvbuf, size_t sendcount, DataType dtype);
  // recvcounts[size()]; rank r's block lands at the sum of the counts before r.
  Status AllGatherV(const void* sendbuf, void* recvbuf, const size_t* recvcounts, DataType dtype);
  Status ReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount, DataType dtype,
                       ReduceOp op);
  Status ReduceScatterV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                        DataType dtype, ReduceOp op);
  // sendbuf holds size() blocks of `count`; block p goes to rank p.
  Status AllToAll(const void* sendbuf, void* recvbuf, size_t count, DataType dtype);
  // The root's recvbuf gets size() blocks of `count`, rank r's at r x count
  // (the root's input inside it at root x count: in place). recvbuf is used
  // at the root only.
  Status Gather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);
  // Rank r gets block r of the root's sendbuf (size() blocks of `count`;
  // the root's recvbuf may be its own block of it: in place). sendbuf is
  // used at the root only.
  Status Scatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);
  // sendcounts[p] elements at sdispls[p] go to rank p; recvcounts[p] from
  // rank p land at rdispls[p] (null displacements: packed in rank order).
  // What p sends this rank must be what this rank expects from p (else an
  // error naming p). Never in place.
  Status AllToAllV(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls, void* recvbuf,
                   const size_t* recvcounts, const size_t* rdispls, DataType dtype);
  Status Barrier();
  // Messages between two ranks match in order per tag (0 <= tag < 65536);
  // each tag in use has a connection of its own.
  Status Send(const void* buf, size_t count, DataType dtype, int peer, int tag = 0);
  Status Recv(void* buf, size_t count, DataType dtype, int peer, int tag = 0);

  StatusOr<Request> IAllReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                               ReduceOp op);
  StatusOr<Request> IBroadcast(void* buf, size_t count, DataType dtype, int root);
  StatusOr<Request> IReduce(const void* sendbuf, void* recvbuf, size_t count, DataType dtype,
                            ReduceOp op, int root);
  StatusOr<Request> IAllGather(const void* sendbuf, void* recvbuf, size_t sendcount, DataType dtype);
  StatusOr<Request> IAllGatherV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                DataType dtype);
  StatusOr<Request> IReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                   DataType dtype, ReduceOp op);
  StatusOr<Request> IReduceScatterV(const void* sendbuf, void* recvbuf, const size_t* recvcounts,
                                    DataType dtype, ReduceOp op);
  StatusOr<Request> IAllToAll(const void* sendbuf, void* recvbuf, size_t count, DataType dtype);
  StatusOr<Request> IGather(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);
  StatusOr<Request> IScatter(const void* sendbuf, void* recvbuf, size_t count, DataType dtype, int root);
  StatusOr<Request> IAllToAllV(const void* sendbuf, const size_t* sendcounts, const size_t* sdispls, void* recvbuf,
                               const size_t* recvcounts, const size_t* rdispls, DataType dtype);
  StatusOr<Request> IBarrier();
  StatusOr<Request> ISend(const void* buf, size_t count, DataType dtype, int peer, int tag = 0);
  StatusOr<Request> IRecv(void* buf, size_t count, DataType dtype, int peer, int tag = 0);

  // A premul_sum op of this communicator (as NCCL's ncclRedOpCreatePreMulSum):
  // pass it wherever a ReduceOp goes (all-reduce, reduce, reduce-scatter,
  // fusion buckets) on floating-point dtypes; each rank's input is multiplied
  // by `factor` before the sum (in f32 for the 8- and 16-bit floats under
  // CIUIC_ACCUMULATE=f32, in the dtype under wire). The op is a value of 256
  // or more, valid on this communicator until DestroyReduceOp.
  // Errors: kInvalidArgument (factor not finite), kResourceExhausted (65536
  // live ops).
  StatusOr<ReduceOp> CreatePremulSum(double factor);
  // Errors: kInvalidArgument naming an op that CreatePremulSum did not
  // return here or that was destroyed.
  Status DestroyReduceOp(ReduceOp op);

  // Sub-communicators (MPI_Comm_split): collective over this communicator,
  // in call order with its collectives. The ranks that pass the same
  // `color` (>= 0) form a new communicator, ranked by `key` (ties by their
  // rank here); a rank passing kUndefinedColor takes part and gets null.
  // The new communicator has this one's knobs, secret and store, its keys
  // under this one's prefix and the split's number (so communicators split
  // off one parent never collide, whatever else the processes create), its
  // own connections, queue and progress thread: it runs concurrently with
  // the parent and its siblings, and lives on when they are destroyed. It
  // shares the parent's store (connection and, where this process serves
  // it, the server, which then stays up to the end of the process: other
  // processes' splits meet through it). premul_sum ops are not copied.
  // Errors of forming it name ranks in this communicator's numbering.
  // Errors: kInvalidArgument naming the rank that passed a color < 0 other
  // than kUndefinedColor (on every rank); this communicator's errors (the
  // colors go round as an all-gather); those of creating the new one.
  StatusOr<std::unique_ptr<Communicator>> Split(int color, int key);
  // Split(0, rank()): the same ranks on a communicator of their own.
  StatusOr<std::unique_ptr<Communicator>> Dup();

  // Fails every pending and later operation with kAborted; returns at once.
  void Abort();

  // The algorithm the last operation ran and why (for logs and benchmarks).
  std::string last_algorithm() const;

 private:
  explicit Communicator(std::shared_ptr<collectives::CommImpl> impl);
  friend class collectives::CommImpl;

  // Each operation's arguments, checked, as the implementation takes them;
  // Run runs one now on this thread (the blocking forms), Post queues it
  // (the I-forms).
  StatusOr<collectives::OpDesc> AllReduceCall(const void* s, void* r, size_t n, DataType t, ReduceOp o) const;
  StatusOr<collectives::OpDesc> BroadcastCall(void* b, size_t n, DataType t, int root) const;
  StatusOr<collectives::OpDesc> ReduceCall(const void* s, void* r, size_t n, DataType t, ReduceOp o, int root) const;
  StatusOr<collectives::OpDesc> AllGatherCall(const void* s, void* r, size_t n, DataType t) const;
  StatusOr<collectives::OpDesc> AllGatherVCall(const void* s, void* r, const size_t* c, DataType t) const;
  StatusOr<collectives::OpDesc> ReduceScatterCall(const void* s, void* r, size_t n, DataType t, ReduceOp o) const;
  StatusOr<collectives::OpDesc> ReduceScatterVCall(const void* s, void* r, const size_t* c, DataType t,
                                                   ReduceOp o) const;
  StatusOr<collectives::OpDesc> AllToAllCall(const void* s, void* r, size_t n, DataType t) const;
  StatusOr<collectives::OpDesc> RootedBlocksCall(bool gather, const void* s, void* r, size_t n, DataType t,
                                                 int root) const;
  StatusOr<collectives::OpDesc> AllToAllVCall(const void* s, const size_t* sc, const size_t* sd, void* r,
                                              const size_t* rc, const size_t* rd, DataType t) const;
  StatusOr<collectives::OpDesc> BarrierCall() const;
  StatusOr<collectives::OpDesc> PointToPointCall(bool send, const void* b, size_t n, DataType t, int peer,
                                                 int tag) const;
  Status Run(collectives::OpDesc&& desc);
  StatusOr<Request> Post(collectives::OpDesc&& desc);
  // The op a call names, checked against `dtype`: a built-in one, or a
  // premul_sum of CreatePremulSum (kPremulSum and its factor).
  Status ResolveOp(DataType dtype, ReduceOp op, collectives::OpDesc* desc) const;

  std::shared_ptr<collectives::CommImpl> impl_;
  std::map<int, double> premul_ops_;  // CreatePremulSum's ops and factors
  int splits_ = 0;                    // Split calls so far: names the next one's keys
  int next_premul_op_ = 256;
};

// Fusion: many small tensors of one dtype packed into few all-reduces.
// Add copies a tensor into the open pack; a pack that would exceed
// `capacity_bytes` is sent (IAllReduce, in place) and a new one opened;
// Flush sends the open pack; Wait flushes, waits for every pack and copies
// the results back into the tensors. A tensor larger than the capacity is
// all-reduced in place on its own. Every rank must add the same sizes in
// the same order. Packs are reused, so steady-state training steps allocate
// nothing. GPU tensors (CUDA device memory) are copied into and out of the
// host packs. Thread contract: one thread at a time.
class FusionBucket {
 public:
  // capacity_bytes 0 = CIUIC_BUFFER_SIZE. Errors: none at construction; Add
  // reports bad arguments.
  FusionBucket(Communicator& comm, DataType dtype, ReduceOp op, size_t capacity_bytes);
  ~FusionBucket();
  FusionBucket(const FusionBucket&) = delete;
  FusionBucket& operator=(const FusionBucket&) = delete;

  // Errors: kInvalidArgument (null tensor with count > 0), the IAllReduce's.
  Status Add(void* tensor, size_t count);
  Status Flush();
  // Errors: the first failed all-reduce's (every tensor is still waited for).
  Status Wait();
  // Flushes; true (after doing what Wait does, without blocking) when every
  // all-reduce sent is done, false while one is under way. Errors: Wait's.
  StatusOr<bool> Test();
  // All-reduces issued so far (packs plus oversized tensors).
  size_t allreduces_issued() const { return issued_; }

 private:
  struct Pack;
  Communicator& comm_;
  DataType dtype_;
  ReduceOp op_;
  size_t capacity_;
  std::vector<std::unique_ptr<Pack>> packs_;  // packs_[0..used_) are in use
  size_t used_ = 0;
  std::vector<Request> solo_;  // oversized tensors
  size_t issued_ = 0;
};

// Balanced contiguous partition: items with `costs` split into `parts`
// ranges minimising the largest total; returns parts+1 boundaries.
// Errors: kInvalidArgument (parts < 1, a negative or non-finite cost).
StatusOr<std::vector<size_t>> PartitionByCost(const std::vector<double>& costs, int parts);

}  // namespace ciuic

#endif  // CIUIC_COLLECTIVES_H_
