#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"

namespace ciuic::transport {
namespace {

using std::chrono::milliseconds;

std::string TempDir() {
  char tmpl[] = "/tmp/ciuic_filestore_XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d == nullptr ? std::string() : std::string(d);
}

TEST(FileStoreTest, RoundTripAddAndWait) {
  const std::string dir = TempDir();
  ASSERT_FALSE(dir.empty());
  auto store = FileStore::Open(dir + "/store");
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  const std::string binary("a\0b\xff", 4);
  ASSERT_TRUE((*store)->Set("rank/0/addr", binary).ok());
  ASSERT_TRUE((*store)->Set(std::string(300, 'k') + "/\x01", "long").ok());
  auto v = (*store)->Get("rank/0/addr", milliseconds(100));
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, binary);
  EXPECT_EQ(*(*store)->Get(std::string(300, 'k') + "/\x01", milliseconds(100)), "long");
  ASSERT_TRUE((*store)->Set("rank/0/addr", "new").ok());
  EXPECT_EQ(*(*store)->Get("rank/0/addr", milliseconds(100)), "new");

  // A second handle (another process would do the same) sees the values.
  auto other = FileStore::Open(dir + "/store");
  ASSERT_TRUE(other.ok());
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(30));
    (*other)->Set("late", "x").IgnoreError();
  });
  EXPECT_TRUE((*store)->Wait({"rank/0/addr", "late"}, milliseconds(5000)).ok());
  setter.join();

  std::vector<std::thread> adders;
  for (int t = 0; t < 4; ++t) {
    adders.emplace_back([&] {
      for (int i = 0; i < 25; ++i) (*other)->Add("count", 1).status().IgnoreError();
    });
  }
  for (auto& t : adders) t.join();
  EXPECT_EQ(*(*store)->Add("count", 0), 100);
  EXPECT_EQ(*(*store)->Get("count", milliseconds(10)), "100");
  EXPECT_EQ((*store)->Add("late", 1).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*store)->Set("", "x").code(), StatusCode::kInvalidArgument);
  std::system(("rm -rf " + dir).c_str());
}

TEST(FileStoreTest, GetTimeoutNamesKey) {
  const std::string dir = TempDir();
  auto store = FileStore::Open(dir);
  ASSERT_TRUE(store.ok());
  const auto t0 = std::chrono::steady_clock::now();
  auto v = (*store)->Get("missing/key", milliseconds(50));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(50));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(v.status().message().find("missing/key"), std::string::npos) << v.status().message();
  Status w = (*store)->Wait({"missing/other"}, milliseconds(20));
  EXPECT_EQ(w.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(w.message().find("missing/other"), std::string::npos);
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace ciuic::transport
