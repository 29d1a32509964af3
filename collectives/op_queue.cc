// OpQueue: see op_queue.h.
#include "collectives/op_queue.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>

#include <chrono>


namespace ciuic::collectives {

void Complete(OpState& op, Status s) {
  {
    std::lock_guard<std::mutex> lock(op.mu);
    op.status = std::move(s);
    op.done.store(true, std::memory_order_release);
  }
  op.cv.notify_all();
}

OpQueue::~OpQueue() { Shutdown(); }

void OpQueue::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& op : queue_) Complete(*op, AbortedError("communicator destroyed"));
  queue_.clear();
  queued_.store(0, std::memory_order_release);
}

std::string OpQueue::StartProgressThread(const std::vector<int>& cpus) {
  thread_ = std::thread([this] { ProgressLoop(); });
  pthread_setname_np(thread_.native_handle(), "ciuic-progress");
  if (cpus.empty()) return "";
  // Pinned here, before anything is queued, so the affinity holds from the
  // first operation and a test reads it without a race.
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  }
  const int err = pthread_setaffinity_np(thread_.native_handle(), sizeof(set), &set);
  return err == 0 ? "" : std::string("pthread_setaffinity_np: ") + std::strerror(err);
}

void OpQueue::ProgressLoop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and drained
    }
    RunNext();
  }
}

std::shared_ptr<OpState> OpQueue::Submit(OpDesc desc) {
  auto op = std::make_shared<OpState>();
  op->desc = std::move(desc);
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(op);
    queued_.store(queue_.size(), std::memory_order_release);
  }
  cv_.notify_one();
  return op;
}

std::shared_ptr<OpState> OpQueue::RunHere(OpDesc desc) {
  Batch batch{std::make_shared<OpState>()};
  batch[0]->desc = std::move(desc);
  Status s = run_(&batch);
  for (auto& op : batch) {
    if (!op->done.load(std::memory_order_acquire)) Complete(*op, s);  // some complete early
  }
  return batch[0];
}

bool OpQueue::RunNext() {
  Batch batch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return false;
    batch.push_back(queue_.front());
    queue_.pop_front();
    running_.fetch_add(1, std::memory_order_relaxed);  // published by the release below
    queued_.store(queue_.size(), std::memory_order_release);
  }
  Status s = run_(&batch);
  for (auto& op : batch) {
    if (!op->done.load(std::memory_order_acquire)) Complete(*op, s);  // some complete early
  }
  running_.fetch_sub(1, std::memory_order_release);
  return true;
}

void OpQueue::TakeFront(const std::function<bool(const OpDesc&)>& take, Batch* batch) {
  std::lock_guard<std::mutex> lock(mu_);
  while (!queue_.empty() && take(queue_.front()->desc)) {
    batch->push_back(queue_.front());
    queue_.pop_front();
    queued_.store(queue_.size(), std::memory_order_release);
  }
}

Status OpQueue::Wait(OpState& op) {
  if (!threaded()) {
    // Caller mode: run queued operations in order up to this one.
    while (!op.done.load(std::memory_order_acquire) && RunNext()) {
    }
  } else {
    // Spin briefly (the op may be about to finish), then sleep.
    const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
    while (!op.done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < spin_until) sched_yield();
    std::unique_lock<std::mutex> lock(op.mu);
    op.cv.wait(lock, [&] { return op.done.load(std::memory_order_acquire); });
  }
  std::lock_guard<std::mutex> lock(op.mu);
  return op.status;
}

Status OpQueue::Wait(OpState& op, std::chrono::milliseconds timeout) {
  if (!threaded()) return Wait(op);
  std::unique_lock<std::mutex> lock(op.mu);
  if (!op.cv.wait_for(lock, timeout, [&] { return op.done.load(std::memory_order_acquire); })) {
    return DeadlineExceededError("the operation is not done after " + std::to_string(timeout.count()) + " ms");
  }
  return op.status;
}

bool OpQueue::Test(OpState& op) {
  // Caller mode: Test makes progress by running the queue up to this op.
  if (!threaded() && !op.done.load(std::memory_order_acquire)) (void)Wait(op);
  return op.done.load(std::memory_order_acquire);
}

}  // namespace ciuic::collectives
