#include "common/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

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

}  // namespace
}  // namespace ciuic
