// _ciuic: the binding of ciuic's C++ API that the package `ciuic` (python/ciuic/)
// builds its documented API on. Arrays and tensors go to the library as their
// own memory (the buffer protocol for numpy and other buffers, data_ptr() for
// torch tensors); every call that can block releases the GIL.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ciuic/ciuic.hpp"
#include "common/version.h"
#include "python/src/args.h"
#include "tools/info_main.h"
#include "transport/bootstrap.h"

namespace py = pybind11;
using ciuic::Communicator;
using ciuic::Config;
using ciuic::DataType;
using ciuic::ReduceOp;
using ciuic::Request;
using ciuic::Status;
using ciuic::StatusCode;
using ciuic::StatusOr;

namespace {

constexpr int kNumCodes = static_cast<int>(StatusCode::kInternal) + 1;

// The exception class of each status code, set by ciuic/_errors.py. Leaked on
// purpose: they must outlive every error raised during interpreter shutdown.
PyObject* g_error_class[kNumCodes] = {};

// The rank an error names other than `self`, else -1.
int CulpritRank(const std::string& msg, int self) { return ciuic::RankNamedLast(msg, self); }

const char* CodeName(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid_argument";
    case StatusCode::kNotFound: return "not_found";
    case StatusCode::kFailedPrecondition: return "failed_precondition";
    case StatusCode::kResourceExhausted: return "resource_exhausted";
    case StatusCode::kUnavailable: return "unavailable";
    case StatusCode::kDeadlineExceeded: return "deadline_exceeded";
    case StatusCode::kAborted: return "aborted";
    case StatusCode::kUnimplemented: return "unimplemented";
    case StatusCode::kDataLoss: return "data_loss";
    case StatusCode::kInternal: return "internal";
  }
  return "unknown";
}

// Raises the Python exception of `s` (the GIL held). `self` is the caller's
// rank, so that `.rank` names the peer and not the caller; -1 = none.
[[noreturn]] void Raise(const Status& s, int self) {
  const int code = static_cast<int>(s.code());
  PyObject* cls = code > 0 && code < kNumCodes && g_error_class[code] != nullptr ? g_error_class[code] : PyExc_RuntimeError;
  py::object inst = py::reinterpret_steal<py::object>(PyObject_CallFunction(cls, "s", s.message().c_str()));
  if (!inst) throw py::error_already_set();
  const bool peer_error = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded ||
                          s.code() == StatusCode::kDataLoss || s.code() == StatusCode::kAborted;
  const int culprit = peer_error ? CulpritRank(s.message(), self) : -1;
  if (PyObject_SetAttrString(inst.ptr(), "rank", culprit >= 0 ? py::int_(culprit).ptr() : Py_None) != 0 ||
      PyObject_SetAttrString(inst.ptr(), "code", py::str(CodeName(s.code())).ptr()) != 0) {
    throw py::error_already_set();
  }
  PyErr_SetObject(cls, inst.ptr());
  throw py::error_already_set();
}

void Check(const Status& s, int self) {
  if (!s.ok()) Raise(s, self);
}

[[noreturn]] void Throw(PyObject* type, const std::string& msg) {
  PyErr_SetString(type, msg.c_str());
  throw py::error_already_set();
}

using ciuic::pyargs::DataTypeByName;
using ciuic::pyargs::FromFormat;
using ciuic::pyargs::kTakes;
using ciuic::pyargs::TypeName;

// ---------------------------------------------------------------------------
// Buffers: an array's or tensor's memory as (pointer, count, dtype).

struct TorchTypes {
  PyObject* tensor = nullptr;                       // torch.Tensor
  std::vector<std::pair<PyObject*, DataType>> dtypes;  // torch.float32 -> kFloat32, ...
};

// torch, once it is imported by the program (never imported from here).
const TorchTypes* Torch() {
  static TorchTypes types;
  static bool ready = false;
  if (ready) return &types;
  PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
  if (torch == nullptr) return nullptr;
  py::handle t(torch);
  if (!py::hasattr(t, "Tensor") || !py::hasattr(t, "bfloat16")) return nullptr;  // partly imported
  types.tensor = py::object(t.attr("Tensor")).release().ptr();
  const std::pair<const char*, DataType> names[] = {
      {"float32", DataType::kFloat32}, {"float64", DataType::kFloat64}, {"float16", DataType::kFloat16},
      {"bfloat16", DataType::kBFloat16}, {"int8", DataType::kInt8}, {"uint8", DataType::kUint8},
      {"int32", DataType::kInt32}, {"int64", DataType::kInt64}, {"uint32", DataType::kUint32},
      {"uint64", DataType::kUint64}, {"int16", DataType::kInt16}, {"uint16", DataType::kUint16},
      {"bool", DataType::kBool}, {"float8_e4m3fn", DataType::kFloat8E4M3}, {"float8_e5m2", DataType::kFloat8E5M2}};
  for (const auto& [name, dt] : names) {
    if (py::hasattr(t, name)) types.dtypes.emplace_back(py::object(t.attr(name)).release().ptr(), dt);
  }
  ready = true;
  return &types;
}

size_t SizeOf(DataType t) { return ciuic::DataTypeSize(t); }

// One argument's memory. Holds the buffer (or the tensor) until destroyed,
// which must happen with the GIL held.
class Buf {
 public:
  Buf() = default;
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  Buf(Buf&& o) noexcept : ptr(o.ptr), count(o.count), dtype(o.dtype), device(o.device), owner_(std::move(o.owner_)) {
    if (o.has_view_) {
      view_ = o.view_;
      has_view_ = true;
      o.has_view_ = false;
    }
  }
  Buf& operator=(Buf&&) = delete;
  ~Buf() {
    if (has_view_) PyBuffer_Release(&view_);
  }

  void* ptr = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kUint8;
  bool device = false;  // CUDA memory (a torch tensor on a GPU)

  // `obj`'s memory; errors name `arg`. `dtype_name` (may be empty) reads the
  // memory as that type instead (its element size must divide the buffer).
  static Buf Of(py::handle obj, const char* arg, bool writable, const std::string& dtype_name);

 private:
  Py_buffer view_{};
  bool has_view_ = false;
  py::object owner_;  // a converted view (bfloat16 numpy) or the tensor
};

std::string TypeOf(py::handle obj) { return Py_TYPE(obj.ptr())->tp_name; }

Buf Buf::Of(py::handle obj, const char* arg, bool writable, const std::string& dtype_name) {
  Buf b;
  if (obj.is_none()) Throw(PyExc_TypeError, std::string(arg) + ": expected an array or tensor, got None");
  if (PyObject_CheckBuffer(obj.ptr())) {
    int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &b.view_, flags) != 0) {
      // numpy cannot export extension dtypes (ml_dtypes' bfloat16 and fp8)
      // as a buffer: read such an array as unsigned integers of its width
      // and take its type by name.
      py::error_already_set failure;
      if (py::hasattr(obj, "dtype") && py::hasattr(obj, "view")) {
        const std::string name = py::str(obj.attr("dtype").attr("name"));
        const std::optional<DataType> ext = DataTypeByName(name);
        const bool extension = ext == DataType::kBFloat16 || ext == DataType::kFloat8E4M3 ||
                               ext == DataType::kFloat8E5M2;
        if (extension && (dtype_name.empty() || dtype_name == name)) {
          py::object as_uint = obj.attr("view")(SizeOf(*ext) == 2 ? "uint16" : "uint8");
          Buf inner = Of(as_uint, arg, writable, name);
          return inner;
        }
      }
      if (writable && PyObject_GetBuffer(obj.ptr(), &b.view_, PyBUF_STRIDES | PyBUF_FORMAT) == 0) {
        PyBuffer_Release(&b.view_);
        Throw(PyExc_ValueError, std::string(arg) + " is read-only (the result is written into it)");
      }
      PyErr_Clear();
      Throw(PyExc_TypeError, std::string(arg) + ": its buffer cannot be read (" + py::str(failure.value()).cast<std::string>() + ")");
    }
    b.has_view_ = true;
    if (!PyBuffer_IsContiguous(&b.view_, 'C')) {
      Throw(PyExc_ValueError, std::string(arg) + " is not contiguous (pass a contiguous array, e.g. numpy.ascontiguousarray)");
    }
    std::optional<DataType> t = FromFormat(b.view_.format, b.view_.itemsize);
    if (!dtype_name.empty()) {
      t = DataTypeByName(dtype_name);
      if (!t) Throw(PyExc_TypeError, "dtype='" + dtype_name + "': not a ciuic datatype");
      if (static_cast<size_t>(b.view_.itemsize) != SizeOf(*t)) {
        Throw(PyExc_TypeError, std::string(arg) + ": dtype='" + dtype_name + "' needs " + std::to_string(SizeOf(*t)) +
                                   "-byte elements, the array has " + std::to_string(b.view_.itemsize) + "-byte ones");
      }
    }
    if (!t) {
      Throw(PyExc_TypeError, std::string(arg) + ": unsupported element type '" +
                                 (b.view_.format != nullptr ? b.view_.format : "?") +
                                 "' (" + kTakes + ")");
    }
    b.ptr = b.view_.buf;
    b.dtype = *t;
    b.count = static_cast<size_t>(b.view_.len) / SizeOf(*t);
    return b;
  }
  const TorchTypes* torch = Torch();
  if (torch != nullptr && PyObject_IsInstance(obj.ptr(), torch->tensor) == 1) {
    if (!obj.attr("is_contiguous")().cast<bool>()) {
      Throw(PyExc_ValueError, std::string(arg) + " is not contiguous (pass tensor.contiguous())");
    }
    py::object dt = obj.attr("dtype");
    std::optional<DataType> t;
    for (const auto& [tdt, ct] : torch->dtypes) {
      if (dt.ptr() == tdt) t = ct;
    }
    if (!dtype_name.empty()) {
      std::optional<DataType> named = DataTypeByName(dtype_name);
      if (!named) Throw(PyExc_TypeError, "dtype='" + dtype_name + "': not a ciuic datatype");
      t = named;
    }
    if (!t) {
      Throw(PyExc_TypeError, std::string(arg) + ": unsupported dtype " + py::str(dt).cast<std::string>() + " (" +
                                 kTakes + ")");
    }
    const size_t bytes = obj.attr("numel")().cast<size_t>() * obj.attr("element_size")().cast<size_t>();
    if (bytes % SizeOf(*t) != 0) {
      Throw(PyExc_TypeError, std::string(arg) + ": " + std::to_string(bytes) + " bytes are not a whole number of " +
                                 TypeName(*t) + " elements");
    }
    // torch hands out its storage as an integer address only.
    b.ptr = reinterpret_cast<void*>(obj.attr("data_ptr")().cast<uintptr_t>());  // NOLINT(performance-no-int-to-ptr)
    b.count = bytes / SizeOf(*t);
    b.dtype = *t;
    b.device = obj.attr("is_cuda").cast<bool>();
    b.owner_ = py::reinterpret_borrow<py::object>(obj);
    return b;
  }
  Throw(PyExc_TypeError, std::string(arg) + ": expected a numpy array or a torch tensor, got " + TypeOf(obj));
}

void SameType(const Buf& a, const char* an, const Buf& b, const char* bn) {
  if (a.dtype != b.dtype) {
    Throw(PyExc_TypeError, std::string(bn) + " is " + TypeName(b.dtype) + " but " + an + " is " + TypeName(a.dtype));
  }
}

void CountIs(const Buf& b, const char* name, size_t want, const std::string& why) {
  if (b.count != want) {
    Throw(PyExc_ValueError, std::string(name) + " has " + std::to_string(b.count) + " elements, expected " +
                                std::to_string(want) + " (" + why + ")");
  }
}

// A built-in op, or (from 256) a premul_sum op of the communicator, which
// the call itself checks.
ReduceOp OpOf(int op) {
  if (op < 0 || (op >= ciuic::kNumReduceOps && op < 256)) {
    Throw(PyExc_ValueError, "op=" + std::to_string(op) +
                                ": expected SUM, PROD, MIN, MAX, AVG, BAND, BOR, BXOR, PREMUL_SUM or an op of "
                                "premul_sum(factor)");
  }
  return static_cast<ReduceOp>(op);
}

// ---------------------------------------------------------------------------
// Stores: rendezvous through a Python object (torch.distributed's store).

// Calls a Python store adapter (ciuic/_store.py: set, get, wait, add with
// timeouts in seconds) with the GIL taken, from any thread. Python errors
// become kDeadlineExceeded (timeouts) or kUnavailable.
class PyStore : public ciuic::transport::Store {
 public:
  explicit PyStore(py::object adapter) : adapter_(adapter.release().ptr()) {}
  // Leaked at shutdown when the interpreter is gone; otherwise released.
  ~PyStore() override {
    try {
      if (Py_IsInitialized() != 0) {
        py::gil_scoped_acquire gil;
        Py_XDECREF(adapter_);
      }
    } catch (...) {  // a destructor must not throw: leak the adapter instead
    }
  }
  Status Set(const std::string& key, const std::string& value) override {
    return Call("set", [&](py::handle a) { a.attr("set")(key, py::bytes(value)); });
  }
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::string out;
    Status s = Call("get", [&](py::handle a) { out = a.attr("get")(key, Seconds(timeout)).cast<std::string>(); });
    if (!s.ok()) return s;
    return out;
  }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    return Call("wait", [&](py::handle a) { a.attr("wait")(keys, Seconds(timeout)); });
  }
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    int64_t out = 0;
    Status s = Call("add", [&](py::handle a) { out = a.attr("add")(key, delta).cast<int64_t>(); });
    if (!s.ok()) return s;
    return out;
  }

 private:
  static double Seconds(std::chrono::milliseconds t) { return static_cast<double>(t.count()) / 1000.0; }
  template <typename F>
  Status Call(const char* what, F&& f) {
    if (Py_IsInitialized() == 0) return Status(StatusCode::kUnavailable, "store: the Python interpreter has exited");
    py::gil_scoped_acquire gil;
    try {
      f(py::handle(adapter_));
      return Status::Ok();
    } catch (py::error_already_set& e) {
      const bool timeout = e.matches(PyExc_TimeoutError);
      return Status(timeout ? StatusCode::kDeadlineExceeded : StatusCode::kUnavailable,
                    std::string("store ") + what + ": " + e.what());
    } catch (const std::exception& e) {
      return Status(StatusCode::kUnavailable, std::string("store ") + what + ": " + e.what());
    }
  }
  PyObject* adapter_;
};

// ---------------------------------------------------------------------------
// Communicator and requests.

class PyComm;

// An async operation: the request and the memory it uses, held until it is
// waited for (or the handle dies).
class PyHandle {
 public:
  PyHandle(Request r, std::vector<Buf> bufs, int rank) : req_(std::move(r)), bufs_(std::move(bufs)), rank_(rank) {}
  PyHandle(const PyHandle&) = delete;
  PyHandle& operator=(const PyHandle&) = delete;
  PyHandle(PyHandle&&) = default;

  // Waits (the GIL released) for at most `timeout` seconds (None = no limit).
  // Errors: the operation's; TimeoutError-derived CiuicTimeoutError when it is
  // not done in time (it goes on).
  void Wait(std::optional<double> timeout) {
    if (done_) {
      Check(status_, rank_);
      return;
    }
    Status s;
    {
      py::gil_scoped_release nogil;
      if (timeout) {
        const double ms = std::max(0.0, *timeout * 1000.0);
        s = req_.Wait(std::chrono::milliseconds(static_cast<int64_t>(std::ceil(std::min(ms, 1e15)))));
      } else {
        s = req_.Wait();
      }
    }
    if (s.code() == StatusCode::kDeadlineExceeded && timeout) {
      StatusOr<bool> finished = req_.Test();
      if (finished.ok() && !*finished) {
        Raise(Status(StatusCode::kDeadlineExceeded,
                     "the operation is not done after " + std::to_string(*timeout) + " s (it goes on; wait again)"), -1);
      }
    }
    Finish(s);
    Check(status_, rank_);
  }
  bool Test() {
    if (done_) {
      Check(status_, rank_);
      return true;
    }
    StatusOr<bool> t = req_.Test();
    if (!t.ok()) {
      Finish(t.status());
      Check(status_, rank_);
    }
    if (*t) Finish(Status::Ok());
    return *t;
  }
  bool done() const { return done_; }

 private:
  void Finish(Status s) {
    done_ = true;
    status_ = std::move(s);
    bufs_.clear();  // the memory is the caller's again
  }
  Request req_;
  std::vector<Buf> bufs_;
  int rank_;
  bool done_ = false;
  Status status_;
};

class PyComm {
 public:
  PyComm(std::unique_ptr<Communicator> c, std::shared_ptr<void> keep)
      : comm_(std::move(c)), keep_(std::move(keep)), rank_(comm_->rank()), size_(comm_->size()),
        transport_(comm_->transport_name()) {}
  ~PyComm() {
    try {
      Close();
    } catch (...) {  // a destructor must not throw; close() reports errors to a caller that asks
    }
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& transport() const { return transport_; }
  bool closed() const { return comm_ == nullptr; }
  std::string last_algorithm() { return Get().last_algorithm(); }

  Communicator& Get() {
    if (comm_ == nullptr) Throw(PyExc_ValueError, "the context is closed");
    return *comm_;
  }

  // Destroys the communicator (the GIL released: its progress thread may be
  // inside a Python store call).
  void Close() {
    if (comm_ == nullptr) return;
    std::unique_ptr<Communicator> c = std::move(comm_);
    std::shared_ptr<void> keep = std::move(keep_);
    if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
      {
        py::gil_scoped_release nogil;
        c.reset();
        keep.reset();
      }
      kept_.clear();
    }
  }
  void Abort() { Get().Abort(); }
  // A premul_sum op (an int from 256) and its release.
  int PremulSum(double factor) {
    StatusOr<ReduceOp> op = Get().CreatePremulSum(factor);
    if (!op.ok()) Raise(op.status(), rank_);
    return static_cast<int>(*op);
  }
  void DestroyOp(int op) { Check(Get().DestroyReduceOp(static_cast<ReduceOp>(op)), rank_); }
  // Keeps `obj` (a store server) alive as long as the communicator.
  void Keep(py::object obj) { kept_.push_back(std::move(obj)); }
  // Communicator::Split: None for kUndefinedColor. The new one keeps what
  // this one keeps (its store and the store's server).
  std::unique_ptr<PyComm> Split(int color, int key) {
    Communicator& c = Get();
    StatusOr<std::unique_ptr<Communicator>> made = [&] {
      py::gil_scoped_release nogil;
      return c.Split(color, key);
    }();
    if (!made.ok()) Raise(made.status(), rank_);
    if (*made == nullptr) return nullptr;
    auto out = std::make_unique<PyComm>(std::move(*made), keep_);
    out->kept_ = kept_;
    return out;
  }

  // Runs `call` (the GIL released) now, or posts its I-form: a handle.
  template <typename Blocking, typename Async>
  py::object Do(bool async, std::vector<Buf>&& bufs, Blocking&& blocking, Async&& post) {
    Communicator& c = Get();
    if (!async) {
      Status s;
      {
        py::gil_scoped_release nogil;
        s = blocking(c);
      }
      Check(s, rank_);
      return py::none();
    }
    StatusOr<Request> r = [&] {
      py::gil_scoped_release nogil;
      return post(c);
    }();
    if (!r.ok()) Raise(r.status(), rank_);
    return py::cast(PyHandle(std::move(*r), std::move(bufs), rank_));
  }

  int Rank(int r, const char* name) const {
    if (r < 0 || r >= size_) {
      Throw(PyExc_ValueError, std::string(name) + "=" + std::to_string(r) + ": not a rank of this context (0.." +
                                  std::to_string(size_ - 1) + ")");
    }
    return r;
  }

 private:
  std::unique_ptr<Communicator> comm_;
  std::shared_ptr<void> keep_;  // a store server or Python store the communicator needs
  std::vector<py::object> kept_;
  int rank_, size_;
  std::string transport_;
};

StatusOr<Config> ConfigWith(const std::vector<std::pair<std::string, std::string>>& knobs) {
  StatusOr<Config> config = Config::FromEnv();
  if (!config.ok()) return config;
  for (const auto& [name, value] : knobs) {
    Status s = config->Set(name, value);
    if (!s.ok()) return s;
  }
  return config;
}

using Knobs = std::vector<std::pair<std::string, std::string>>;

std::unique_ptr<PyComm> Made(StatusOr<std::unique_ptr<Communicator>> c, std::shared_ptr<void> keep) {
  if (!c.ok()) Raise(c.status(), -1);
  return std::make_unique<PyComm>(std::move(*c), std::move(keep));
}

std::unique_ptr<PyComm> FromEnv(const Knobs& knobs) {
  StatusOr<std::unique_ptr<Communicator>> c = [&]() -> StatusOr<std::unique_ptr<Communicator>> {
    py::gil_scoped_release nogil;
    CIUIC_ASSIGN_OR_RETURN(Config config, ConfigWith(knobs));
    return Communicator::CreateFromEnv(std::move(config));
  }();
  return Made(std::move(c), nullptr);
}

std::unique_ptr<PyComm> WithStore(int rank, int size, py::object adapter, const Knobs& knobs) {
  auto store = std::make_shared<PyStore>(std::move(adapter));
  StatusOr<std::unique_ptr<Communicator>> c = [&]() -> StatusOr<std::unique_ptr<Communicator>> {
    py::gil_scoped_release nogil;
    CIUIC_ASSIGN_OR_RETURN(Config config, ConfigWith(knobs));
    return Communicator::CreateWithStore(rank, size, store, config);
  }();
  return Made(std::move(c), store);
}

std::unique_ptr<PyComm> OverTcp(int rank, int size, const std::string& host, int port, bool external,
                                const std::string& secret, const Knobs& knobs) {
  if (port <= 0 || port > 65535) Throw(PyExc_ValueError, "port=" + std::to_string(port) + ": expected 1..65535");
  StatusOr<std::unique_ptr<Communicator>> c = [&]() -> StatusOr<std::unique_ptr<Communicator>> {
    py::gil_scoped_release nogil;
    CIUIC_ASSIGN_OR_RETURN(Config config, ConfigWith(knobs));
    return Communicator::CreateTcp(rank, size, host, static_cast<uint16_t>(port), external, secret, config);
  }();
  return Made(std::move(c), nullptr);
}

// A TCP store served from this process (rank 0 of an mpi4py job).
class PyStoreServer {
 public:
  PyStoreServer(const std::string& host, const std::string& secret) {
    StatusOr<std::unique_ptr<ciuic::transport::TcpStoreServer>> s = [&] {
      py::gil_scoped_release nogil;
      return ciuic::transport::TcpStoreServer::Start(host, 0, secret);
    }();
    if (!s.ok()) Raise(s.status(), -1);
    server_ = std::move(*s);
  }
  int port() const { return server_->port(); }

 private:
  std::unique_ptr<ciuic::transport::TcpStoreServer> server_;
};

// ---------------------------------------------------------------------------
// The operations. `async` selects the I-form; each validates what Python
// passed (naming the Python argument) before anything reaches the wire.

py::object AllReduce(PyComm& self, py::handle x, int op, py::handle out, const std::string& dtype, bool async) {
  const ReduceOp o = OpOf(op);
  std::vector<Buf> bufs;
  bufs.push_back(Buf::Of(x, "x", out.is_none(), dtype));
  if (!out.is_none()) {
    bufs.push_back(Buf::Of(out, "out", true, dtype));
    SameType(bufs[0], "x", bufs[1], "out");
    CountIs(bufs[1], "out", bufs[0].count, "as many as x");
  }
  const void* s = bufs[0].ptr;
  void* r = bufs.back().ptr;
  const size_t n = bufs[0].count;
  const DataType t = bufs[0].dtype;
  return self.Do(async, std::move(bufs), [=](Communicator& c) { return c.AllReduce(s, r, n, t, o); },
                 [=](Communicator& c) { return c.IAllReduce(s, r, n, t, o); });
}

py::object Broadcast(PyComm& self, py::handle x, int root, const std::string& dtype, bool async) {
  root = self.Rank(root, "src");
  std::vector<Buf> bufs;
  bufs.push_back(Buf::Of(x, "x", self.rank() != root, dtype));
  void* b = bufs[0].ptr;
  const size_t n = bufs[0].count;
  const DataType t = bufs[0].dtype;
  return self.Do(async, std::move(bufs), [=](Communicator& c) { return c.Broadcast(b, n, t, root); },
                 [=](Communicator& c) { return c.IBroadcast(b, n, t, root); });
}

py::object Reduce(PyComm& self, py::handle x, py::handle out, int op, int root, const std::string& dtype, bool async) {
  const ReduceOp o = OpOf(op);
  root = self.Rank(root, "dst");
  std::vector<Buf> bufs;
  bufs.push_back(Buf::Of(x, "x", out.is_none() && self.rank() == root, dtype));
  void* r = nullptr;
  if (self.rank() == root) {
    if (!out.is_none()) {
      bufs.push_back(Buf::Of(out, "out", true, dtype));
      SameType(bufs[0], "x", bufs[1], "out");
      CountIs(bufs[1], "out", bufs[0].count, "as many as x");
    }
    r = bufs.back().ptr;
  }
  const void* s = bufs[0].ptr;
  const size_t n = bufs[0].count;
  const DataType t = bufs[0].dtype;
  return self.Do(async, std::move(bufs), [=](Communicator& c) { return c.Reduce(s, r, n, t, o, root); },
                 [=](Communicator& c) { return c.IReduce(s, r, n, t, o, root); });
}

py::object AllGather(PyComm& self, py::handle out, py::handle x, const std::string& dtype, bool async) {
  std::vector<Buf> bufs;
  bufs.push_back(Buf::Of(x, "x", false, dtype));
  bufs.push_back(Buf::Of(out, "out", true, dtype));
  SameType(bufs[0], "x", bufs[1], "out");
  CountIs(bufs[1], "out", bufs[0].count * static_cast<size_t>(self.size()), "world_size x the elements of x");
  const void* s = bufs[0].ptr;
  void* r = bufs[1].ptr;
  const size_t n = bufs[0].count;
  const DataType t = bufs[0].dtype;
  return self.Do(async, std::move(bufs), [=](Communicator& c) { return c.AllGather(s, r, n, t); },
                 [=](Communicator& c) { return c.IAllGather(s, r, n, t); });
}

py::object ReduceScatter(PyComm& self, py::handle out, py::handle x, int op, const std::string& dtype, bool async) {
  const ReduceOp o = OpOf(op);
  std::vector<Buf> bufs;
  bufs.push_back(Buf::Of(x, "x", false, dtype));
  bufs.push_back(Buf::Of(out, "out", true, dtype));
  SameType(bufs[0], "x", bufs[1], "out");
  CountIs(bufs[0], "x", bufs[1].count * static_cast<size_t>(self.size()), "world_size x the elements of out");
  const void* s = bufs[0].ptr;
  void* r = bufs[1].ptr;
  const size_t n = bufs[1].count;
  const DataType t = bufs[0].dtype;
  return self.Do(async, std::move(bufs), [=](Communicator& c) { return c.ReduceScatter(s, r, n, t, o); },
                 [=](Communicator& c) { return c.IReduceScatter(s, r, n, t, o); });
}

// Elements per rank: the splits given, or b's split evenly.
std::vector<size_t> Splits(const std::optional<std::vector<int64_t>>& given, const Buf& b, size_t n, const char* what,
                           const char* buffer) {
  StatusOr<std::vector<size_t>> c = ciuic::pyargs::SplitCounts(given ? &*given : nullptr, b.count, n, what, buffer);
  if (!c.ok()) Throw(PyExc_ValueError, c.status().message());
  return std::move(*c);
}

// all-to-all; with counts (elements per rank) all-to-all-v.
py::object AllToAll(PyComm& self, py::handle out, py::handle x, const std::optional<std::vector<int64_t>>& out_counts,
                    const std::optional<std::vector<int64_t>>& in_counts, const std::string& dtype, bool async) {
  std::vector<Buf> bufs;
  bufs.push_back(Buf::Of(x, "x", false, dtype));
  bufs.push_back(Buf::Of(out, "out", true, dtype));
  SameType(bufs[0], "x", bufs[1], "out");
  const size_t n = static_cast<size_t>(self.size());
  const void* s = bufs[0].ptr;
  void* r = bufs[1].ptr;
  const DataType t = bufs[0].dtype;
  if (!out_counts && !in_counts) {
    if (bufs[0].count % n != 0) {
      Throw(PyExc_ValueError, "x has " + std::to_string(bufs[0].count) + " elements, not a multiple of world_size (" +
                                  std::to_string(n) + ")");
    }
    CountIs(bufs[1], "out", bufs[0].count, "as many as x");
    const size_t per = bufs[0].count / n;
    if (s == r && n > 1) Throw(PyExc_ValueError, "out is x: all-to-all cannot run in place");
    return self.Do(async, std::move(bufs), [=](Communicator& c) { return c.AllToAll(s, r, per, t); },
                   [=](Communicator& c) { return c.IAllToAll(s, r, per, t); });
  }
  const std::vector<size_t> sc = Splits(in_counts, bufs[0], n, "in_splits", "x");
  const std::vector<size_t> rc = Splits(out_counts, bufs[1], n, "out_splits", "out");
  if (s == r && n > 1) Throw(PyExc_ValueError, "out is x: all-to-all cannot run in place");
  return self.Do(async, std::move(bufs),
                 [=](Communicator& c) { return c.AllToAllV(s, sc.data(), nullptr, r, rc.data(), nullptr, t); },
                 [=](Communicator& c) { return c.IAllToAllV(s, sc.data(), nullptr, r, rc.data(), nullptr, t); });
}

py::object Gather(PyComm& self, py::handle out, py::handle x, int root, const std::string& dtype, bool async) {
  root = self.Rank(root, "dst");
  std::vector<Buf> bufs;
  bufs.push_back(Buf::Of(x, "x", false, dtype));
  void* r = nullptr;
  if (self.rank() == root) {
    if (out.is_none()) Throw(PyExc_ValueError, "out: required at dst (the gathered blocks land there)");
    bufs.push_back(Buf::Of(out, "out", true, dtype));
    SameType(bufs[0], "x", bufs[1], "out");
    CountIs(bufs[1], "out", bufs[0].count * static_cast<size_t>(self.size()), "world_size x the elements of x");
    r = bufs[1].ptr;
  }
  const void* s = bufs[0].ptr;
  const size_t n = bufs[0].count;
  const DataType t = bufs[0].dtype;
  return self.Do(async, std::move(bufs), [=](Communicator& c) { return c.Gather(s, r, n, t, root); },
                 [=](Communicator& c) { return c.IGather(s, r, n, t, root); });
}

py::object Scatter(PyComm& self, py::handle out, py::handle x, int root, const std::string& dtype, bool async) {
  root = self.Rank(root, "src");
  std::vector<Buf> bufs;
  bufs.push_back(Buf::Of(out, "out", true, dtype));
  const void* s = nullptr;
  if (self.rank() == root) {
    if (x.is_none()) Throw(PyExc_ValueError, "xs: required at src (the blocks to scatter)");
    bufs.push_back(Buf::Of(x, "xs", false, dtype));
    SameType(bufs[0], "out", bufs[1], "xs");
    CountIs(bufs[1], "xs", bufs[0].count * static_cast<size_t>(self.size()), "world_size x the elements of out");
    s = bufs[1].ptr;
  }
  void* r = bufs[0].ptr;
  const size_t n = bufs[0].count;
  const DataType t = bufs[0].dtype;
  return self.Do(async, std::move(bufs), [=](Communicator& c) { return c.Scatter(s, r, n, t, root); },
                 [=](Communicator& c) { return c.IScatter(s, r, n, t, root); });
}

int Tag(int tag) {
  if (tag < 0 || tag >= 65536) Throw(PyExc_ValueError, "tag=" + std::to_string(tag) + ": expected 0..65535");
  return tag;
}

py::object Send(PyComm& self, py::handle x, int peer, int tag, const std::string& dtype, bool async) {
  peer = self.Rank(peer, "dst");
  if (peer == self.rank()) Throw(PyExc_ValueError, "dst=" + std::to_string(peer) + " is this rank");
  tag = Tag(tag);
  std::vector<Buf> bufs;
  bufs.push_back(Buf::Of(x, "x", false, dtype));
  const void* b = bufs[0].ptr;
  const size_t n = bufs[0].count;
  const DataType t = bufs[0].dtype;
  return self.Do(async, std::move(bufs), [=](Communicator& c) { return c.Send(b, n, t, peer, tag); },
                 [=](Communicator& c) { return c.ISend(b, n, t, peer, tag); });
}

py::object Recv(PyComm& self, py::handle x, int peer, int tag, const std::string& dtype, bool async) {
  peer = self.Rank(peer, "src");
  if (peer == self.rank()) Throw(PyExc_ValueError, "src=" + std::to_string(peer) + " is this rank");
  tag = Tag(tag);
  std::vector<Buf> bufs;
  bufs.push_back(Buf::Of(x, "x", true, dtype));
  void* b = bufs[0].ptr;
  const size_t n = bufs[0].count;
  const DataType t = bufs[0].dtype;
  return self.Do(async, std::move(bufs), [=](Communicator& c) { return c.Recv(b, n, t, peer, tag); },
                 [=](Communicator& c) { return c.IRecv(b, n, t, peer, tag); });
}

py::object Barrier(PyComm& self, bool async) {
  return self.Do(async, {}, [](Communicator& c) { return c.Barrier(); }, [](Communicator& c) { return c.IBarrier(); });
}

// The fusion bucket: tensors added are packed and all-reduced; wait() writes
// the results back. Holds the tensors until then.
class PyBucket {
 public:
  PyBucket(py::object comm, DataType dtype, ReduceOp op, size_t capacity)
      : comm_obj_(std::move(comm)), comm_(comm_obj_.cast<PyComm&>()), dtype_(dtype),
        bucket_(std::make_unique<ciuic::FusionBucket>(comm_.Get(), dtype, op, capacity)) {}
  PyBucket(const PyBucket&) = delete;
  PyBucket& operator=(const PyBucket&) = delete;
  ~PyBucket() {
    try {
      if (bucket_ != nullptr && !held_.empty()) {
        py::gil_scoped_release nogil;
        (void)bucket_->Wait();  // nothing may still write into the tensors
      }
    } catch (...) {  // a destructor must not throw
    }
  }
  void Add(py::handle x, const std::string& dtype) {
    Live();
    Buf b = Buf::Of(x, "x", true, dtype);
    if (b.dtype != dtype_) {
      Throw(PyExc_TypeError, std::string("x is ") + TypeName(b.dtype) + " but the bucket holds " + TypeName(dtype_));
    }
    void* p = b.ptr;
    const size_t n = b.count;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = bucket_->Add(p, n);
    }
    held_.push_back(std::move(b));
    Check(s, comm_.rank());
  }
  // Every array of `xs` (a list), the GIL released once for all the copies.
  void AddAll(const py::list& xs, const std::string& dtype) {
    Live();
    const size_t first = held_.size();
    for (size_t i = 0; i < xs.size(); ++i) {
      Buf b = Buf::Of(xs[i], "x", true, dtype);
      if (b.dtype != dtype_) {
        held_.resize(first);
        Throw(PyExc_TypeError, "x[" + std::to_string(i) + "] is " + TypeName(b.dtype) + " but the bucket holds " +
                                   TypeName(dtype_));
      }
      held_.push_back(std::move(b));
    }
    Status s;
    {
      py::gil_scoped_release nogil;
      for (size_t i = first; i < held_.size() && s.ok(); ++i) s = bucket_->Add(held_[i].ptr, held_[i].count);
    }
    Check(s, comm_.rank());
  }
  void Flush() {
    Live();
    Status s;
    {
      py::gil_scoped_release nogil;
      s = bucket_->Flush();
    }
    Check(s, comm_.rank());
  }
  void Wait() {
    Live();
    Status s;
    {
      py::gil_scoped_release nogil;
      s = bucket_->Wait();
    }
    held_.clear();
    Check(s, comm_.rank());
  }
  bool Test() {
    Live();
    StatusOr<bool> t = [&] {
      py::gil_scoped_release nogil;
      return bucket_->Test();
    }();
    if (!t.ok()) {
      held_.clear();
      Raise(t.status(), comm_.rank());
    }
    if (*t) held_.clear();
    return *t;
  }
  size_t issued() const { return bucket_->allreduces_issued(); }
  size_t pending() const { return held_.size(); }

 private:
  void Live() {
    if (comm_.closed()) Throw(PyExc_ValueError, "the context of this bucket is closed");
  }
  py::object comm_obj_;
  PyComm& comm_;
  DataType dtype_;
  std::unique_ptr<ciuic::FusionBucket> bucket_;
  std::vector<Buf> held_;
};

std::vector<std::pair<size_t, size_t>> Partition(const std::vector<double>& costs, int parts) {
  if (parts < 1) Throw(PyExc_ValueError, "parts=" + std::to_string(parts) + ": expected at least 1");
  for (size_t i = 0; i < costs.size(); ++i) {
    if (!std::isfinite(costs[i]) || costs[i] < 0) {
      Throw(PyExc_ValueError, "weights[" + std::to_string(i) + "]=" + std::to_string(costs[i]) +
                                  ": expected a finite, non-negative weight");
    }
  }
  StatusOr<std::vector<size_t>> b = ciuic::PartitionByCost(costs, parts);
  if (!b.ok()) Raise(b.status(), -1);
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i + 1 < b->size(); ++i) out.emplace_back((*b)[i], (*b)[i + 1]);
  return out;
}

int InfoMain(const std::vector<std::string>& args) {
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  argv.reserve(a.size() + 1);
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  py::gil_scoped_release nogil;
  const int rc = ciuic::tools::InfoMain(static_cast<int>(a.size()), argv.data());
  std::fflush(stdout);
  return rc;
}

}  // namespace

PYBIND11_MODULE(_ciuic, m) {
  m.doc() = "ciuic's C++ API (the package ciuic builds on it; use ciuic, not this module)";
  m.attr("version") = ciuic::Version();
  m.attr("git_revision") = ciuic::GitRevision();
  m.attr("build_options") = ciuic::BuildOptions();

  m.def("_set_error_classes", [](const py::dict& classes) {
    for (auto item : classes) {
      const int code = item.first.cast<int>();
      if (code > 0 && code < kNumCodes) g_error_class[code] = item.second.inc_ref().ptr();
    }
  });
  m.def("_culprit_rank", &CulpritRank);
  m.attr("UNDEFINED") = ciuic::kUndefinedColor;
  m.def("datatype_size", [](const std::string& name) {
    std::optional<DataType> t = DataTypeByName(name);
    if (!t) Throw(PyExc_TypeError, "dtype='" + name + "': not a ciuic datatype");
    return SizeOf(*t);
  });
  m.def("buffer_info", [](py::handle x, const std::string& dtype) {
    Buf b = Buf::Of(x, "x", false, dtype);
    return py::make_tuple(reinterpret_cast<uintptr_t>(b.ptr), b.count, TypeName(b.dtype), b.device);
  }, py::arg("x"), py::arg("dtype") = "", "(pointer, count, dtype, on_gpu) of an array or tensor, as the calls see it");
  m.def("partition", &Partition, py::arg("weights"), py::arg("parts"));
  m.def("info_main", &InfoMain, py::arg("argv"));
  m.def("chunk_size", [] {
    StatusOr<Config> c = Config::FromEnv();
    if (!c.ok()) Raise(c.status(), -1);
    return c->chunk_size;
  });
  m.def("knobs", [] {
    StatusOr<Config> c = Config::FromEnv();
    if (!c.ok()) Raise(c.status(), -1);
    py::list out;
    for (const ciuic::KnobDescription& k : ciuic::DescribeKnobs(*c)) {
      out.append(py::make_tuple(k.name, k.value, k.default_value, k.source, k.doc));
    }
    return out;
  });

  py::class_<PyStoreServer>(m, "StoreServer")
      .def(py::init<const std::string&, const std::string&>(), py::arg("host"), py::arg("secret"))
      .def_property_readonly("port", &PyStoreServer::port);

  py::class_<PyHandle>(m, "Request")
      .def("wait", &PyHandle::Wait, py::arg("timeout") = py::none())
      .def("test", &PyHandle::Test)
      .def_property_readonly("done", &PyHandle::done);

  py::class_<PyComm>(m, "Comm")
      .def_static("from_env", &FromEnv, py::arg("knobs"))
      .def_static("with_store", &WithStore, py::arg("rank"), py::arg("size"), py::arg("store"), py::arg("knobs"))
      .def_static("over_tcp", &OverTcp, py::arg("rank"), py::arg("size"), py::arg("host"), py::arg("port"),
                  py::arg("external"), py::arg("secret"), py::arg("knobs"))
      .def_property_readonly("rank", &PyComm::rank)
      .def_property_readonly("size", &PyComm::size)
      .def_property_readonly("transport", &PyComm::transport)
      .def_property_readonly("closed", &PyComm::closed)
      .def_property_readonly("last_algorithm", &PyComm::last_algorithm)
      .def("close", &PyComm::Close)
      .def("abort", &PyComm::Abort)
      .def("premul_sum", &PyComm::PremulSum, py::arg("factor"))
      .def("destroy_op", &PyComm::DestroyOp, py::arg("op"))
      .def("keep", &PyComm::Keep)
      .def("split", &PyComm::Split, py::arg("color"), py::arg("key"))
      .def("all_reduce", &AllReduce, py::arg("x"), py::arg("op"), py::arg("out"), py::arg("dtype"), py::arg("async_"))
      .def("broadcast", &Broadcast, py::arg("x"), py::arg("root"), py::arg("dtype"), py::arg("async_"))
      .def("reduce", &Reduce, py::arg("x"), py::arg("out"), py::arg("op"), py::arg("root"), py::arg("dtype"),
           py::arg("async_"))
      .def("all_gather", &AllGather, py::arg("out"), py::arg("x"), py::arg("dtype"), py::arg("async_"))
      .def("reduce_scatter", &ReduceScatter, py::arg("out"), py::arg("x"), py::arg("op"), py::arg("dtype"),
           py::arg("async_"))
      .def("all_to_all", &AllToAll, py::arg("out"), py::arg("x"), py::arg("out_counts"), py::arg("in_counts"),
           py::arg("dtype"), py::arg("async_"))
      .def("gather", &Gather, py::arg("out"), py::arg("x"), py::arg("root"), py::arg("dtype"), py::arg("async_"))
      .def("scatter", &Scatter, py::arg("out"), py::arg("x"), py::arg("root"), py::arg("dtype"), py::arg("async_"))
      .def("send", &Send, py::arg("x"), py::arg("peer"), py::arg("tag"), py::arg("dtype"), py::arg("async_"))
      .def("recv", &Recv, py::arg("x"), py::arg("peer"), py::arg("tag"), py::arg("dtype"), py::arg("async_"))
      .def("barrier", &Barrier, py::arg("async_"))
      // The 8-byte path: positional, no keywords, no out, no dtype override.
      .def("all_reduce_fast", [](PyComm& self, py::handle x, int op) {
        return AllReduce(self, x, op, py::none(), std::string(), false);
      });

  py::class_<PyBucket>(m, "Bucket")
      .def(py::init([](py::object comm, const std::string& dtype, int op, size_t capacity) {
             std::optional<DataType> t = DataTypeByName(dtype);
             if (!t) Throw(PyExc_TypeError, "dtype='" + dtype + "': not a ciuic datatype");
             return std::make_unique<PyBucket>(std::move(comm), *t, OpOf(op), capacity);
           }),
           py::arg("comm"), py::arg("dtype"), py::arg("op"), py::arg("capacity"))
      .def("add", &PyBucket::Add, py::arg("x"), py::arg("dtype") = "")
      .def("add_all", &PyBucket::AddAll, py::arg("xs"), py::arg("dtype") = "")
      .def("flush", &PyBucket::Flush)
      .def("wait", &PyBucket::Wait)
      .def("test", &PyBucket::Test)
      .def_property_readonly("allreduces_issued", &PyBucket::issued)
      .def_property_readonly("pending", &PyBucket::pending);
}
