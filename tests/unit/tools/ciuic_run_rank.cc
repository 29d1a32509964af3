// A rank for ciuic_run_test: finds its job the way every ciuic program does
// (Config::FromEnv + DiscoverJob), proves the secret to the store ciuic-run
// serves, publishes its host name and waits for every other rank's.
//
// Prints "rank R of N: store ok, hosts h0,h1,..." and exits 0; on any error
// prints it on stderr and exits 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "ciuic/config.h"
#include "transport/transport.h"

namespace {

int Fail(const std::string& what, const ciuic::Status& status) {
  std::fprintf(stderr, "ciuic_run_rank: %s: %s\n", what.c_str(), status.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  using ciuic::transport::TcpStoreClient;
  auto config = ciuic::Config::FromEnv();
  if (!config.ok()) return Fail("config", config.status());
  auto job = ciuic::transport::DiscoverJob(*config);
  if (!job.ok()) return Fail("DiscoverJob", job.status());
  if (job->launcher != "ciuic" || !job->store_external || job->secret.empty() || job->store_host.empty()) {
    std::fprintf(stderr, "ciuic_run_rank: unexpected job: launcher=%s external=%d secret=%s store=%s\n",
                 job->launcher.c_str(), job->store_external ? 1 : 0, job->secret.empty() ? "no" : "yes",
                 job->store_host.c_str());
    return 1;
  }
  const std::chrono::milliseconds timeout(10000);
  auto store = TcpStoreClient::Connect(job->store_host, job->store_port, job->secret, timeout);
  if (!store.ok()) return Fail("connect to the store", store.status());
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  if (auto s = (*store)->Set("host/" + std::to_string(job->rank), host); !s.ok()) return Fail("Set", s);
  std::string hosts;
  for (int r = 0; r < job->world_size; ++r) {
    auto h = (*store)->Get("host/" + std::to_string(r), timeout);
    if (!h.ok()) return Fail("Get", h.status());
    hosts += (r == 0 ? "" : ",") + *h;
  }
  std::printf("rank %d of %d: store ok, hosts %s\n", job->rank, job->world_size, hosts.c_str());
  return 0;
}
