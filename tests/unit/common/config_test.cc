#include "ciuic/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

namespace ciuic {
namespace {

StatusOr<Config> FromMap(const std::map<std::string, std::string>& env) {
  return Config::FromLookup([&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

TEST(ConfigTest, DefaultsWhenNothingSet) {
  auto c = FromMap({});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->debug, LogLevel::kWarn);
  EXPECT_EQ(c->simd_target, "auto");
  EXPECT_EQ(c->kernel_nt_threshold, -1);
  EXPECT_TRUE(c->from_env.empty());
  for (const KnobDescription& k : DescribeKnobs(*c)) {
    EXPECT_EQ(k.source, "default") << k.name;
    EXPECT_FALSE(k.doc.empty()) << k.name;
  }
}

TEST(ConfigTest, ReadsValuesAndRecordsSource) {
  auto c = FromMap({{"CIUIC_DEBUG", "info"},
                    {"CIUIC_SIMD_TARGET", "AVX2"},
                    {"CIUIC_KERNEL_NT_THRESHOLD", "8M"},
                    {"CIUIC_KERNEL_PREFETCH", "0"},
                    {"CIUIC_FP8_PAIRS", "F16C"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->debug, LogLevel::kInfo);
  EXPECT_EQ(c->simd_target, "avx2");
  EXPECT_EQ(c->fp8_pairs, "f16c");
  EXPECT_EQ(c->kernel_nt_threshold, 8 << 20);
  EXPECT_EQ(c->kernel_prefetch_bytes, 0u);
  int from_env = 0;
  for (const KnobDescription& k : DescribeKnobs(*c)) from_env += k.source == "env";
  EXPECT_EQ(from_env, 5);
}

TEST(ConfigTest, BadValueNamesTheVariable) {
  auto c = FromMap({{"CIUIC_DEBUG", "LOUD"}});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("CIUIC_DEBUG='LOUD'"), std::string::npos)
      << c.status().message();
  auto t = FromMap({{"CIUIC_KERNEL_TILE", "12Q"}});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("CIUIC_KERNEL_TILE"), std::string::npos);
  auto s = FromMap({{"CIUIC_SIMD_TARGET", "avx9000"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("CIUIC_SIMD_TARGET"), std::string::npos);
  auto p = FromMap({{"CIUIC_FP8_PAIRS", "fp16"}});
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("CIUIC_FP8_PAIRS='fp16'"), std::string::npos) << p.status().message();
  EXPECT_NE(p.status().message().find("auto, avx512fp16, avx512, f16c or f32"), std::string::npos) << p.status().message();
}

TEST(ConfigTest, SetByNameAndUnknownName) {
  Config c;
  ASSERT_TRUE(c.Set("CIUIC_KERNEL_TILE", "16K").ok());
  EXPECT_EQ(c.kernel_tile_bytes, 16384u);
  EXPECT_EQ(c.Set("CIUIC_NO_SUCH", "1").code(), StatusCode::kNotFound);
  EXPECT_EQ(c.Set("CIUIC_KERNEL_TILE", "100").code(), StatusCode::kInvalidArgument);
  for (const KnobDescription& k : DescribeKnobs(c)) {
    if (k.name == "CIUIC_KERNEL_TILE") {
      EXPECT_EQ(k.source, "set");
    }
  }
}

TEST(ConfigTest, RadixAndAggregationKnobs) {
  Config c;
  EXPECT_EQ(c.knomial_radix, 0);
  EXPECT_EQ(c.pat_aggregation, 0);
  ASSERT_TRUE(c.Set("CIUIC_KNOMIAL_RADIX", "3").ok());
  ASSERT_TRUE(c.Set("CIUIC_PAT_AGGREGATION", "8").ok());
  EXPECT_EQ(c.knomial_radix, 3);
  EXPECT_EQ(c.pat_aggregation, 8);
  for (const char* bad : {"1", "65", "-2", "x"}) {
    Status s = c.Set("CIUIC_KNOMIAL_RADIX", bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("CIUIC_KNOMIAL_RADIX"), std::string::npos) << s.ToString();
  }
  for (const char* bad : {"3", "12", "-4", "33554432"}) {
    Status s = c.Set("CIUIC_PAT_AGGREGATION", bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("CIUIC_PAT_AGGREGATION"), std::string::npos) << s.ToString();
  }
  EXPECT_EQ(c.knomial_radix, 3);  // a refused value leaves the knob alone
  EXPECT_EQ(c.pat_aggregation, 8);
}

TEST(ConfigTest, ByteSizes) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("64K"), 65536u);
  EXPECT_EQ(*ParseByteSize("1MiB"), 1u << 20);
  EXPECT_EQ(*ParseByteSize("2gb"), 2ull << 30);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("-1").ok());
  EXPECT_FALSE(ParseByteSize("1X").ok());
  EXPECT_FALSE(ParseByteSize("1BB").ok());
  EXPECT_EQ(*ParseByteSize("512B"), 512u);
  EXPECT_FALSE(ParseByteSize("99999999999999999999").ok());
  EXPECT_FALSE(ParseByteSize("17179869184G").ok());
}

TEST(ConfigTest, UnknownEnvKnobsAreReported) {
  setenv("CIUIC_DEBUGG", "INFO", 1);
  setenv("CIUIC_TEST_REQUIRE_VERBS", "1", 1);
  auto unknown = UnknownEnvKnobs();
  unsetenv("CIUIC_DEBUGG");
  unsetenv("CIUIC_TEST_REQUIRE_VERBS");
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), "CIUIC_DEBUGG"), unknown.end());
  EXPECT_EQ(std::find(unknown.begin(), unknown.end(), "CIUIC_TEST_REQUIRE_VERBS"), unknown.end());
}

}  // namespace
}  // namespace ciuic
