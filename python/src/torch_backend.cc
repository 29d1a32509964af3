// _ciuic_torch: the torch.distributed backend "ciuic" (a c10d::Backend over a
// ciuic::Communicator). ciuic/torch.py registers it with
// torch.distributed.Backend.register_backend. Built against the installed
// torch's headers and libraries (the same pybind11 3.0.1 ABI, so torch's
// Store and Backend types pass between the two modules).
#include <Python.h>
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstddef>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ciuic/ciuic.hpp"
#include "python/src/args.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace py = pybind11;
using ciuic::Communicator;
using ciuic::DataType;
using ciuic::Request;
using ciuic::Status;
using ciuic::StatusOr;
using RedOp = c10d::ReduceOp;

namespace {

// ---------------------------------------------------------------------------
// The store torch hands the backend, as ciuic's Store. A TCPStore client
// serialises its operations, so a set from the progress thread would wait
// behind the caller thread's blocking wait: every thread gets its own clone.
// c10d reads a zero timeout as "forever" in some stores, so none is passed.
class TorchStore : public ciuic::transport::Store {
 public:
  TorchStore(c10::intrusive_ptr<c10d::Store> store, std::string prefix)
      : base_(std::move(store)), prefix_(std::move(prefix)) {}

  Status Set(const std::string& key, const std::string& value) override {
    return Guard("set", key, [&] { Mine()->set(prefix_ + key, std::vector<uint8_t>(value.begin(), value.end())); });
  }
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::string out;
    Status s = Guard("get", key, [&] {
      c10d::Store& st = *Mine();
      st.wait({prefix_ + key}, Positive(timeout));
      std::vector<uint8_t> v = st.get(prefix_ + key);
      out.assign(v.begin(), v.end());
    });
    if (!s.ok()) return s;
    return out;
  }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    return Guard("wait", keys.empty() ? std::string() : keys.front(), [&] { Mine()->wait(full, Positive(timeout)); });
  }
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    int64_t v = 0;
    Status s = Guard("add", key, [&] { v = Mine()->add(prefix_ + key, delta); });
    if (!s.ok()) return s;
    return v;
  }
  // Keys under `prefix` from now on (the epoch of this group's creation).
  void set_prefix(std::string prefix) { prefix_ = std::move(prefix); }
  c10::intrusive_ptr<c10d::Store> base() const { return base_; }

 private:
  static std::chrono::milliseconds Positive(std::chrono::milliseconds t) {
    return std::max(t, std::chrono::milliseconds(1));
  }
  c10::intrusive_ptr<c10d::Store> Mine() {
    std::lock_guard<std::mutex> lock(mu_);
    auto& s = clones_[std::this_thread::get_id()];
    if (!s) s = clones_.size() == 1 ? base_ : base_->clone();
    return s;
  }
  template <typename F>
  static Status Guard(const char* what, const std::string& key, F&& f) {
    try {
      f();
      return Status::Ok();
    } catch (const c10::Error& e) {
      std::string msg = e.what_without_backtrace();
      std::string lower = msg;
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
      std::string text = std::string("torch store ") + what + " '" + key + "': " + msg;
      if (lower.find("timeout") != std::string::npos || lower.find("timed out") != std::string::npos) {
        return ciuic::DeadlineExceededError(text);
      }
      return ciuic::UnavailableError(text);
    } catch (const std::exception& e) {
      return ciuic::UnavailableError(std::string("torch store ") + what + " '" + key + "': " + e.what());
    }
  }

  c10::intrusive_ptr<c10d::Store> base_;
  std::string prefix_;
  std::mutex mu_;
  std::unordered_map<std::thread::id, c10::intrusive_ptr<c10d::Store>> clones_;
};

// ThreadSanitizer annotations (tools/tsan-torch.sh): happens-before edges
// that pass through torch's uninstrumented code.
#if defined(__SANITIZE_THREAD__)
void TsanAcquire(void* p) { __tsan_acquire(p); }
void TsanRelease(void* p) { __tsan_release(p); }
#else
void TsanAcquire(void*) {}
void TsanRelease(void*) {}
#endif
struct TsanReleaseOnExit {
  explicit TsanReleaseOnExit(void* p) : p(p) {}
  ~TsanReleaseOnExit() { TsanRelease(p); }
  TsanReleaseOnExit(const TsanReleaseOnExit&) = delete;
  TsanReleaseOnExit& operator=(const TsanReleaseOnExit&) = delete;
  void* p;
};

std::exception_ptr BackendError(const std::string& msg) {
  try {
    C10_THROW_ERROR(DistBackendError, "ciuic: " + msg);
  } catch (...) {
    return std::current_exception();
  }
}

// ---------------------------------------------------------------------------
// A Work: the requests the library runs it as, what to do once they are done
// (copies out of staging buffers, local reductions), and the future DDP and
// the comm hooks wait on, completed with the output tensors as a list.
class CiuicWork : public c10d::Work {
 public:
  CiuicWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs, const char* title)
      : Work(rank, type, title),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  // The last reference to a work may go in torch's code, whose refcount
  // atomics ThreadSanitizer does not see (tools/tsan-torch.sh): the
  // completer's last touch but for dropping its reference is DropRequests,
  // under requests_mu_, and the caller's methods release `this` to TSan on
  // the way out, so the destructor shows it both were done (no-ops unless
  // built with -fsanitize=thread).
  ~CiuicWork() override {
    std::lock_guard<std::mutex> lock(requests_mu_);
    TsanAcquire(this);
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    TsanReleaseOnExit done(this);
    return future_;
  }
  std::vector<at::Tensor> result() override {
    TsanReleaseOnExit done(this);
    return outputs_;
  }
  void abort() override {}

  // The caller waits on the library's requests itself (one thread hop, not
  // three through the completer; ~65 us a call on a 2-vCPU VM) and
  // completes the work unless the completer got there first.
  bool wait(std::chrono::milliseconds timeout) override {
    TsanReleaseOnExit done(this);
    if (!isCompleted()) {
      std::vector<Request> mine;
      {
        std::lock_guard<std::mutex> lock(requests_mu_);
        mine = requests;
      }
      const bool forever = timeout == kNoTimeout;
      const auto deadline = std::chrono::steady_clock::now() + timeout;
      Status first;
      bool all_done = true;
      for (auto& r : mine) {
        Status st;
        if (forever) {
          st = r.Wait();
        } else {
          const auto left =
              std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
          st = r.Wait(std::max(left, std::chrono::milliseconds(0)));
          if (st.code() == ciuic::StatusCode::kDeadlineExceeded) {  // not done yet, or failed so
            StatusOr<bool> done = r.Test();
            if (done.ok() && !*done) {
              all_done = false;  // the base wait below times out
              break;
            }
            st = done.ok() ? Status::Ok() : done.status();
          }
        }
        if (first.ok() && !st.ok()) first = st;
      }
      if (all_done && Claim()) Complete(first);
    }
    return Work::wait(timeout);
  }

  // Exactly one thread completes a work: the one that claims it.
  bool Claim() { return !claimed_.exchange(true); }
  bool claimed() const { return claimed_.load(); }
  // Called by the completer once it is done with the requests.
  void DropRequests() {
    std::lock_guard<std::mutex> lock(requests_mu_);
    requests.clear();
  }

  void Complete(Status s) {
    if (s.ok() && after_) {
      try {
        after_();
      } catch (const std::exception& e) {
        s = ciuic::InternalError(std::string("after the transfer: ") + e.what());
      }
    }
    after_ = nullptr;
    held_.clear();
    if (s.ok()) {
      future_->markCompleted(c10::IValue(outputs_));
      finish();
    } else {
      std::exception_ptr e = BackendError(s.ToString());
      future_->setError(e);
      finish(e);
    }
  }

  std::vector<Request> requests;  // set before the work is queued; cleared by DropRequests
  std::function<void()> after_;
  // What the requests read and write (captured by the functions that
  // issued them), alive until they are done: the caller may drop its own
  // references at once (functional collectives pass temporaries).
  std::vector<std::function<Status(Request*)>> held_;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> claimed_{false};
  std::mutex requests_mu_;
};

// ---------------------------------------------------------------------------
// Types and reductions.
std::optional<DataType> NativeType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    case at::kFloat8_e4m3fn: return DataType::kFloat8E4M3;
    case at::kFloat8_e5m2: return DataType::kFloat8E5M2;
    case at::kChar: return DataType::kInt8;
    case at::kByte: return DataType::kUint8;
    case at::kBool: return DataType::kBool;
    case at::kShort: return DataType::kInt16;
    case at::kUInt16: return DataType::kUint16;
    case at::kInt: return DataType::kInt32;
    case at::kLong: return DataType::kInt64;
    case at::kUInt32: return DataType::kUint32;
    case at::kUInt64: return DataType::kUint64;
    default: return std::nullopt;
  }
}

bool IsFloating(at::ScalarType t) { return at::isFloatingType(t); }

const char* OpName(RedOp::RedOpType op) {
  switch (op) {
    case RedOp::SUM: return "SUM";
    case RedOp::AVG: return "AVG";
    case RedOp::PRODUCT: return "PRODUCT";
    case RedOp::MIN: return "MIN";
    case RedOp::MAX: return "MAX";
    case RedOp::BAND: return "BAND";
    case RedOp::BOR: return "BOR";
    case RedOp::BXOR: return "BXOR";
    case RedOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

// How one (dtype, op) is reduced by the library's kernels. bool: SUM is
// logical or, PRODUCT logical and (torch's own meaning, the library's too).
// PREMUL_SUM: the input is scaled first (PreMultiply), then summed.
struct Reduction {
  DataType dtype = DataType::kUint8;
  ciuic::ReduceOp op = ciuic::ReduceOp::kSum;
};

Reduction Classify(at::ScalarType t, const RedOp& rop, const char* what) {
  Reduction r;
  const std::string name = std::string(what) + ": ReduceOp." + OpName(rop.op_) + " on " + c10::toString(t);
  TORCH_CHECK(!at::isComplexType(t), "ciuic: ", name, " is not supported (complex tensors: reduce a view_as_real)");
  if (rop.op_ == RedOp::PREMUL_SUM) TORCH_CHECK(IsFloating(t), "ciuic: ", name, ": PREMUL_SUM needs a floating dtype");
  std::optional<DataType> nt = NativeType(t);
  TORCH_CHECK(nt.has_value(), "ciuic: ", name, " is not supported");
  r.dtype = *nt;
  switch (rop.op_) {
    case RedOp::SUM:
    case RedOp::PREMUL_SUM: r.op = ciuic::ReduceOp::kSum; break;
    case RedOp::AVG: r.op = ciuic::ReduceOp::kAvg; break;
    case RedOp::PRODUCT: r.op = ciuic::ReduceOp::kProd; break;
    case RedOp::MIN: r.op = ciuic::ReduceOp::kMin; break;
    case RedOp::MAX: r.op = ciuic::ReduceOp::kMax; break;
    case RedOp::BAND: r.op = ciuic::ReduceOp::kBand; break;
    case RedOp::BOR: r.op = ciuic::ReduceOp::kBor; break;
    case RedOp::BXOR: r.op = ciuic::ReduceOp::kBxor; break;
    default: TORCH_CHECK(false, "ciuic: ", name, " is not a reduction");
  }
  const Status ok = ciuic::kernels::CheckReduction(r.dtype, r.op);
  TORCH_CHECK(ok.ok(), "ciuic: ", name, ": ", ok.message());
  return r;
}

void PreMultiply(at::Tensor& t, const RedOp& rop) {
  if (rop.op_ != RedOp::PREMUL_SUM) return;
  auto* s = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(rop.supplement_.get());
  TORCH_CHECK(s != nullptr, "ciuic: PREMUL_SUM without its factor");
  if (s->tensor_factor.defined()) t.mul_(s->tensor_factor.to(t.device()));
  else t.mul_(s->double_factor);
}

void CheckTensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "ciuic: ", what, ": an undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "ciuic: ", what, ": only dense tensors (this one is ", t.layout(), ")");
  TORCH_CHECK(t.device().is_cpu(), "ciuic: ", what, ": a tensor on ", t.device(),
              "; the ciuic backend takes CPU tensors (use \"cpu:ciuic,cuda:nccl\" for GPU ones)");
}

size_t Bytes(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// A contiguous stand-in for `t`: t itself, or a copy written back after.
struct Staged {
  at::Tensor buf;
  bool copied = false;
};
Staged Stage(const at::Tensor& t) {
  if (t.is_contiguous()) return {t, false};
  return {t.contiguous(), true};
}

bool Overlaps(const at::Tensor& a, const at::Tensor& b) {
  const auto* pa = static_cast<const char*>(a.data_ptr());
  const auto* pb = static_cast<const char*>(b.data_ptr());
  return pa < pb + Bytes(b) && pb < pa + Bytes(a) && Bytes(a) > 0 && Bytes(b) > 0;
}

// ---------------------------------------------------------------------------
class ProcessGroupCiuic : public c10d::Backend {
 public:
  ProcessGroupCiuic(std::unique_ptr<Communicator> comm, int rank, int size, std::chrono::milliseconds timeout,
                    std::string group)
      : Backend(rank, size), comm_(std::move(comm)), timeout_(timeout), group_(std::move(group)) {
    init();
    completer_ = std::thread([this] { CompleteLoop(); });
  }
  ~ProcessGroupCiuic() override { Stop(); }

  const std::string getBackendName() const override { return "ciuic"; }
  c10::intrusive_ptr<Options> getBackendOptions() override {
    return c10::make_intrusive<Options>("ciuic", timeout_);
  }
  void shutdown() override { Stop(); }
  void abort() override { Stop(); }
  // Collectives issued so far (as gloo counts them; torch's debug wrapper
  // compares them across ranks). Every rank starts at 0.
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }

  // One function both ways: run now on this thread (`out` null: the
  // blocking forms, no hand-off) or post and return the request.
  using Issue = std::function<Status(Request* out)>;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    at::Tensor t = One(tensors, "broadcast");
    const int root = Root(opts.rootRank, "broadcast");
    Staged s = Stage(t);
    return Launch(c10d::OpType::BROADCAST, {t}, opts.asyncOp, "ciuic:broadcast",
                  {[this, b = s.buf, root](Request* out) {
                    return Do(out, [&] { return comm_->Broadcast(b.data_ptr(), Bytes(b), DataType::kUint8, root); },
                              [&] { return comm_->IBroadcast(b.data_ptr(), Bytes(b), DataType::kUint8, root); });
                  }},
                  WriteBack(s, t));
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    at::Tensor t = One(tensors, "allreduce");
    TORCH_CHECK(!opts.sparseIndices.has_value(), "ciuic: allreduce: sparse tensors are not supported");
    Reduction r = Classify(t.scalar_type(), opts.reduceOp, "allreduce");
    Staged s = Stage(t);
    PreMultiply(s.buf, opts.reduceOp);
    return Launch(c10d::OpType::ALLREDUCE, {t}, opts.asyncOp, "ciuic:all_reduce", {AllReduceIssue(s.buf, r)},
                  WriteBack(s, t));
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    TORCH_CHECK(!tensors.empty(), "ciuic: allreduce_coalesced: no tensors");
    std::vector<Issue> issues;
    std::vector<std::function<void()>> afters;
    for (auto& t : tensors) {
      CheckTensor(t, "allreduce_coalesced");
      Reduction r = Classify(t.scalar_type(), opts.reduceOp, "allreduce_coalesced");
      Staged s = Stage(t);
      PreMultiply(s.buf, opts.reduceOp);
      issues.push_back(AllReduceIssue(s.buf, r));
      afters.push_back(WriteBack(s, t));
    }
    return Launch(c10d::OpType::ALLREDUCE_COALESCED, tensors, opts.asyncOp, "ciuic:all_reduce_coalesced",
                  std::move(issues), Chain(std::move(afters)));
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    at::Tensor t = One(tensors, "reduce");
    const int root = Root(opts.rootRank, "reduce");
    Reduction r = Classify(t.scalar_type(), opts.reduceOp, "reduce");
    Staged s = Stage(t);
    PreMultiply(s.buf, opts.reduceOp);
    const size_t n = static_cast<size_t>(s.buf.numel());
    return Launch(c10d::OpType::REDUCE, {t}, opts.asyncOp, "ciuic:reduce",
                  {[this, b = s.buf, n, r, root](Request* out) {
                    void* p = b.data_ptr();
                    return Do(out, [&] { return comm_->Reduce(p, p, n, r.dtype, r.op, root); },
                              [&] { return comm_->IReduce(p, p, n, r.dtype, r.op, root); });
                  }},
                  getRank() == root ? WriteBack(s, t) : nullptr);
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) override {
    at::Tensor in = One(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1, "ciuic: allgather: one output list per input (got ", outputs.size(), ")");
    std::vector<at::Tensor>& outs = outputs[0];
    CheckList(outs, in, "allgather");
    at::Tensor src = in.contiguous();
    at::Tensor flat = at::empty({getSize(), in.numel()}, in.options());
    return Launch(c10d::OpType::ALLGATHER, outs, opts.asyncOp, "ciuic:all_gather", {AllGatherIssue(src, flat)},
                  [outs, flat]() mutable {
                    for (size_t i = 0; i < outs.size(); ++i) outs[i].copy_(flat[static_cast<int64_t>(i)].view_as(outs[i]));
                  });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    return AllGatherInto(output, input, opts.asyncOp, c10d::OpType::_ALLGATHER_BASE);
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "ciuic: allgather_into_tensor_coalesced: ", outputs.size(),
                " outputs for ", inputs.size(), " inputs");
    std::vector<Issue> issues;
    std::vector<std::function<void()>> afters;
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto [issue, after] = AllGatherIntoParts(outputs[i], inputs[i], "allgather_into_tensor_coalesced");
      issues.push_back(std::move(issue));
      afters.push_back(std::move(after));
    }
    return Launch(c10d::OpType::COALESCED, outputs, opts.asyncOp, "ciuic:all_gather_into_tensor_coalesced",
                  std::move(issues), Chain(std::move(afters)));
  }

  // outputLists[r][k]: rank r's input k (torch's layout, as gloo reads it).
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK(outputLists.size() == static_cast<size_t>(getSize()), "ciuic: allgather_coalesced: ",
                outputLists.size(), " output lists for ", getSize(), " ranks (one list per rank)");
    for (size_t r = 0; r < outputLists.size(); ++r) {
      TORCH_CHECK(outputLists[r].size() == inputs.size(), "ciuic: allgather_coalesced: output list ", r, " has ",
                  outputLists[r].size(), " tensors for ", inputs.size(), " inputs");
    }
    std::vector<Issue> issues;
    std::vector<std::function<void()>> afters;
    std::vector<at::Tensor> all_outs;
    for (size_t k = 0; k < inputs.size(); ++k) {
      CheckTensor(inputs[k], "allgather_coalesced");
      std::vector<at::Tensor> outs;  // input k of every rank
      outs.reserve(outputLists.size());
      for (auto& list : outputLists) outs.push_back(list[k]);
      CheckList(outs, inputs[k], "allgather_coalesced");
      at::Tensor src = inputs[k].contiguous();
      at::Tensor flat = at::empty({getSize(), src.numel()}, src.options());
      issues.push_back(AllGatherIssue(src, flat));
      afters.push_back([outs, flat]() mutable {
        for (size_t i = 0; i < outs.size(); ++i) outs[i].copy_(flat[static_cast<int64_t>(i)].view_as(outs[i]));
      });
    }
    for (auto& list : outputLists) {
      for (auto& o : list) all_outs.push_back(o);
    }
    return Launch(c10d::OpType::ALLGATHER_COALESCED, all_outs, opts.asyncOp, "ciuic:all_gather_coalesced",
                  std::move(issues), Chain(std::move(afters)));
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    at::Tensor in = One(inputs, "gather");
    const int root = Root(opts.rootRank, "gather");
    const bool me = getRank() == root;
    std::vector<at::Tensor> outs;
    if (me) {
      TORCH_CHECK(outputs.size() == 1, "ciuic: gather: the root needs one output list (got ", outputs.size(), ")");
      outs = outputs[0];
      CheckList(outs, in, "gather");
    } else {
      TORCH_CHECK(outputs.empty() || outputs[0].empty(), "ciuic: gather: only the root (rank ", root,
                  ") passes outputs");
    }
    at::Tensor src = in.contiguous();
    at::Tensor flat = me ? at::empty({getSize(), in.numel()}, in.options()) : at::Tensor();
    const size_t n = Bytes(src);
    return Launch(c10d::OpType::GATHER, outs, opts.asyncOp, "ciuic:gather",
                  {[this, src, flat, n, root](Request* out) {
                    void* dst = flat.defined() ? flat.data_ptr() : nullptr;
                    return Do(out, [&] { return comm_->Gather(src.data_ptr(), dst, n, DataType::kUint8, root); },
                              [&] { return comm_->IGather(src.data_ptr(), dst, n, DataType::kUint8, root); });
                  }},
                  [outs, flat]() mutable {
                    for (size_t i = 0; i < outs.size(); ++i) outs[i].copy_(flat[static_cast<int64_t>(i)].view_as(outs[i]));
                  });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    at::Tensor out_t = One(outputs, "scatter");
    const int root = Root(opts.rootRank, "scatter");
    const bool me = getRank() == root;
    at::Tensor flat;
    if (me) {
      TORCH_CHECK(inputs.size() == 1, "ciuic: scatter: the root needs one input list (got ", inputs.size(), ")");
      CheckList(inputs[0], out_t, "scatter");
      std::vector<at::Tensor> rows;
      for (auto& x : inputs[0]) rows.push_back(x.reshape({-1}));
      flat = at::cat(rows);
    } else {
      TORCH_CHECK(inputs.empty() || inputs[0].empty(), "ciuic: scatter: only the root (rank ", root,
                  ") passes inputs");
    }
    Staged s = Stage(out_t);
    const size_t n = Bytes(s.buf);
    return Launch(c10d::OpType::SCATTER, {out_t}, opts.asyncOp, "ciuic:scatter",
                  {[this, flat, b = s.buf, n, root](Request* out) {
                    const void* src = flat.defined() ? flat.data_ptr() : nullptr;
                    return Do(out, [&] { return comm_->Scatter(src, b.data_ptr(), n, DataType::kUint8, root); },
                              [&] { return comm_->IScatter(src, b.data_ptr(), n, DataType::kUint8, root); });
                  }},
                  WriteBack(s, out_t));
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    at::Tensor out_t = One(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1, "ciuic: reduce_scatter: one input list per output (got ", inputs.size(), ")");
    CheckList(inputs[0], out_t, "reduce_scatter");
    std::vector<at::Tensor> rows;
    for (auto& x : inputs[0]) rows.push_back(x.reshape({-1}));
    at::Tensor flat = at::cat(rows);
    return ReduceScatterInto(out_t, flat, opts, c10d::OpType::REDUCE_SCATTER, "reduce_scatter");
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    CheckTensor(input, "reduce_scatter_tensor");
    CheckTensor(output, "reduce_scatter_tensor");
    TORCH_CHECK(input.numel() == output.numel() * getSize(), "ciuic: reduce_scatter_tensor: input has ", input.numel(),
                " elements, expected output's ", output.numel(), " x ", getSize(), " ranks");
    at::Tensor flat = input.contiguous().reshape({-1});
    if (opts.reduceOp.op_ == RedOp::PREMUL_SUM && flat.data_ptr() == input.data_ptr()) flat = flat.clone();
    return ReduceScatterInto(output, flat, opts, c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor");
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK(outputs.size() == inputs.size(), "ciuic: reduce_scatter_tensor_coalesced: ", outputs.size(),
                " outputs for ", inputs.size(), " inputs");
    std::vector<Issue> issues;
    std::vector<std::function<void()>> afters;
    for (size_t i = 0; i < inputs.size(); ++i) {
      CheckTensor(inputs[i], "reduce_scatter_tensor_coalesced");
      TORCH_CHECK(inputs[i].numel() == outputs[i].numel() * getSize(), "ciuic: reduce_scatter_tensor_coalesced: input ",
                  i, " has ", inputs[i].numel(), " elements, expected ", outputs[i].numel(), " x ", getSize());
      Reduction r = Classify(inputs[i].scalar_type(), opts.reduceOp, "reduce_scatter_tensor_coalesced");
      at::Tensor flat = inputs[i].contiguous().reshape({-1});
      if (opts.reduceOp.op_ == RedOp::PREMUL_SUM) flat = flat.clone();
      PreMultiply(flat, opts.reduceOp);
      Staged s = Stage(outputs[i]);
      issues.push_back(ReduceScatterIssue(flat, s.buf, r));
      afters.push_back(WriteBack(s, outputs[i]));
    }
    return Launch(c10d::OpType::COALESCED, outputs, opts.asyncOp, "ciuic:reduce_scatter_tensor_coalesced",
                  std::move(issues), Chain(std::move(afters)));
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outSplits,
                                               std::vector<int64_t>& inSplits,
                                               const c10d::AllToAllOptions& opts) override {
    CheckTensor(input, "all_to_all_single");
    CheckTensor(output, "all_to_all_single");
    TORCH_CHECK(input.scalar_type() == output.scalar_type(), "ciuic: all_to_all_single: input is ",
                c10::toString(input.scalar_type()), ", output ", c10::toString(output.scalar_type()));
    at::Tensor src = input.contiguous();
    Staged s = Stage(output);
    const int n = getSize();
    // No splits at all: the elements split evenly, as torch's backends do
    // (dim 0 need not divide); with either given, rows.
    const bool even = inSplits.empty() && outSplits.empty();
    std::vector<size_t> sc = even ? EvenSplit(src, n) : Splits(inSplits, src, n, "input_split_sizes");
    std::vector<size_t> rc = even ? EvenSplit(s.buf, n) : Splits(outSplits, s.buf, n, "output_split_sizes");
    return Launch(c10d::OpType::ALLTOALL_BASE, {output}, opts.asyncOp, "ciuic:all_to_all_single",
                  {AllToAllVIssue(src, sc, s.buf, rc)}, WriteBack(s, output));
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    const auto n = static_cast<size_t>(getSize());
    TORCH_CHECK(outputs.size() == n && inputs.size() == n, "ciuic: all_to_all: ", inputs.size(), " inputs and ",
                outputs.size(), " outputs for ", n, " ranks");
    std::vector<at::Tensor> rows;
    std::vector<size_t> sc(n), rc(n);
    int64_t out_numel = 0;
    for (size_t p = 0; p < n; ++p) {
      CheckTensor(inputs[p], "all_to_all");
      CheckTensor(outputs[p], "all_to_all");
      TORCH_CHECK(inputs[p].scalar_type() == inputs[0].scalar_type() &&
                      outputs[p].scalar_type() == inputs[0].scalar_type(),
                  "ciuic: all_to_all: every tensor must have one dtype");
      rows.push_back(inputs[p].reshape({-1}));
      sc[p] = Bytes(inputs[p]);
      rc[p] = Bytes(outputs[p]);
      out_numel += outputs[p].numel();
    }
    at::Tensor src = at::cat(rows);
    at::Tensor flat = at::empty({out_numel}, inputs[0].options());
    return Launch(c10d::OpType::ALLTOALL, outputs, opts.asyncOp, "ciuic:all_to_all",
                  {AllToAllVIssue(src, sc, flat, rc)}, [outputs, flat]() mutable {
                    int64_t at = 0;
                    for (auto& o : outputs) {
                      o.copy_(flat.narrow(0, at, o.numel()).view_as(o));
                      at += o.numel();
                    }
                  });
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    at::Tensor t = One(tensors, "send");
    Peer(dst, "send: dst");
    Tag(tag);
    at::Tensor src = t.contiguous();
    return Launch(c10d::OpType::SEND, {t}, true, "ciuic:send", {[this, src, dst, tag](Request* out) {
                    return Do(out, [&] { return comm_->Send(src.data_ptr(), Bytes(src), DataType::kUint8, dst, tag); },
                              [&] { return comm_->ISend(src.data_ptr(), Bytes(src), DataType::kUint8, dst, tag); });
                  }},
                  nullptr);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    at::Tensor t = One(tensors, "recv");
    Peer(src, "recv: src");
    Tag(tag);
    Staged s = Stage(t);
    return Launch(c10d::OpType::RECV, {t}, true, "ciuic:recv", {[this, b = s.buf, src, tag](Request* out) {
                    return Do(out, [&] { return comm_->Recv(b.data_ptr(), Bytes(b), DataType::kUint8, src, tag); },
                              [&] { return comm_->IRecv(b.data_ptr(), Bytes(b), DataType::kUint8, src, tag); });
                  }},
                  WriteBack(s, t));
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& /*tensors*/, int /*tag*/) override {
    TORCH_CHECK(false, "ciuic: recv from any source is not supported: name the source rank (src=)");
    return {};
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return Launch(c10d::OpType::BARRIER, {}, opts.asyncOp, "ciuic:barrier", {[this](Request* out) {
                    return Do(out, [&] { return comm_->Barrier(); }, [&] { return comm_->IBarrier(); });
                  }},
                  nullptr);
  }

  void setTimeout(std::chrono::milliseconds /*timeout*/) override {
    TORCH_CHECK(false, "ciuic: the timeout is fixed when the group is made (init_process_group/new_group timeout=)");
  }

  int transport_rank() const { return comm_ ? comm_->rank() : -1; }
  std::string transport() const { return comm_ ? comm_->transport_name() : "closed"; }
  std::string last_algorithm() const { return comm_ ? comm_->last_algorithm() : ""; }

 private:
  template <typename B, typename P>
  static Status Do(Request* out, B&& blocking, P&& post) {
    if (out == nullptr) return blocking();
    StatusOr<Request> r = post();
    if (!r.ok()) return r.status();
    *out = std::move(*r);
    return Status::Ok();
  }

  at::Tensor One(std::vector<at::Tensor>& ts, const char* what) {
    TORCH_CHECK(ts.size() == 1, "ciuic: ", what, ": one tensor per process (got ", ts.size(), ")");
    CheckTensor(ts[0], what);
    return ts[0];
  }
  int Root(int64_t root, const char* what) {
    TORCH_CHECK(root >= 0 && root < getSize(), "ciuic: ", what, ": root ", root, " outside [0, ", getSize(), ")");
    return static_cast<int>(root);
  }
  void Peer(int p, const char* what) {
    TORCH_CHECK(p >= 0 && p < getSize() && p != getRank(), "ciuic: ", what, " ", p, ": expected another rank of [0, ",
                getSize(), ")");
  }
  static void Tag(int tag) {
    TORCH_CHECK(tag >= 0 && tag < 65536, "ciuic: tag ", tag, " outside [0, 65536)");
  }
  void CheckList(const std::vector<at::Tensor>& list, const at::Tensor& like, const char* what) {
    TORCH_CHECK(list.size() == static_cast<size_t>(getSize()), "ciuic: ", what, ": ", list.size(), " tensors for ",
                getSize(), " ranks");
    for (const auto& t : list) {
      CheckTensor(t, what);
      TORCH_CHECK(t.numel() == like.numel() && t.scalar_type() == like.scalar_type(), "ciuic: ", what,
                  ": every tensor must match the input (", like.numel(), " x ", c10::toString(like.scalar_type()),
                  "), got ", t.numel(), " x ", c10::toString(t.scalar_type()));
    }
  }
  static std::vector<size_t> EvenSplit(const at::Tensor& t, int n) {
    TORCH_CHECK(t.numel() % n == 0, "ciuic: all_to_all_single: ", t.numel(), " elements do not split evenly over ", n,
                " ranks");
    return std::vector<size_t>(static_cast<size_t>(n), Bytes(t) / static_cast<size_t>(n));
  }
  // Bytes per rank of an all_to_all_single: the rows given (empty: t's rows
  // split evenly, as torch's checkSplitSizes wants), checked with no overflow.
  static std::vector<size_t> Splits(const std::vector<int64_t>& splits, const at::Tensor& t, int n, const char* what) {
    TORCH_CHECK(t.dim() > 0 || splits.empty(), "ciuic: all_to_all_single: ", what, " given for a 0-dim tensor");
    const uint64_t rows = t.dim() == 0 ? static_cast<uint64_t>(t.numel()) : static_cast<uint64_t>(t.size(0));
    StatusOr<std::vector<size_t>> c = ciuic::pyargs::SplitCounts(splits.empty() ? nullptr : &splits, rows,
                                                                 static_cast<size_t>(n), what, "the tensor", "rows");
    TORCH_CHECK(c.ok(), "ciuic: all_to_all_single: ", c.ok() ? "" : c.status().message());
    const size_t row = rows == 0 ? 0 : Bytes(t) / rows;
    for (size_t& v : *c) v *= row;
    return std::move(*c);
  }

  std::function<void()> WriteBack(const Staged& s, const at::Tensor& t) {
    if (!s.copied) return nullptr;
    return [b = s.buf, t]() mutable { t.copy_(b); };
  }
  static std::function<void()> Chain(std::vector<std::function<void()>> fs) {
    return [fs = std::move(fs)] {
      for (const auto& f : fs) {
        if (f) f();
      }
    };
  }

  Issue AllReduceIssue(const at::Tensor& b, const Reduction& r) {
    const size_t n = static_cast<size_t>(b.numel());
    return [this, b, n, r](Request* out) {
      void* p = b.data_ptr();
      return Do(out, [&] { return comm_->AllReduce(p, p, n, r.dtype, r.op); },
                [&] { return comm_->IAllReduce(p, p, n, r.dtype, r.op); });
    };
  }
  Issue AllGatherIssue(const at::Tensor& src, const at::Tensor& dst) {
    return [this, src, dst](Request* out) {
      const size_t n = Bytes(src);
      return Do(out, [&] { return comm_->AllGather(src.data_ptr(), dst.data_ptr(), n, DataType::kUint8); },
                [&] { return comm_->IAllGather(src.data_ptr(), dst.data_ptr(), n, DataType::kUint8); });
    };
  }
  Issue ReduceScatterIssue(const at::Tensor& src, const at::Tensor& dst, const Reduction& r) {
    const size_t n = static_cast<size_t>(dst.numel());
    return [this, src, dst, n, r](Request* out) {
      return Do(out, [&] { return comm_->ReduceScatter(src.data_ptr(), dst.data_ptr(), n, r.dtype, r.op); },
                [&] { return comm_->IReduceScatter(src.data_ptr(), dst.data_ptr(), n, r.dtype, r.op); });
    };
  }
  Issue AllToAllVIssue(const at::Tensor& src, std::vector<size_t> sc, const at::Tensor& dst, std::vector<size_t> rc) {
    return [this, src, dst, sc = std::move(sc), rc = std::move(rc)](Request* out) {
      return Do(out,
                [&] { return comm_->AllToAllV(src.data_ptr(), sc.data(), nullptr, dst.data_ptr(), rc.data(), nullptr,
                                              DataType::kUint8); },
                [&] { return comm_->IAllToAllV(src.data_ptr(), sc.data(), nullptr, dst.data_ptr(), rc.data(), nullptr,
                                               DataType::kUint8); });
    };
  }

  std::pair<Issue, std::function<void()>> AllGatherIntoParts(at::Tensor& output, at::Tensor& input, const char* what) {
    CheckTensor(input, what);
    CheckTensor(output, what);
    TORCH_CHECK(output.numel() == input.numel() * getSize() && output.scalar_type() == input.scalar_type(), "ciuic: ",
                what, ": output has ", output.numel(), " x ", c10::toString(output.scalar_type()), ", expected ",
                input.numel(), " x ", getSize(), " ranks of ", c10::toString(input.scalar_type()));
    Staged s = Stage(output);
    // FSDP passes an input that is a view of its own slot in the output.
    at::Tensor src = input.contiguous();
    if (Overlaps(src, s.buf)) src = src.clone();
    return {AllGatherIssue(src, s.buf), WriteBack(s, output)};
  }
  c10::intrusive_ptr<c10d::Work> AllGatherInto(at::Tensor& output, at::Tensor& input, bool async, c10d::OpType type) {
    auto [issue, after] = AllGatherIntoParts(output, input, "all_gather_into_tensor");
    return Launch(type, {output}, async, "ciuic:all_gather_into_tensor", {std::move(issue)}, std::move(after));
  }

  c10::intrusive_ptr<c10d::Work> ReduceScatterInto(at::Tensor& output, at::Tensor flat,
                                                   const c10d::ReduceScatterOptions& opts, c10d::OpType type,
                                                   const char* what) {
    CheckTensor(output, what);
    TORCH_CHECK(flat.scalar_type() == output.scalar_type(), "ciuic: ", what, ": input is ",
                c10::toString(flat.scalar_type()), ", output ", c10::toString(output.scalar_type()));
    Reduction r = Classify(output.scalar_type(), opts.reduceOp, what);
    PreMultiply(flat, opts.reduceOp);
    Staged s = Stage(output);
    return Launch(type, {output}, opts.asyncOp, "ciuic:reduce_scatter", {ReduceScatterIssue(flat, s.buf, r)},
                  WriteBack(s, output));
  }

  // Runs or posts `issues` in order. A blocking call (async_op=False in
  // Python, which then waits at once) runs on this thread with no hand-off;
  // otherwise the requests go to the library's progress thread and the
  // completer completes the work (its future too) when they are done.
  c10::intrusive_ptr<c10d::Work> Launch(c10d::OpType type, std::vector<at::Tensor> outputs, bool async,
                                        const char* title, std::vector<Issue> issues, std::function<void()> after) {
    auto work = c10::make_intrusive<CiuicWork>(getRank(), type, std::move(outputs), title);
    work->after_ = std::move(after);
    if (type != c10d::OpType::SEND && type != c10d::OpType::RECV && type != c10d::OpType::RECVANYSOURCE) ++seq_;
    std::unique_lock<std::mutex> lock(issue_mu_);
    if (comm_ == nullptr || stopping_) {
      lock.unlock();
      work->Claim();
      work->Complete(ciuic::FailedPreconditionError("the process group was shut down"));
      return work;
    }
    if (!async) {
      Status s;
      for (const auto& issue : issues) {
        s = issue(nullptr);
        if (!s.ok()) break;
      }
      lock.unlock();
      work->Claim();
      work->Complete(s);
      return work;
    }
    for (const auto& issue : issues) {
      Request r;
      Status s = issue(&r);
      if (!s.ok()) {
        lock.unlock();
        (void)WaitAll(work->requests);  // none may still touch the tensors
        work->Claim();
        work->Complete(s);
        return work;
      }
      work->requests.push_back(std::move(r));
    }
    work->held_ = std::move(issues);
    {
      std::lock_guard<std::mutex> q(queue_mu_);
      queue_.push_back(work);
    }
    queue_cv_.notify_one();
    return work;
  }

  static Status WaitAll(std::vector<Request>& rs) {
    Status first;
    for (auto& r : rs) {
      Status s = r.Wait();
      if (first.ok() && !s.ok()) first = s;
    }
    rs.clear();
    return first;
  }

  // Completes each work once its requests are done, in whatever order they
  // finish: a receive must complete while an earlier send waits for a peer
  // that posts its receive only after this one. Blocks on the oldest
  // unfinished request for a moment at a time, then looks at the others.
  void CompleteLoop() {
    std::vector<c10::intrusive_ptr<CiuicWork>> pending;
    for (;;) {
      {
        std::unique_lock<std::mutex> q(queue_mu_);
        if (pending.empty()) queue_cv_.wait(q, [&] { return !queue_.empty() || quit_; });
        while (!queue_.empty()) {
          pending.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        if (pending.empty() && quit_) return;
      }
      bool completed = false;
      Request* oldest = nullptr;
      for (size_t i = 0; i < pending.size();) {
        Request* open = nullptr;
        Status first;
        for (auto& r : pending[i]->requests) {
          StatusOr<bool> t = r.Test();
          if (!t.ok()) {
            if (first.ok()) first = t.status();
          } else if (!*t) {
            open = &r;
            break;
          }
        }
        if (open == nullptr || pending[i]->claimed()) {  // done, or its waiter completed it
          if (pending[i]->Claim()) pending[i]->Complete(first);
          pending[i]->DropRequests();
          pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
          completed = true;
          continue;
        }
        if (oldest == nullptr) oldest = open;
        ++i;
      }
      if (!completed && oldest != nullptr) (void)oldest->Wait(std::chrono::milliseconds(1));
    }
  }

  // Abort first, outside the lock, so that a blocking call in flight on
  // another thread returns; once the lock is ours no work can be queued.
  void Stop() {
    if (stopping_.exchange(true)) return;
    if (comm_) comm_->Abort();
    std::lock_guard<std::mutex> lock(issue_mu_);
    {
      std::lock_guard<std::mutex> q(queue_mu_);
      quit_ = true;
    }
    queue_cv_.notify_all();
    if (completer_.joinable()) completer_.join();
    comm_.reset();
  }

  std::unique_ptr<Communicator> comm_;
  std::atomic<uint64_t> seq_{0};
  std::chrono::milliseconds timeout_;
  std::string group_;
  std::mutex issue_mu_;  // the communicator takes one caller at a time
  std::atomic<bool> stopping_{false};
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<c10::intrusive_ptr<CiuicWork>> queue_;
  bool quit_ = false;
  std::thread completer_;
};

// The group's backend over torch's store. `knobs` are CIUIC_* settings (as
// CiuicContext's); the timeout is torch's for the group. Blocks until every
// rank of the group has joined (the GIL is released).
c10::intrusive_ptr<c10d::Backend> CreateBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                std::chrono::milliseconds timeout, const std::string& group,
                                                const std::vector<std::pair<std::string, std::string>>& knobs) {
  TORCH_CHECK(size >= 1 && rank >= 0 && rank < size, "ciuic: rank ", rank, " outside [0, ", size, ")");
  auto adapter = std::make_shared<TorchStore>(store, "ciuic/");
  // A group made again over the same store (destroy_process_group resets
  // torch's group names) must not read the last one's keys: every rank's
  // join count gives the same epoch.
  StatusOr<int64_t> joined = adapter->Add("joined", 1);
  TORCH_CHECK(joined.ok(), "ciuic: rendezvous through torch's store: ", joined.status().ToString());
  const int64_t epoch = (*joined - 1) / size;
  adapter->set_prefix("ciuic/" + std::to_string(epoch) + "/");
  StatusOr<ciuic::Config> config = ciuic::Config::FromEnv();
  TORCH_CHECK(config.ok(), "ciuic: ", config.status().ToString());
  for (const auto& [k, v] : knobs) {
    Status s = config->Set(k, v);
    TORCH_CHECK(s.ok(), "ciuic: ", s.ToString());
  }
  if (timeout.count() > 0) config->timeout_ms = timeout.count();
  // The store is the group's own (torch's prefix, then the epoch): a
  // per-process count of communicators would differ between ranks that
  // belong to different sets of groups.
  StatusOr<std::unique_ptr<Communicator>> comm = Communicator::CreateWithStore(rank, size, adapter, *config, "comm");
  if (!comm.ok()) {
    std::rethrow_exception(BackendError("making group '" + group + "' (rank " + std::to_string(rank) + " of " +
                                        std::to_string(size) + "): " + comm.status().ToString()));
  }
  return c10::make_intrusive<ProcessGroupCiuic>(std::move(*comm), rank, size,
                                                std::chrono::milliseconds(config->timeout_ms), group);
}

}  // namespace

PYBIND11_MODULE(_ciuic_torch, m) {
  m.doc() = "The torch.distributed backend 'ciuic' (registered by ciuic.torch; use torch.distributed, not this module)";
  py::module_::import("torch.distributed");  // torch's Store and Backend types, before ours use them
  m.def("create_backend", &CreateBackend, py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
        py::arg("group") = "", py::arg("knobs") = std::vector<std::pair<std::string, std::string>>{},
        py::call_guard<py::gil_scoped_release>());
  m.def("describe", [](const c10::intrusive_ptr<c10d::Backend>& b) {
    auto* c = dynamic_cast<ProcessGroupCiuic*>(b.get());
    TORCH_CHECK(c != nullptr, "ciuic: not a ciuic backend");
    return py::make_tuple(c->transport(), c->last_algorithm());
  });
}
