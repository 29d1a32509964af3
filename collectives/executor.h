// The executor: runs one rank's Schedule over transport Links, chunk by
// chunk, with the reduction kernels. The same schedules run in the
// simulator (simulator.h); this is the real thing.
//
// Chunking: every message and local step is split into chunks of
// slot_size / element_size elements (the same split on every rank, so the
// k-th chunk sent is the k-th chunk received). A message of 0 elements is
// still one empty chunk, so count-0 messages synchronise (barrier).
// Matching: on each link (peer, channel) the receiving steps consume
// incoming chunks in step order, and sending steps send in step order.
// Fusion: kRecvReduceSend reduces the incoming chunk with the local operand
// straight into the next link's send slot (on shm that slot is the peer's
// memory), so a pipelined ring touches each byte once per hop.
// Zero-copy sends: on links that do not write into the peer's memory (tcp,
// verbs), a chunk whose
// buffer comes with a registered region (ExecBuffers::*_region) is written
// to the peer straight from that buffer instead of through a staging slot;
// such a chunk is done (for dependencies and for the run) when its write
// completes, so nothing overwrites bytes still on their way out.
//
// Thread contract: an Executor is used by one thread at a time.
#ifndef CIUIC_COLLECTIVES_EXECUTOR_H_
#define CIUIC_COLLECTIVES_EXECUTOR_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "ciuic/kernels.h"
#include "transport/transport.h"
#include "collectives/schedule.h"

namespace ciuic::collectives {

// Where the links come from: the communicator creates them on first use.
// Get is called for every (peer, channel) a schedule uses, in ascending
// peer order, before the schedule starts; a source may return null while
// the link is still being set up (without waiting on the peer): it is
// asked again on every pass, and steps on that link wait for it.
using LinkSource = std::function<StatusOr<transport::Link*>(int peer, int channel)>;

// dst = op over srcs in order, any number of them: the kernel takes up to
// kernels::kMaxSources at once, more are folded in left to right, the same
// on every rank. dst may be one of the first kMaxSources inputs (the
// kernel allows an input identical to its output), none after them.
Status ReduceInOrder(const kernels::Reducer& reducer, void* dst, const void* const* srcs, int n, size_t count,
                     DataType dtype, ReduceOp op);

struct ExecBuffers {
  const void* input = nullptr;
  size_t input_count = 0;  // elements
  void* output = nullptr;
  size_t output_count = 0;
  void* scratch = nullptr;
  size_t scratch_count = 0;
  // Optional registrations covering the buffers above (their data() at or
  // before the buffer's start): sends from them go zero-copy.
  const transport::MemoryRegion* input_region = nullptr;
  const transport::MemoryRegion* output_region = nullptr;
  const transport::MemoryRegion* scratch_region = nullptr;
};

// One schedule with its buffers and element type; RunMany runs several
// at once (consecutive point-to-point operations, which must progress
// together: a send and a receive between two ranks posted in either order).
struct ExecJob {
  const Schedule* schedule = nullptr;
  ExecBuffers buffers;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  // The links' slot size (0: ask the first link; every link of a
  // communicator has the same), for cutting steps into chunks before every
  // link exists.
  size_t slot_bytes = 0;
  // Chunks of at most this many bytes (0: the links' slot size; never more
  // than that). Every rank of an operation must use the same value: chunk k
  // of a step is the same element range on the sender and the receiver.
  size_t chunk_bytes = 0;
  // Keeps the regions of `buffers` alive (or referenced in a registration
  // cache) as long as any copy of the job.
  std::vector<std::shared_ptr<const void>> keep;
};

class Executor {
 public:
  // `spin`: how long waits spin before yielding (transport::WaitFor).
  // `waiter`: what waits sleep on (the backend, or all of a rank's).
  Executor(transport::ActivityWaiter& waiter, const kernels::Reducer& reducer,
           std::chrono::microseconds spin = transport::kDefaultSpin)
      : parts_{waiter, reducer, spin} {}

  // Runs `schedule` to completion. `op` is the per-step reduction (AVG is
  // the caller's: sum here, scale after). `abort` (may be null) set by
  // another thread stops the run with kAborted. Errors: kInvalidArgument (a
  // range outside its buffer, a malformed schedule), kDeadlineExceeded
  // naming the step, its peer and chunk, kDataLoss (a peer sent a chunk of
  // the wrong size), the links' errors (which name the peer).
  Status Run(const Schedule& schedule, const ExecBuffers& buffers, DataType dtype,
             ReduceOp op, const LinkSource& links,
             std::chrono::steady_clock::time_point deadline, const std::atomic<bool>* abort);
  // Runs the jobs concurrently; on each link, the messages of job i come
  // before those of job i+1. `more` (may be empty) is asked on every pass
  // for jobs to join the run (their schedules must outlive it): posted
  // sends and receives progress together whatever the order they were
  // posted in. `job_done` (may be empty) is told, at the end of the pass
  // that finished it, each job whose steps are all done: its buffers are
  // the caller's again and its operation may complete while later jobs
  // still run (a receive must not wait for a send the peer has not asked
  // for yet). The run itself ends once the peers have taken every send.
  // Errors: as Run.
  using MoreJobs = std::function<void(std::vector<ExecJob>*)>;
  using JobDone = std::function<void(size_t job)>;
  Status RunMany(const std::vector<ExecJob>& jobs, const LinkSource& links,
                 std::chrono::steady_clock::time_point deadline, const std::atomic<bool>* abort,
                 const MoreJobs& more, const JobDone& job_done = nullptr);

  // What every run uses.
  struct Parts {
    transport::ActivityWaiter& waiter;
    const kernels::Reducer& reducer;
    std::chrono::microseconds spin;
  };

 private:
  Parts parts_;
};

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_EXECUTOR_H_
