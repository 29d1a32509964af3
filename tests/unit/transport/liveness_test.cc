// ProcessIdentity / ProcessGone (transport.h): what a rank publishes so its
// peers can tell, while they wait for its store keys, that it has exited.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "transport/transport.h"

namespace ciuic::transport {
namespace {

std::string Field(const std::string& identity, int i) {
  std::istringstream in(identity);
  std::string f;
  for (int k = 0; k <= i; ++k) in >> f;
  return f;
}

TEST(Liveness, ThisProcessIsAlive) {
  const std::string me = ProcessIdentity();
  ASSERT_FALSE(me.empty()) << "no /proc here?";
  EXPECT_EQ(Field(me, 2), std::to_string(getpid()));
  EXPECT_FALSE(ProcessGone(me));
}

// A child is gone once it exits: as a zombie (not reaped yet) and after.
TEST(Liveness, AChildThatExitedIsGoneZombieOrReaped) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const std::string id = ProcessIdentity();
    (void)!write(ready[1], id.data(), id.size());
    pause();  // until killed
    _exit(0);
  }
  close(ready[1]);
  char buf[256];
  const ssize_t n = read(ready[0], buf, sizeof(buf));
  close(ready[0]);
  ASSERT_GT(n, 0);
  const std::string id(buf, static_cast<size_t>(n));
  EXPECT_FALSE(ProcessGone(id)) << id;
  ASSERT_EQ(kill(child, SIGKILL), 0);
  // A zombie until waited for: gone already.
  bool gone = false;
  for (int i = 0; i < 2000 && !gone; ++i) {
    gone = ProcessGone(id);
    if (!gone) usleep(1000);
  }
  EXPECT_TRUE(gone) << "a killed, unreaped child still counts as alive: " << id;
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(ProcessGone(id)) << id;
}

// The same pid with another start time is another process (pid reuse);
// another boot or pid namespace is elsewhere: nothing can be said; a
// malformed identity says nothing either.
TEST(Liveness, OtherStartTimeIsGoneElsewhereIsUnknown) {
  const std::string me = ProcessIdentity();
  ASSERT_FALSE(me.empty());
  const std::string boot = Field(me, 0), ns = Field(me, 1), pid = Field(me, 2), start = Field(me, 3);
  EXPECT_TRUE(ProcessGone(boot + " " + ns + " " + pid + " " + start + "7"));
  EXPECT_FALSE(ProcessGone("00000000-0000-0000-0000-000000000000 " + ns + " " + pid + " 1"));
  EXPECT_FALSE(ProcessGone(boot + " pid:[1] " + pid + " 1"));
  EXPECT_FALSE(ProcessGone(""));
  EXPECT_FALSE(ProcessGone("garbage"));
}

}  // namespace
}  // namespace ciuic::transport
