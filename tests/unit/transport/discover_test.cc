#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>

#include "transport/transport.h"

namespace ciuic::transport {
namespace {

using Env = std::map<std::string, std::string>;

StatusOr<JobInfo> Discover(const Env& env) {
  auto lookup = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  StatusOr<Config> c = Config::FromLookup(lookup);
  if (!c.ok()) return c.status();
  return DiscoverJob(*c, lookup);
}

void ExpectError(const Env& env, const std::string& names) {
  auto j = Discover(env);
  ASSERT_FALSE(j.ok()) << names;
  EXPECT_NE(j.status().message().find(names), std::string::npos) << j.status().ToString();
}

TEST(DiscoverJobTest, EachLauncher) {
  auto none = Discover({});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->rank, 0);
  EXPECT_EQ(none->world_size, 1);

  auto c = Discover({{"CIUIC_RANK", "2"}, {"CIUIC_WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->launcher, "ciuic");
  EXPECT_EQ(c->rank, 2);
  EXPECT_EQ(c->world_size, 4);

  auto o = Discover({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                     {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->launcher, "openmpi");
  EXPECT_EQ(o->rank, 3);
  EXPECT_EQ(o->world_size, 8);
  EXPECT_EQ(o->local_rank, 1);

  auto s = Discover({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "0"}});
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->launcher, "slurm");
  EXPECT_EQ(s->rank, 5);
  EXPECT_EQ(s->local_rank, 0);

  auto p = Discover({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->launcher, "pmi");
  EXPECT_EQ(p->rank, 1);
  EXPECT_EQ(p->world_size, 2);
  EXPECT_EQ(p->local_rank, -1);
}

TEST(DiscoverJobTest, BadValuesNameTheVariable) {
  ExpectError({{"CIUIC_RANK", "x"}, {"CIUIC_WORLD_SIZE", "4"}}, "CIUIC_RANK");
  ExpectError({{"CIUIC_RANK", "4"}, {"CIUIC_WORLD_SIZE", "4"}}, "CIUIC_RANK=4");
  ExpectError({{"CIUIC_RANK", "1"}}, "CIUIC_WORLD_SIZE");
  ExpectError({{"CIUIC_WORLD_SIZE", "0"}}, "CIUIC_WORLD_SIZE");
  ExpectError({{"OMPI_COMM_WORLD_RANK", "8"}, {"OMPI_COMM_WORLD_SIZE", "8"}}, "OMPI_COMM_WORLD_RANK=8");
  ExpectError({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "two"}}, "OMPI_COMM_WORLD_SIZE");
  ExpectError({{"SLURM_PROCID", "-1"}, {"SLURM_NTASKS", "2"}}, "SLURM_PROCID");
  ExpectError({{"SLURM_PROCID", "0"}}, "SLURM_NTASKS");
  ExpectError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_LOCALID", "a"}}, "SLURM_LOCALID");
  ExpectError({{"PMI_RANK", "3"}, {"PMI_SIZE", "2"}}, "PMI_RANK=3");
  ExpectError({{"CIUIC_STORE_ADDR", "nohost"}}, "CIUIC_STORE_ADDR");
  ExpectError({{"CIUIC_STORE_ADDR", "h:99999"}}, "CIUIC_STORE_ADDR");
  ExpectError({{"CIUIC_TIMEOUT_MS", "soon"}}, "CIUIC_TIMEOUT_MS");
  ExpectError({{"CIUIC_STORE_EXTERNAL", "maybe"}}, "CIUIC_STORE_EXTERNAL");
  ExpectError({{"CIUIC_SECRET", "a"}, {"CIUIC_SECRET_FILE", "/x"}}, "CIUIC_SECRET_FILE");
}

TEST(DiscoverJobTest, StoreSecretAndTimeout) {
  auto j = Discover({{"CIUIC_STORE_ADDR", "node7:29500"}, {"CIUIC_STORE_EXTERNAL", "1"},
                     {"CIUIC_SECRET", "hunter2"}, {"CIUIC_TIMEOUT_MS", "1500"}});
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->store_host, "node7");
  EXPECT_EQ(j->store_port, 29500);
  EXPECT_TRUE(j->store_external);
  EXPECT_EQ(j->secret, "hunter2");
  EXPECT_EQ(j->timeout.count(), 1500);

  // The secret never prints.
  Config c;
  ASSERT_TRUE(c.Set("CIUIC_SECRET", "hunter2").ok());
  bool seen = false;
  for (const KnobDescription& k : DescribeKnobs(c)) {
    EXPECT_EQ(k.value.find("hunter2"), std::string::npos) << k.name;
    if (k.name == "CIUIC_SECRET") {
      EXPECT_EQ(k.value, "(set)");
      seen = true;
    }
  }
  EXPECT_TRUE(seen);
}

TEST(DiscoverJobTest, SecretFile) {
  char path[] = "/tmp/ciuic_secret_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, "s3cret\n", 7), 7);
  close(fd);
  ASSERT_EQ(chmod(path, 0600), 0);
  auto j = Discover({{"CIUIC_SECRET_FILE", path}});
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ(j->secret, "s3cret");
  ASSERT_EQ(chmod(path, 0644), 0);
  auto w = Discover({{"CIUIC_SECRET_FILE", path}});
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find(path), std::string::npos) << w.status().ToString();
  EXPECT_NE(w.status().message().find("world-readable"), std::string::npos);
  unlink(path);
  auto m = Discover({{"CIUIC_SECRET_FILE", path}});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace ciuic::transport
