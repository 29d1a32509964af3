// A rank for ciuic_run_test's simulated-host cases: a communicator from
// the environment ciuic-run sets, then every collective with its result
// checked, and a ring of sends. Prints "rank R of N on H: <transport> ok;
// 4 MiB all-reduce: <what ran it>" and exits 0; on any error prints it on stderr and exits 1. With an
// argument "die-on R", rank R exits 3 after the first all-reduce and the
// others report the error of their next call (exit 2).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ciuic/collectives.h"

namespace {

using ciuic::DataType;
using ciuic::ReduceOp;
using ciuic::Status;

int Fail(int rank, const std::string& what, const Status& s) {
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int die = argc == 3 && std::string(argv[1]) == "die-on" ? std::atoi(argv[2]) : -1;
  auto comm = ciuic::Communicator::CreateFromEnv();
  if (!comm.ok()) return Fail(-1, "create", comm.status());
  ciuic::Communicator& c = **comm;
  const int rank = c.rank(), n = c.size();
  std::string large_algo;  // what ran the 4 MiB all-reduce
  for (size_t count : {size_t{1}, size_t{4097}, size_t{1} << 20}) {
    std::vector<float> v(count, static_cast<float>(rank + 1));
    if (Status s = c.AllReduce(v.data(), v.data(), count, DataType::kFloat32, ReduceOp::kSum); !s.ok()) {
      return Fail(rank, "allreduce", s);
    }
    const float want = static_cast<float>(n) * static_cast<float>(n + 1) / 2.0f;  // exact for small n
    for (float x : v) {
      if (x != want) return Fail(rank, "allreduce", ciuic::InternalError("got " + std::to_string(x)));
    }
    if (count == size_t{1} << 20) large_algo = c.last_algorithm();
    if (rank == die) _exit(3);
    std::vector<float> all(count * static_cast<size_t>(n), -1);
    if (Status s = c.AllGather(v.data(), all.data(), count, DataType::kFloat32); !s.ok()) {
      if (die >= 0) {
        std::fprintf(stderr, "rank %d: after rank %d died: %s\n", rank, die, s.ToString().c_str());
        return 2;
      }
      return Fail(rank, "allgather", s);
    }
    std::vector<float> b(count, static_cast<float>(rank));
    if (Status s = c.Broadcast(b.data(), count, DataType::kFloat32, n - 1); !s.ok()) return Fail(rank, "broadcast", s);
    for (float x : b) {
      if (x != static_cast<float>(n - 1)) return Fail(rank, "broadcast", ciuic::InternalError("wrong value"));
    }
  }
  std::vector<int> out(1000, rank), in(1000, -1);
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  auto rs = c.ISend(out.data(), out.size(), DataType::kInt32, next);
  auto rr = c.IRecv(in.data(), in.size(), DataType::kInt32, prev);
  if (!rs.ok() || !rr.ok()) return Fail(rank, "isend/irecv", rs.ok() ? rr.status() : rs.status());
  if (Status s = rs->Wait(); !s.ok()) return Fail(rank, "send", s);
  if (Status s = rr->Wait(); !s.ok()) return Fail(rank, "recv", s);
  for (int x : in) {
    if (x != prev) return Fail(rank, "recv", ciuic::InternalError("wrong value"));
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::printf("rank %d of %d on %s: %s ok; 4 MiB all-reduce: %s\n", rank, n, host, c.transport_name().c_str(),
              large_algo.c_str());
  return 0;
}
