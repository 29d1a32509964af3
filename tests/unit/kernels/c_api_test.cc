// The C ABI: status codes, thread-local last error, env knobs read once per
// process and again on ciuic_local_reconfigure.
#include <gtest/gtest.h>

#include <cstdlib>
#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ciuic/ciuic.h"

namespace {

TEST(CApiTest, ReduceLocalSumsFloats) {
  float a[5] = {1, 2, 3, 4, 5}, b[5] = {10, 20, 30, 40, 50}, out[5];
  const void* srcs[2] = {a, b};
  ASSERT_EQ(ciuic_reduce_local(out, srcs, 2, 5, CIUIC_FLOAT32, CIUIC_SUM), CIUIC_SUCCESS);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  EXPECT_STREQ(ciuic_last_error(), "");
  EXPECT_EQ(ciuic_datatype_size(CIUIC_BFLOAT16), 2u);
  EXPECT_EQ(ciuic_datatype_size(static_cast<ciuic_datatype_t>(99)), 0u);
  EXPECT_STRNE(ciuic_version(), "");
}

TEST(CApiTest, ErrorsSetCodeAndThreadLocalMessage) {
  float a[4] = {};
  const void* srcs[1] = {a};
  EXPECT_EQ(ciuic_reduce_local(a, srcs, 0, 4, CIUIC_FLOAT32, CIUIC_SUM),
            CIUIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ciuic_last_error()).find("nsrcs"), std::string::npos);
  EXPECT_STREQ(ciuic_status_string(CIUIC_ERROR_INVALID_ARGUMENT), "CIUIC_ERROR_INVALID_ARGUMENT");
  std::string other;
  std::thread([&] { other = ciuic_last_error(); }).join();
  EXPECT_EQ(other, "");  // another thread's error is its own
  EXPECT_EQ(ciuic_reduce_local(a, srcs, 1, 4, static_cast<ciuic_datatype_t>(77), CIUIC_SUM),
            CIUIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ciuic_last_error()).find("dtype"), std::string::npos);
}

// The knobs are read once per process (and by ciuic_local_reconfigure): a
// bad one is named by every call until a reconfiguration succeeds.
TEST(CApiTest, BadKnobIsReportedByNameUntilReconfigured) {
  float a[4] = {1, 2, 3, 4}, out[4];
  const void* srcs[1] = {a};
  ASSERT_EQ(ciuic_reduce_local(out, srcs, 1, 4, CIUIC_FLOAT32, CIUIC_SUM), CIUIC_SUCCESS);
  setenv("CIUIC_SIMD_TARGET", "pentium", 1);
  // Not read again by a call.
  EXPECT_EQ(ciuic_reduce_local(out, srcs, 1, 4, CIUIC_FLOAT32, CIUIC_SUM), CIUIC_SUCCESS);
  EXPECT_EQ(ciuic_local_reconfigure(), CIUIC_ERROR_INVALID_ARGUMENT);
  for (int i = 0; i < 2; ++i) {
    const ciuic_status_t s = ciuic_reduce_local(out, srcs, 1, 4, CIUIC_FLOAT32, CIUIC_SUM);
    EXPECT_EQ(s, CIUIC_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(ciuic_last_error()).find("CIUIC_SIMD_TARGET='pentium'"), std::string::npos)
        << ciuic_last_error();
  }
  unsetenv("CIUIC_SIMD_TARGET");
  EXPECT_EQ(ciuic_local_reconfigure(), CIUIC_SUCCESS);
  EXPECT_EQ(ciuic_reduce_local(out, srcs, 1, 4, CIUIC_FLOAT32, CIUIC_SUM), CIUIC_SUCCESS);
  EXPECT_EQ(out[3], 4.0f);
}

// Calls from several threads while another reconfigures: every call
// succeeds with the right result (reducers replaced stay alive).
TEST(CApiTest, ReconfigureWhileOtherThreadsCall) {
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 2; ++t) {
    callers.emplace_back([&] {
      float a[64], b[64], out[64];
      for (int i = 0; i < 64; ++i) a[i] = static_cast<float>(i), b[i] = 1;
      const void* srcs[2] = {a, b};
      while (!stop.load()) {
        if (ciuic_reduce_local(out, srcs, 2, 64, CIUIC_FLOAT32, CIUIC_SUM) != CIUIC_SUCCESS || out[63] != 64.0f) {
          wrong.fetch_add(1);
        }
      }
    });
  }
  for (int i = 0; i < 50; ++i) EXPECT_EQ(ciuic_local_reconfigure(), CIUIC_SUCCESS);
  stop.store(true);
  for (auto& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(CApiTest, ConversionsRoundTrip) {
  float in[3] = {1.5f, -2.25f, 65504.f}, back[3];
  uint16_t h[3];
  ASSERT_EQ(ciuic_convert_f32_to_f16(in, h, 3), CIUIC_SUCCESS);
  ASSERT_EQ(ciuic_convert_f16_to_f32(h, back, 3), CIUIC_SUCCESS);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back[i], in[i]);
  ASSERT_EQ(ciuic_convert_f32_to_bf16(in, h, 2), CIUIC_SUCCESS);
  ASSERT_EQ(ciuic_convert_bf16_to_f32(h, back, 2), CIUIC_SUCCESS);
  EXPECT_EQ(back[0], 1.5f);
  EXPECT_EQ(back[1], -2.25f);
}

TEST(CApiTest, Fp8ConversionsPremulSumAndNewTypes) {
  const float in[4] = {1.0f, -448.0f, 1000.0f, 0.001953125f};  // 0.0019.. = 2^-9
  uint8_t e4[4], e5[4];
  float back[4];
  ASSERT_EQ(ciuic_convert(in, CIUIC_FLOAT32, e4, CIUIC_FLOAT8_E4M3, 4), CIUIC_SUCCESS);
  EXPECT_EQ(e4[0], 0x38);
  EXPECT_EQ(e4[1], 0xFE);
  EXPECT_EQ(e4[2], 0x7E);  // saturated
  EXPECT_EQ(e4[3], 0x01);
  ASSERT_EQ(ciuic_convert(e4, CIUIC_FLOAT8_E4M3, back, CIUIC_FLOAT32, 4), CIUIC_SUCCESS);
  EXPECT_EQ(back[2], 448.0f);
  ASSERT_EQ(ciuic_convert(in, CIUIC_FLOAT32, e5, CIUIC_FLOAT8_E5M2, 3), CIUIC_SUCCESS);
  EXPECT_EQ(e5[0], 0x3C);
  EXPECT_EQ(e5[2], 0x64);  // 1000 rounds to 1024 (e=25, m=0)
  EXPECT_EQ(ciuic_convert(in, CIUIC_FLOAT32, e5, CIUIC_INT8, 1), CIUIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ciuic_last_error()).find("i8"), std::string::npos) << ciuic_last_error();
  EXPECT_EQ(ciuic_datatype_size(CIUIC_FLOAT8_E5M2), 1u);
  EXPECT_EQ(ciuic_datatype_size(CIUIC_INT16), 2u);
  EXPECT_EQ(ciuic_datatype_size(CIUIC_BOOL), 1u);

  const float a[2] = {2, 8}, b[2] = {4, -8};
  const void* srcs[2] = {a, b};
  float out[2];
  ASSERT_EQ(ciuic_reduce_local_premul_sum(out, srcs, 2, 2, CIUIC_FLOAT32, 0.25), CIUIC_SUCCESS);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], 0.0f);
  const int16_t i[2] = {0x0F0F, 3}, j[2] = {0x00FF, 5};
  const void* is[2] = {i, j};
  int16_t io[2];
  ASSERT_EQ(ciuic_reduce_local(io, is, 2, 2, CIUIC_INT16, CIUIC_BXOR), CIUIC_SUCCESS);
  EXPECT_EQ(io[0], 0x0FF0);
  EXPECT_EQ(io[1], 6);
  EXPECT_EQ(ciuic_reduce_local_premul_sum(io, is, 2, 2, CIUIC_INT16, 2.0), CIUIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ciuic_last_error()).find("premul_sum on dtype i16"), std::string::npos);
  EXPECT_EQ(ciuic_reduce_local(out, srcs, 2, 2, CIUIC_FLOAT32, CIUIC_BOR), CIUIC_ERROR_INVALID_ARGUMENT);
}

TEST(CApiTest, CudaEntryPointWithoutCudaOrGpuIsAClearError) {
  float a[4] = {}, out[4];
  const void* srcs[1] = {a};
  const ciuic_status_t s =
      ciuic_reduce_local_cuda(out, srcs, 1, 4, CIUIC_FLOAT32, CIUIC_SUM, nullptr);
#ifdef CIUIC_HAVE_CUDA
  // Built with CUDA: host pointers are rejected (or no GPU is present).
  EXPECT_NE(s, CIUIC_SUCCESS);
#else
  EXPECT_EQ(s, CIUIC_ERROR_UNIMPLEMENTED);
#endif
  EXPECT_STRNE(ciuic_last_error(), "");
}

}  // namespace
