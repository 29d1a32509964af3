// The direct shared-memory all-reduce: ranks of one host reduce straight
// out of each other's memory, with no message rings and no schedule.
//
// Every rank owns one shared region (shm backend pool memory, mapped by all
// peers): a control block and two rings of slots, the large ring (`nslots`
// slots of `slot_bytes`, CIUIC_BUFFER_SIZE / CIUIC_CHUNK_SIZE) and the small
// ring (`small_slots` one-shot-sized slots). An operation that fits one
// small slot runs on the small ring, any other on the large ring, the same
// on every rank. It is cut into chunks of at most its ring's slot size;
// chunk g of a ring (counted over the life of the communicator, the same
// on every rank) lives in slot g % nslots of that ring in every region.
// Each slot's header carries a stamp (chunk + 1 once its data is in), and
// two counters per rank, each only ever increased by its owner and read by
// the others, carry the rest of the protocol:
//   reduced = chunks whose slice this rank has reduced (two-shot),
//   out     = chunks this rank has finished reading from every region
//             (one per ring).
// A slot is reused for chunk g + nslots once every rank's `out` passed g.
// Each rank also announces the operation it is in (sequence, ring,
// arguments), so a rank that waits on a peer running another operation on
// the other ring names it at once.
//
// One-shot (small chunks): copy in, wait until every rank is ready, reduce
// all n slots in rank order straight into the output. Two-shot (the rest,
// the issue's "each rank reduces its slice of all peers' buffers in one
// n-ary pass, then everyone copies the slices out"): slice q of a chunk is
// reduced by rank q from the n regions (its own slice straight from its
// input, which is why it never copies that slice in) into its own slot,
// then every rank copies the n reduced slices into its output. Either way
// each element is reduced once, in rank order, by one kernel call, so all
// ranks end with identical bytes, run after run.
//
// Waiting spins, then yields, then sleeps on a futex word in the awaited
// peer's control block (woken only when someone sleeps there), checking the
// peer's liveness (its shm connection), the abort flag and the deadline.
// Each chunk's slot header records the operation (sequence, count, type,
// op) so a peer that called with other arguments is named, not trusted.
//
// Thread contract: one thread at a time (the communicator's exec lock).
#ifndef CIUIC_COLLECTIVES_SHM_DIRECT_H_
#define CIUIC_COLLECTIVES_SHM_DIRECT_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ciuic/kernels.h"
#include "ciuic/status.h"
#include "transport/transport.h"

namespace ciuic::collectives {

struct ShmDirectOptions {
  size_t slot_bytes = 512u << 10;  // CIUIC_CHUNK_SIZE
  size_t nslots = 8;               // CIUIC_BUFFER_SIZE / CIUIC_CHUNK_SIZE
  // Chunks of at most this many bytes run one-shot (every rank reduces the
  // whole chunk): one hand-off instead of two, but every rank reads all n
  // inputs across cores (two-shot: 1/n of them). 16 KiB keeps the hand-off
  // count low where latency dominates and the cross-core traffic low where
  // bandwidth does, for any rank count.
  size_t one_shot_max_bytes = 16u << 10;
  // The largest input (bytes per rank) of a reduce or reduce-scatter, and
  // of an all-gather or all-to-all, that runs in one exchange (the
  // communicator's choice; at most one large slot). The exchange has no
  // pipelining (every input is copied in whole before anyone reads), so
  // above some size the schedules win; the root of a reduce reads all n
  // inputs in one pass, which the schedules cannot. The limits are measured
  // crossovers (perf/RESULTS.md); the registry's entries apply up to them.
  size_t exchange_reduce_max_bytes = 256u << 10;
  size_t exchange_move_max_bytes = 64u << 10;
  // Slots of the small ring (each min(one_shot_max_bytes, slot_bytes)),
  // which takes every operation that fits one of them (0: none; everything
  // on the large ring). Small calls then run up to this many calls ahead
  // of the slowest rank instead of nslots, and a small call no longer
  // ties up a whole large slot.
  size_t small_slots = 64;
  // Two-shot operations at least this large copy the reduced slices into
  // the caller's output with streaming (non-temporal) stores: an output of
  // half the last-level cache or more would not stay cached anyway, and
  // cached stores first read every output line; below it, streaming into
  // an output that would stay cached is slower. The communicator passes its
  // kernels' non-temporal threshold.
  size_t stream_output_min_bytes = 16u << 20;
  // How long a wait spins before yielding (then sleeping): 0 when ranks
  // outnumber the CPUs they share, where a spinner holds the core the
  // awaited rank needs (Open MPI's yield_when_idle).
  std::chrono::microseconds spin{4};
  // All-reduces of cma_min_bytes to cma_max_bytes may run single-copy
  // (see ShmDirect::AllReduce) when every rank can read every other's
  // memory with process_vm_readv (probed in Create); `cma`: 0 never, 1 when
  // measured faster than the slots, 2 always (Create fails when it
  // cannot). CIUIC_SHM_CMA=off|auto|on, CIUIC_SHM_CMA_MIN / _MAX.
  int cma = 1;
  size_t cma_min_bytes = 256u << 10;
  size_t cma_max_bytes = 64u << 20;
};

class ShmDirect {
 public:
  // Collective over all `size` ranks: allocates this rank's region, connects
  // to every peer (through `store` under `prefix`) and maps their regions.
  // Errors: kUnimplemented (`backend` cannot map peer memory: not shm),
  // kInvalidArgument (a peer's region has another layout: CIUIC_BUFFER_SIZE
  // or CIUIC_CHUNK_SIZE differ between ranks), the store's and backend's.
  static StatusOr<std::unique_ptr<ShmDirect>> Create(transport::Backend& backend,
                                                     transport::Store& store,
                                                     const std::string& prefix, int rank,
                                                     int size, const ShmDirectOptions& options,
                                                     std::chrono::milliseconds timeout,
                                                     const transport::PeerCheck& check = {});
  ~ShmDirect();
  ShmDirect(const ShmDirect&) = delete;
  ShmDirect& operator=(const ShmDirect&) = delete;

  // recv = op over every rank's send, `count` elements (send == recv: in
  // place; other overlaps are the caller's to avoid). `op` must not be
  // kAvg (sum, then scale). `cached` runs the kernels; `streaming` (may be
  // null), the same kernels with non-temporal stores. A two-shot
  // operation runs one of three modes, whichever rank 0 measured fastest
  // for that size lately (the same on every rank; see Impl::ModeFor):
  // through the slots with cached or with streaming stores into what peers
  // read (cross-core reads of freshly written lines can turn several times
  // slower for a while), or single-copy (below). Large outputs are
  // written with streaming stores (stream_output_min_bytes). Errors:
  // kDeadlineExceeded / kUnavailable naming the rank waited for, kAborted,
  // kDataLoss (a peer's operation differs: mismatched count, type or op).
  // After an error the object is unusable.
  //
  // Single-copy (cross-memory attach, as Open MPI's vader/smsc uses), a
  // candidate when the size is in [cma_min_bytes, cma_max_bytes] and every
  // rank can read the others' memory: each rank announces its send and recv addresses,
  // reduces its slice of every rank's input, reading the peers' slices
  // with process_vm_readv in L2-sized pieces, straight into its recv, then
  // reads every peer's reduced slice from the peer's recv into its own,
  // and returns once every peer has read its slice. Each byte crosses
  // between processes once (the slot path copies it in, then out), and no
  // rank reads lines another core has just written.
  Status AllReduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                   const kernels::Reducer& cached, const kernels::Reducer* streaming,
                   std::chrono::steady_clock::time_point deadline, const std::atomic<bool>* abort);

  // Whether an all-reduce of `bytes` fits AllReduceSmall (one chunk,
  // one-shot, on the small ring, at most 256 ranks).
  bool FitsSmall(size_t bytes) const;
  // AllReduce for what FitsSmall accepts, with the same bytes, protocol and
  // errors, without the general loop's set-up: the path of a loop of small
  // calls (CommImpl's cached entry). `timeout` counts from the first wait.
  Status AllReduceSmall(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                        const kernels::Reducer& reducer, std::chrono::milliseconds timeout,
                        const std::atomic<bool>* abort);

  // buf of every rank = buf of `root`, `count` elements, through the same
  // slots and counters: the root copies each chunk into its slot (a small
  // one into the slot's header line), every other rank copies it out of the
  // root's slot; the root may run nslots chunks ahead. One hand-off per
  // chunk and no rings: for a small broadcast the schedule path's per-call
  // overhead is most of its time.
  // Errors: as AllReduce (a peer in another operation or with another root
  // is named).
  Status Broadcast(void* buf, size_t count, DataType dtype, int root, const kernels::Reducer& copier,
                   std::chrono::steady_clock::time_point deadline, const std::atomic<bool>* abort);

  // Small collectives in one exchange: every rank copies its whole input
  // (at most one slot) into its slot, waits until every rank's is in, and
  // takes what it needs from all n slots (in rank order), so a call costs
  // one hand-off and no rings. The root of a reduce reduces the n inputs;
  // the other ranks of a reduce leave once their input is in. Inputs may
  // lie inside the outputs (in place): they are copied before any output
  // is written. Errors: as AllReduce; kInvalidArgument when an input does
  // not fit a slot.
  Status Reduce(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op, int root,
                const kernels::Reducer& reducer, std::chrono::steady_clock::time_point deadline,
                const std::atomic<bool>* abort);
  Status AllGather(const void* send, void* recv, size_t count, DataType dtype, std::chrono::steady_clock::time_point deadline,
                   const std::atomic<bool>* abort);
  // `count`: elements each rank ends with (its input holds n * count).
  Status ReduceScatter(const void* send, void* recv, size_t count, DataType dtype, ReduceOp op,
                       const kernels::Reducer& reducer, std::chrono::steady_clock::time_point deadline,
                       const std::atomic<bool>* abort);
  // `count`: elements per peer (input and output hold n * count).
  Status AllToAll(const void* send, void* recv, size_t count, DataType dtype, std::chrono::steady_clock::time_point deadline,
                  const std::atomic<bool>* abort);
  Status Barrier(std::chrono::steady_clock::time_point deadline, const std::atomic<bool>* abort);

  // Whether an all-reduce of `bytes` runs one-shot: its first chunk (at
  // most slot_bytes) is small enough. The one rule, for the run and logs.
  static bool OneShot(size_t bytes, const ShmDirectOptions& options) {
    return std::min(bytes, options.slot_bytes) <= options.one_shot_max_bytes;
  }

  // Whether the single-copy path is on, or why not (for the log).
  bool cma() const;
  const std::string& cma_note() const;

  struct Impl;  // shm_direct.cc's

 private:
  explicit ShmDirect(std::unique_ptr<Impl> impl, const ShmDirectOptions& options);
  std::unique_ptr<Impl> impl_;
  ShmDirectOptions options_;
};

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_SHM_DIRECT_H_
