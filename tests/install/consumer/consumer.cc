// Uses the installed C++ API: a Reducer built from the environment, and a
// one-rank communicator over a store of the consumer's own (what a framework
// does to bring its rendezvous): the public headers are all it needs.
#include <ciuic/ciuic.hpp>

#include <cstdio>
#include <map>
#include <mutex>
#include <string>

namespace {
class MapStore : public ciuic::transport::Store {
 public:
  ciuic::Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    kv_[key] = value;
    return ciuic::Status::Ok();
  }
  ciuic::StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kv_.find(key);
    if (it == kv_.end()) return ciuic::DeadlineExceededError("no key " + key);
    return it->second;
  }
  ciuic::Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    for (const auto& k : keys) CIUIC_RETURN_IF_ERROR(Get(k, t).status());
    return ciuic::Status::Ok();
  }
  ciuic::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t v = (kv_.count(key) ? std::stoll(kv_[key]) : 0) + delta;
    kv_[key] = std::to_string(v);
    return v;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> kv_;
};
}  // namespace

int main() {
  auto r = ciuic::kernels::Reducer::FromEnv();
  if (!r.ok()) {
    std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
    return 1;
  }
  float a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, out[3];
  const void* srcs[2] = {a, b};
  ciuic::Status s = r->Reduce(out, srcs, 2, 3, ciuic::DataType::kFloat32, ciuic::ReduceOp::kMax);
  if (!s.ok() || out[0] != 4 || out[2] != 6) return 1;

  auto config = ciuic::Config::FromEnv();
  if (!config.ok()) return 1;
  auto comm = ciuic::Communicator::CreateWithStore(0, 1, std::make_shared<MapStore>(), *config);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  s = (*comm)->AllReduce(a, out, 3, ciuic::DataType::kFloat32, ciuic::ReduceOp::kSum);
  if (!s.ok() || out[0] != 1 || out[2] != 3) {
    std::fprintf(stderr, "allreduce: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("consumer_cpp ok: %s %s, a communicator over its own store\n", ciuic_version(), r->target_name());
  return 0;
}
