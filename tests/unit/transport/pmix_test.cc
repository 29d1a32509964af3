// The PMIx bootstrap's parts that run without a launcher: the rendezvous
// value format, secrets, the advertised host, and DiscoverJob's fallbacks
// when PMIx variables are present but no PMIx server is reachable. The real
// thing (mpirun's PMIx server) is tests/integration/pmix_mpirun.sh.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "transport/transport.h"
#include "transport/pmix.h"

namespace ciuic::transport {
namespace {

using Env = std::map<std::string, std::string>;

pmix::Lookup LookupIn(const Env& env) {
  return [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}

StatusOr<JobInfo> Discover(const Env& env) {
  const pmix::Lookup lookup = LookupIn(env);
  StatusOr<Config> c = Config::FromLookup(lookup);
  if (!c.ok()) return c.status();
  return DiscoverJob(*c, lookup);
}

// These tests fake PMIx variables; under a real PMIx launcher the library
// would (rightly) talk to it instead.
bool UnderRealPmix() { return std::getenv("PMIX_NAMESPACE") != nullptr; }

TEST(PmixTest, StoreAddressRoundTrip) {
  std::string host;
  uint16_t port = 0;
  ASSERT_TRUE(pmix::ParseStoreAddress(pmix::FormatStoreAddress("10.1.2.3", 29500), &host, &port).ok());
  EXPECT_EQ(host, "10.1.2.3");
  EXPECT_EQ(port, 29500);
  // IPv6 text: the port follows the last ':'.
  ASSERT_TRUE(pmix::ParseStoreAddress(pmix::FormatStoreAddress("fd00::1", 1), &host, &port).ok());
  EXPECT_EQ(host, "fd00::1");
  EXPECT_EQ(port, 1);
}

TEST(PmixTest, MalformedStoreAddress) {
  for (const char* bad : {"", "host", ":80", "host:", "host:0", "host:65536", "host:8x", "host:123456",
                          "error: rank 0 failed"}) {
    std::string host = "unchanged";
    uint16_t port = 7;
    Status s = pmix::ParseStoreAddress(bad, &host, &port);
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << bad;
    EXPECT_NE(s.message().find(pmix::kStoreKey), std::string::npos) << s.ToString();
    EXPECT_EQ(host, "unchanged");
    EXPECT_EQ(port, 7);
  }
}

TEST(PmixTest, SecretsAreFreshHex) {
  StatusOr<std::string> a = pmix::MakeSecret();
  StatusOr<std::string> b = pmix::MakeSecret();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_EQ(a->find_first_not_of("0123456789abcdef"), std::string::npos) << *a;
  EXPECT_NE(*a, *b);
}

TEST(PmixTest, AdvertisedHost) {
  StatusOr<std::string> any = pmix::AdvertisedHost("");
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_FALSE(any->empty());
  EXPECT_EQ(any->find(':') == std::string::npos, any->find('.') != std::string::npos) << *any;
  StatusOr<std::string> lo = pmix::AdvertisedHost("=lo");
  if (!lo.ok()) GTEST_SKIP() << "no interface named lo: " << lo.status().ToString();
  EXPECT_EQ(*lo, "127.0.0.1");
  StatusOr<std::string> none = pmix::AdvertisedHost("=no-such-interface0");
  EXPECT_FALSE(none.ok());
}

TEST(PmixTest, VariablesPresent) {
  EXPECT_FALSE(pmix::VariablesPresent(LookupIn({})));
  EXPECT_FALSE(pmix::VariablesPresent(LookupIn({{"PMIX_RANK", "0"}})));
  EXPECT_FALSE(pmix::VariablesPresent(LookupIn({{"PMIX_NAMESPACE", "x"}})));
  EXPECT_TRUE(pmix::VariablesPresent(LookupIn({{"PMIX_NAMESPACE", "x"}, {"PMIX_RANK", "0"}})));
}

TEST(PmixTest, UnreachableServerFallsBackToOtherLauncher) {
  if (UnderRealPmix()) GTEST_SKIP() << "running under a real PMIx launcher";
  auto j = Discover({{"PMIX_NAMESPACE", "fake.1"}, {"PMIX_RANK", "3"}, {"OMPI_COMM_WORLD_RANK", "3"},
                     {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}});
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->launcher, "openmpi");
  EXPECT_EQ(j->rank, 3);
  EXPECT_EQ(j->world_size, 4);
  EXPECT_EQ(j->local_rank, 1);
}

TEST(PmixTest, UnreachableServerAloneIsAnError) {
  if (UnderRealPmix()) GTEST_SKIP() << "running under a real PMIx launcher";
  // A single rank would be a wrong guess for a process a PMIx launcher started.
  auto j = Discover({{"PMIX_NAMESPACE", "fake.1"}, {"PMIX_RANK", "3"}});
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), pmix::Available() ? StatusCode::kUnavailable : StatusCode::kUnimplemented);
  EXPECT_NE(j.status().message().find("PMIX_RANK"), std::string::npos) << j.status().ToString();
  EXPECT_NE(j.status().message().find("CIUIC_WORLD_SIZE"), std::string::npos) << j.status().ToString();
}

TEST(PmixTest, CiuicVariablesWin) {
  auto j = Discover({{"PMIX_NAMESPACE", "fake.1"}, {"PMIX_RANK", "3"}, {"CIUIC_RANK", "1"},
                     {"CIUIC_WORLD_SIZE", "2"}});
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->launcher, "ciuic");
  EXPECT_EQ(j->rank, 1);
}

TEST(PmixTest, RendezvousNeedsAPmixJob) {
  if (UnderRealPmix()) GTEST_SKIP() << "running under a real PMIx launcher";
  JobInfo job;
  job.world_size = 2;
  auto server = pmix::Rendezvous(&job, "");
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(),
            pmix::Available() ? StatusCode::kFailedPrecondition : StatusCode::kUnimplemented);
  EXPECT_TRUE(job.store_host.empty());
}

}  // namespace
}  // namespace ciuic::transport
