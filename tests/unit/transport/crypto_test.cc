// SHA-256 against FIPS 180-4 examples, HMAC-SHA256 against RFC 4231: checks
// that the libcrypto wrappers pass keys, lengths and outputs through intact.
#include "transport/crypto.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <thread>

namespace ciuic::transport {
namespace {

std::string Unhex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out.push_back(static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16)));
  return out;
}

TEST(Sha256Test, Fips180Vectors) {
  EXPECT_EQ(ToHex(Sha256Of("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(ToHex(Sha256Of("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(ToHex(Sha256Of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(ToHex(Sha256Of(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(HmacSha256Test, Rfc4231Vectors) {
  // Test case 1.
  EXPECT_EQ(ToHex(HmacSha256(std::string(20, '\x0b'), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2.
  EXPECT_EQ(ToHex(HmacSha256("Jefe", "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3.
  EXPECT_EQ(ToHex(HmacSha256(std::string(20, '\xaa'), std::string(50, '\xdd'))),
            "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 4.
  EXPECT_EQ(ToHex(HmacSha256(Unhex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                             std::string(50, '\xcd'))),
            "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 6: a key longer than the block.
  EXPECT_EQ(ToHex(HmacSha256(std::string(131, '\xaa'),
                             "Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Test case 7.
  EXPECT_EQ(ToHex(HmacSha256(std::string(131, '\xaa'),
                             "This is a test using a larger than block-size key and a larger than "
                             "block-size data. The key needs to be hashed before being used by the "
                             "HMAC algorithm.")),
            "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

// A fork while another thread computes its process's first MAC (libcrypto
// then initialises and caches under its own locks): the child computes its
// own at once. Before the fork handlers a rank forked beside a store server
// could inherit such a lock held and hang in its first HMAC. Each round
// re-executes this test in a fresh process (CIUIC_TEST_FRESH_MAC=1), where
// a thread makes the first MAC while the main thread forks.
TEST(HmacSha256Test, ForkDuringAnotherThreadsFirstMacLeavesTheChildAWorkingLibcrypto) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // Under GCC 12's ASan 4-6 rounds in 100 hang. A hung child (gdb) waits in
  // the sanitizer's own allocator: a size-class mutex that another thread
  // held at the fork (asan_realloc <- libcrypto's first init). That runtime
  // takes no allocator locks around fork(); LLVM's does since 18 (asan,
  // 2023) and TSan's since 19. CIUIC_TEST_SANITIZER_FORK=1 runs it anyway.
  if (std::getenv("CIUIC_TEST_SANITIZER_FORK") == nullptr) {
    GTEST_SKIP() << "a fork beside a thread in malloc hangs in this sanitizer runtime's allocator lock "
                    "(not libcrypto's: see the comment); CIUIC_TEST_SANITIZER_FORK=1 runs it";
  }
#endif
  static const char kWant[] = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7";  // RFC 4231 #1
  if (std::getenv("CIUIC_TEST_FRESH_MAC") != nullptr) {
    std::atomic<bool> done{false};
    std::thread first([&] {
      (void)HmacSha256("first key", "first");
      done.store(true);
    });
    int bad = 0;
    for (int i = 0; i < 50 && !(i > 5 && done.load()); ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        alarm(10);  // a child stuck on an inherited lock dies by SIGALRM
        _exit(ToHex(HmacSha256(std::string(20, '\x0b'), "Hi There")) == kWant ? 0 : 1);
      }
      int status = 0;
      if (pid < 0 || waitpid(pid, &status, 0) != pid) _exit(4);
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) bad |= 1;
      if (WIFEXITED(status) && WEXITSTATUS(status) != 0) bad |= 2;
    }
    first.join();
    _exit(bad);
  }
  const std::string filter = std::string("--gtest_filter=") + ::testing::UnitTest::GetInstance()->current_test_suite()->name() +
                             "." + ::testing::UnitTest::GetInstance()->current_test_info()->name();
  int hung = 0, wrong = 0;
  for (int round = 0; round < 100; ++round) {  // without the handlers, 2 rounds in 200 hung here
    const pid_t fresh = fork();
    ASSERT_GE(fresh, 0);
    if (fresh == 0) {
      setenv("CIUIC_TEST_FRESH_MAC", "1", 1);
      execl("/proc/self/exe", "crypto_test", filter.c_str(), static_cast<char*>(nullptr));
      _exit(5);
    }
    int status = 0;
    ASSERT_EQ(waitpid(fresh, &status, 0), fresh);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) < 4) << "fresh process status " << status;
    hung += (WEXITSTATUS(status) & 1) != 0;
    wrong += (WEXITSTATUS(status) & 2) != 0;
  }
  EXPECT_EQ(hung, 0) << "rounds whose forked children hung in HMAC";
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace ciuic::transport
