// Algorithms as data: the schedule one rank runs for one collective.
//
// A generator (algorithms.h) emits, for each rank, an ordered list of steps
// over element ranges of three buffers; the executor runs them over real
// transports and the simulator (simulator.h) runs the schedules of all ranks
// in one process. This file is the contract between them.
//
// Semantics (what an executor must implement):
// - Buffers: kInput is the caller's send buffer, kOutput its receive buffer,
//   kScratch a per-operation buffer of Schedule::scratch_count elements.
//   Ranges count ELEMENTS. Input and output may be the same memory (in-place
//   collectives; BufferLayout says how they overlap); generators never rely
//   on input staying intact once a range aliasing it was written, and
//   ValidateSchedule checks that with the layout.
// - Chunks: every step is processed in chunks of C elements (C = slot bytes /
//   element size), chunk k = elements [k*C, min((k+1)*C, count)) of each of
//   its ranges; a step of count 0 has one empty chunk (a message of count 0
//   is one zero-length chunk: barriers are made of those).
// - Messages: kSend, kRecvReduceSend and kRecvCopySend send one message of
//   `count` elements to send_peer on `channel`; kRecv* receive one from
//   recv_peer on `channel`. The k-th message rank A sends to rank B on
//   channel c is the k-th message B receives from A on channel c (in B's step
//   order), with the same count, and its chunks travel in order: a link
//   (A, B, c) carries the chunks of message k before those of message k+1.
// - Ops (dst/src/inputs are the ranges below; (+) is the reduction op):
//     kSend            send src
//     kRecv            dst = incoming
//     kRecvReduce      dst = src (+) incoming                (src first)
//     kRecvReduceSend  dst = src (+) incoming, then send dst to send_peer
//     kRecvCopySend    dst = incoming,         then send dst to send_peer
//     kCopy            dst = src (a copy whose src and dst are the same
//                      memory is a no-op and must be skipped: in-place)
//     kReduce          dst = inputs[0] (+) inputs[1] (+) ... in this order
//   AVG never appears: the executor sums and scales once at the end.
//   Reductions are elementwise, so the kernel may be called per chunk.
// - Aliasing inside a step: a destination is either disjoint from the step's
//   sources or exactly equal (same memory, same count) to src (kRecvReduce*,
//   kCopy) or to inputs[0] (kReduce) — the form reduction kernels support.
// - Forwarding steps (kRecvReduceSend, kRecvCopySend): chunk k is received,
//   stored into dst, and then sent from dst. The store of chunk k must not
//   wait for the outgoing link (which may still carry earlier messages):
//   an executor that forwards slot-to-slot must store and send later when
//   the outgoing link is busy. The step's chunk k is done once it was sent.
// - Scheduling: a step runs once its deps allow; several steps run at once;
//   each processes its chunks in order. DepMode::kWhole: the step starts
//   after every dep is completely done. DepMode::kPerChunk: chunk k may run
//   once chunk k of every dep is done (every dep has the step's count).
//   A send chunk is done when its source bytes have been consumed (copied
//   into the slot or written); a receive chunk when it is stored.
// - Determinism: generators make every rank end with the same bytes (each
//   element's final value is combined once, in one order, then copied), so
//   results do not depend on timing or on which rank you look at.
//
// Thread contract: plain values; ValidateSchedule and CheckMessageMatching
// are pure functions.
#ifndef CIUIC_COLLECTIVES_SCHEDULE_H_
#define CIUIC_COLLECTIVES_SCHEDULE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ciuic/status.h"

namespace ciuic::collectives {

// The caller's send buffer, receive buffer, and per-operation scratch.
enum class BufKind : uint8_t { kInput, kOutput, kScratch };

// Elements [offset, offset + count) of one buffer.
struct Range {
  BufKind buf = BufKind::kScratch;
  size_t offset = 0;
  size_t count = 0;
};

inline bool operator==(const Range& a, const Range& b) {
  return a.buf == b.buf && a.offset == b.offset && a.count == b.count;
}

enum class StepOp : uint8_t { kSend, kRecv, kRecvReduce, kRecvReduceSend, kRecvCopySend, kCopy, kReduce };
enum class DepMode : uint8_t { kWhole, kPerChunk };

struct Step {
  StepOp op = StepOp::kSend;
  int send_peer = -1;  // kSend, kRecvReduceSend, kRecvCopySend
  int recv_peer = -1;  // kRecv, kRecvReduce, kRecvReduceSend, kRecvCopySend
  int channel = 0;     // in [0, Schedule::nchannels)
  Range src;           // kSend: what is sent; kRecvReduce*/kCopy: local operand / source
  Range dst;           // kRecv*/kCopy/kReduce: where the result is stored
  std::vector<Range> inputs;  // kReduce: dst = inputs[0] (+) inputs[1] (+) ...
  std::vector<int> deps;      // indices of earlier steps of this rank
  DepMode dep_mode = DepMode::kWhole;
};

struct Schedule {
  std::string algorithm;  // "<collective>/<algorithm>", e.g. "allreduce/ring"
  int rank = 0;
  int nranks = 1;
  int nchannels = 1;         // channel ids used are in [0, nchannels)
  size_t scratch_count = 0;  // elements of scratch the executor provides
  std::vector<Step> steps;

  // One header line and one line per step (op, peers, channel, ranges,
  // deps), for humans: e.g.
  //   schedule allreduce/ring rank 1/4 channels 1 scratch 0 steps 7
  //     #0 send ->2 ch0 src=in[25..50)
  //     #1 recv_reduce_send <-0 ->2 ch0 src=in[0..25) dst=out[0..25)
  //     #4 recv_copy_send <-0 ->2 ch0 dst=out[25..50) deps=0
  std::string Dump() const;
};

// "send", "recv", "recv_reduce", "recv_reduce_send", "recv_copy_send",
// "copy", "reduce".
const char* StepOpName(StepOp op);
// "in", "out", "scratch".
const char* BufKindName(BufKind buf);

// True for ops that send (kSend, kRecvReduceSend, kRecvCopySend) / receive
// (kRecv, kRecvReduce, kRecvReduceSend, kRecvCopySend).
bool StepSends(StepOp op);
bool StepReceives(StepOp op);
// The element count a step processes (its message count; what kPerChunk
// deps compare): src.count for kSend, dst.count otherwise.
size_t StepCount(const Step& step);

// How one rank's input and output buffers are sized and overlap, in
// elements. Out-of-place: separate memory. In-place forms: the input is a
// part of the output (all-reduce, all-gather: input = output + offset) or the
// output a part of the input (reduce-scatter: output = input + offset).
struct BufferLayout {
  enum class Alias : uint8_t { kNone, kInputInOutput, kOutputInInput };
  size_t input_count = 0;
  size_t output_count = 0;
  Alias alias = Alias::kNone;
  size_t alias_offset = 0;  // elements from the start of the containing buffer
};

// Where input, output and scratch start (in elements) when one rank's
// buffers are laid out in a single address space honouring the layout's
// overlap (out-of-place: output, input, scratch one after another), and the
// total size. Used by ValidateSchedule and the simulator; an executor has
// real pointers instead.
struct BufferBases {
  size_t input = 0;
  size_t output = 0;
  size_t scratch = 0;
  size_t total = 0;
};
// Errors: kInvalidArgument when the layout puts one buffer outside the other.
StatusOr<BufferBases> LayoutBases(const BufferLayout& layout, size_t scratch_count);

// Checks one rank's schedule against its layout:
// - structure: rank/nranks/nchannels sane, peers in [0, nranks) and not the
//   rank itself, channels in range, deps point to earlier steps, kPerChunk
//   deps have the step's count, ranges of one step have consistent counts,
//   kReduce has >= 1 input;
// - bounds: every range inside its buffer (input_count, output_count,
//   scratch_count);
// - aliasing inside a step (see the header comment);
// - hazards: two steps that may run at the same time (not ordered by deps,
//   transitively) must not write memory the other reads or writes, taking
//   the in-place overlap of input and output into account. Steps ordered
//   only chunk by chunk (kPerChunk paths) may touch the same memory only
//   through identical ranges.
// check_hazards = false skips the last (quadratic) check.
// Errors: kInvalidArgument naming the rank, the step and the problem.
Status ValidateSchedule(const Schedule& schedule, const BufferLayout& layout, bool check_hazards = true);

// Checks that the schedules of all ranks (schedules[r].rank == r) agree:
// same nranks, and for every (sender, receiver, channel) the sequence of
// message counts sent equals the sequence received. Errors:
// kInvalidArgument naming the link and the message index ("rank 2 sends 3
// messages to rank 0 on channel 1 but rank 0 receives 2", count mismatch).
Status CheckMessageMatching(const std::vector<Schedule>& schedules);

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_SCHEDULE_H_
