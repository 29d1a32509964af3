// A deterministic in-process simulator for schedules (schedule.h): runs the
// schedules of all n ranks with per-(sender, receiver, channel) FIFO chunk
// queues of bounded capacity, the way an executor runs them over links of
// `slots_per_link` slots of `chunk_bytes` each.
//
// Execution: sweeps over ranks 0..n-1 and, inside a rank, over its steps in
// order; in one sweep every unfinished step whose deps allow moves at most
// one chunk (a forwarding step may also send one stored chunk). A step may
// move chunk k when its deps allow chunk k; a receive needs the next chunk
// of the link to be the next chunk of its message (earlier messages on that
// link are consumed by earlier steps first); a send needs a free slot and
// all earlier messages on that link fully sent. Forwarding steps store a
// chunk before they send it, and the store never waits for the outgoing
// link (see schedule.h). The run is deterministic: the same schedules and
// inputs give the same bytes and the same statistics.
//
// Detected and returned as errors (kInvalidArgument / kFailedPrecondition):
// schedules that fail ValidateSchedule (bounds, aliasing, hazards) or
// CheckMessageMatching; a chunk whose message has a different count than
// the receiving step expects; deadlock (steps left, no progress possible:
// the message lists what each blocked step waits for); messages never
// received. Thread contract: Simulate is a pure function (the reduce
// callback is called from the calling thread only).
#ifndef CIUIC_COLLECTIVES_SIMULATOR_H_
#define CIUIC_COLLECTIVES_SIMULATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "ciuic/status.h"
#include "collectives/schedule.h"

namespace ciuic::collectives {

// dst[i] = srcs[0][i] (+) srcs[1][i] (+) ... for i < count, elements of the
// size passed to Simulate. nsrcs >= 1 (1 = copy). dst never overlaps a
// source in the simulator (it reduces into a temporary).
using ReduceFn = std::function<void(void* dst, const void* const* srcs, int nsrcs, size_t count)>;

// Output and scratch bytes that no step wrote keep this value.
inline constexpr uint8_t kSimPoison = 0xA5;

struct SimOptions {
  size_t chunk_bytes = 4096;  // a chunk is max(1, chunk_bytes / elem_size) elements
  int slots_per_link = 2;     // chunks a link holds before the sender must wait (>= 1)
  bool check_hazards = true;  // run ValidateSchedule's hazard check per rank
  bool check_matching = true; // run CheckMessageMatching before simulating
  uint64_t max_sweeps = 0;    // 0 = unlimited (deadlock is still detected)
};

struct SimRankInput {
  BufferLayout layout;
  // The rank's input, layout.input_count * elem_size bytes (for
  // kOutputInInput, the whole input including the output part).
  std::vector<uint8_t> input;
};

struct SimStats {
  uint64_t sweeps = 0;         // round-robin passes until everything finished
  uint64_t chunks = 0;         // chunks that crossed a link
  uint64_t messages = 0;       // messages sent
  uint64_t bytes = 0;          // payload bytes that crossed links
  size_t max_link_occupancy = 0;  // most chunks queued on one link at once
};

struct SimResult {
  // Per rank: its output buffer (layout.output_count * elem_size bytes).
  std::vector<std::vector<uint8_t>> outputs;
  SimStats stats;
};

// Runs schedules[r] for every rank r with inputs[r]. Errors: kInvalidArgument
// for bad arguments (sizes, elem_size 0, slots < 1), invalid or mismatched
// schedules; kFailedPrecondition for a deadlock, a count mismatch seen at
// run time, a message never received, or max_sweeps exceeded.
StatusOr<SimResult> Simulate(const std::vector<Schedule>& schedules, const std::vector<SimRankInput>& inputs,
                             size_t elem_size, const ReduceFn& reduce, const SimOptions& options);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_SIMULATOR_H_
