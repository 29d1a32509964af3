// The C ABI: status codes, thread-local last error, env knobs read per call.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

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

TEST(CApiTest, BadKnobIsReportedByName) {
  setenv("CIUIC_SIMD_TARGET", "pentium", 1);
  float a[4] = {}, out[4];
  const void* srcs[1] = {a};
  const ciuic_status_t s = ciuic_reduce_local(out, srcs, 1, 4, CIUIC_FLOAT32, CIUIC_SUM);
  unsetenv("CIUIC_SIMD_TARGET");
  EXPECT_EQ(s, CIUIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(ciuic_last_error()).find("CIUIC_SIMD_TARGET='pentium'"),
            std::string::npos)
      << ciuic_last_error();
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
