// Uses the installed C++ API: a Reducer built from the environment.
#include <ciuic/ciuic.hpp>

#include <cstdio>

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
  std::printf("consumer_cpp ok: %s %s\n", ciuic_version(), r->target_name());
  return 0;
}
