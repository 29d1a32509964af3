// Private: the communicator's operations in call order. An operation is
// submitted (async calls, and blocking ones when something is queued ahead)
// and run, one batch at a time, by `run`: on the progress thread
// (CIUIC_PROGRESS=thread), or in caller mode by whoever waits. A batch is
// the front operation; `run` may take the point-to-point operations queued
// behind a point-to-point one into it (TakeFront), so sends and receives
// posted in either order progress together.
//
// Thread contract: Submit, Wait, Test and Empty from any thread; `run` is
// called by one thread at a time (the progress thread or a waiter).
#ifndef CIUIC_COLLECTIVES_OP_QUEUE_H_
#define CIUIC_COLLECTIVES_OP_QUEUE_H_

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ciuic/status.h"
#include "collectives/plan.h"

namespace ciuic::collectives {

// One operation and, once done, its status (a Request's shared state).
struct OpState {
  OpDesc desc;
  std::atomic<bool> done{false};
  Status status;  // written before `done` is set
  std::mutex mu;
  std::condition_variable cv;
};
// Sets the status and wakes the waiters.
void Complete(OpState& op, Status s);

class OpQueue {
 public:
  using Batch = std::vector<std::shared_ptr<OpState>>;
  // Runs a batch and returns its status (every operation of the batch
  // completes with it).
  using RunBatch = std::function<Status(Batch* batch)>;

  explicit OpQueue(RunBatch run) : run_(std::move(run)) {}
  // Stops the progress thread once the queue is drained (what it runs to
  // completion); anything left fails with kAborted.
  ~OpQueue();
  // Stops the progress thread once its current batch is done and fails what
  // is still queued (kAborted). Idempotent; the destructor calls it.
  void Shutdown();
  OpQueue(const OpQueue&) = delete;
  OpQueue& operator=(const OpQueue&) = delete;

  // Starts the progress thread ("ciuic-progress"), on `cpus` (empty: where
  // it starts, the creating thread's CPUs). Returns why it could not be
  // pinned, or "".
  std::string StartProgressThread(const std::vector<int>& cpus);
  bool threaded() const { return thread_.joinable(); }

  std::shared_ptr<OpState> Submit(OpDesc desc);
  // Nothing queued and nothing taken off the queue still running (two
  // atomic loads: the blocking calls' fast check). queued_ first: RunNext
  // counts an operation running before it leaves the count of queued ones.
  bool Empty() const {
    return queued_.load(std::memory_order_acquire) == 0 && running_.load(std::memory_order_acquire) == 0;
  }
  // Runs `desc` now on this thread as a batch of its own (nothing must be
  // queued: order is the caller's to keep) and returns its state, done.
  std::shared_ptr<OpState> RunHere(OpDesc desc);
  // Blocks until `op` is done (caller mode: runs the queue up to it); its
  // status.
  Status Wait(OpState& op);
  // At most `timeout` (thread mode): kDeadlineExceeded when not done by then.
  Status Wait(OpState& op, std::chrono::milliseconds timeout);
  // Whether `op` is done without blocking (caller mode: runs the queue up
  // to it first).
  bool Test(OpState& op);

  // For `run`: moves the front operations for which `take` is true (under
  // the queue's lock; the first false stops) into `batch`.
  void TakeFront(const std::function<bool(const OpDesc&)>& take, Batch* batch);

 private:
  bool RunNext();
  void ProgressLoop();

  RunBatch run_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<OpState>> queue_;
  // queue_.size(), kept beside it under mu_, read without it.
  std::atomic<size_t> queued_{0};
  // Operations RunNext took off the queue and has not finished: a blocking
  // call that saw the queue empty in between would overtake one of them.
  std::atomic<size_t> running_{0};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ciuic::collectives

#endif  // CIUIC_COLLECTIVES_OP_QUEUE_H_
