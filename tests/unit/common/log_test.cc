#include "common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace ciuic {
namespace {

TEST(LogTest, WritesPrefixedLinesToFileAtLevel) {
  char path[] = "/tmp/ciuic_log_test_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  Config c;
  c.debug = LogLevel::kInfo;
  c.debug_file = path;
  ASSERT_TRUE(ConfigureLogging(c, 3).ok());
  CIUIC_LOG(kInfo, "hello %d", 42);
  CIUIC_LOG(kTrace, "not written");
  c.debug_file.clear();
  c.debug = LogLevel::kWarn;
  ASSERT_TRUE(ConfigureLogging(c, -1).ok());
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  unlink(path);
  const std::string text = ss.str();
  const std::string want = ":" + std::to_string(getpid()) + ":3 INFO ";
  EXPECT_NE(text.find(want), std::string::npos) << text;
  EXPECT_NE(text.find("hello 42"), std::string::npos) << text;
  EXPECT_EQ(text.find("not written"), std::string::npos) << text;
}

TEST(LogTest, UnopenableFileIsANamedError) {
  Config c;
  c.debug_file = "/nonexistent-dir/x.log";
  Status s = ConfigureLogging(c, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("CIUIC_DEBUG_FILE"), std::string::npos);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The environment for one test, restored after it (and the sink reset).
class AdoptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ciuic_adopt_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    unsetenv("CIUIC_DEBUG");
    unsetenv("CIUIC_DEBUG_FILE");
    internal::ResetLoggingForTest();
  }
  void TearDown() override {
    unsetenv("CIUIC_DEBUG");
    unsetenv("CIUIC_DEBUG_FILE");
    internal::ResetLoggingForTest();
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::string dir_;
};

TEST_F(AdoptTest, TheFirstCommunicatorsRankAndLevelCountAndLaterOnesDoNot) {
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  EXPECT_EQ(LogPrefix().substr(LogPrefix().rfind(':')), ":-");
  Config c;
  c.debug = LogLevel::kInfo;  // set in code, no CIUIC_DEBUG
  ASSERT_TRUE(AdoptLogging(c, 5).ok());
  EXPECT_TRUE(LogEnabled(LogLevel::kInfo));
  EXPECT_FALSE(LogEnabled(LogLevel::kTrace));
  EXPECT_EQ(LogPrefix().substr(LogPrefix().rfind(':')), ":5");
  c.debug = LogLevel::kTrace;
  ASSERT_TRUE(AdoptLogging(c, 6).ok());  // a second communicator (a split, another thread's rank)
  EXPECT_EQ(LogPrefix().substr(LogPrefix().rfind(':')), ":5");
  EXPECT_FALSE(LogEnabled(LogLevel::kTrace));
  // An explicit ConfigureLogging wins, before or after.
  ASSERT_TRUE(ConfigureLogging(Config(), 7).ok());
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
  ASSERT_TRUE(AdoptLogging(c, 8).ok());
  EXPECT_EQ(LogPrefix().substr(LogPrefix().rfind(':')), ":7");
  EXPECT_FALSE(LogEnabled(LogLevel::kInfo));
}

TEST_F(AdoptTest, CiuicDebugIsNeverLoweredByACodeConfig) {
  setenv("CIUIC_DEBUG", "INFO", 1);
  ASSERT_TRUE(AdoptLogging(Config(), 0).ok());  // Config() says WARN
  EXPECT_TRUE(LogEnabled(LogLevel::kInfo));
}

TEST_F(AdoptTest, APerRankFileOpensOnceTheRankIsKnownAndNoneNamedDash) {
  setenv("CIUIC_DEBUG", "INFO", 1);
  setenv("CIUIC_DEBUG_FILE", (dir_ + "/log.%r").c_str(), 1);
  CIUIC_LOG(kInfo, "before any communicator");  // to stderr: no rank yet
  ASSERT_TRUE(AdoptLogging(Config(), 2).ok());  // a code Config: the environment's file
  CIUIC_LOG(kInfo, "after %d", 1);
  internal::ResetLoggingForTest();  // closes (flushes) the file
  EXPECT_NE(access((dir_ + "/log.-").c_str(), F_OK), 0) << "a file for rank '-' was made";
  const std::string text = ReadAll(dir_ + "/log.2");
  EXPECT_NE(text.find(":" + std::to_string(getpid()) + ":2 INFO "), std::string::npos) << text;
  EXPECT_NE(text.find("after 1"), std::string::npos) << text;
  EXPECT_EQ(text.find("before any communicator"), std::string::npos) << text;
}

TEST_F(AdoptTest, AnUnopenableFileFromACommunicatorsConfigIsANamedError) {
  Config c;
  c.debug_file = dir_ + "/missing/log.%r";
  Status s = AdoptLogging(c, 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("missing/log.1"), std::string::npos) << s.ToString();
}

}  // namespace
}  // namespace ciuic
