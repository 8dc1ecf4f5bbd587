#include "common/log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace kubicle::log {
namespace {

TEST(LogTest, TextLineHasKeyValueFields) {
  EXPECT_EQ(FormatText("vm started", {{"vm", "a1"}, {"vcpus", 2}}), "vm started vm=a1 vcpus=2");
}

TEST(LogTest, TextQuotesValuesWithSpaces) {
  EXPECT_EQ(FormatText("e", {{"msg", "two words"}, {"empty", ""}}),
            "e msg=\"two words\" empty=\"\"");
}

TEST(LogTest, JsonLineParses) {
  auto j = nlohmann::json::parse(FormatJson(Level::kWarn, "vm crashed", {{"vm", "x"}, {"code", 3}}));
  EXPECT_EQ(j["level"], "warn");
  EXPECT_EQ(j["event"], "vm crashed");
  EXPECT_EQ(j["vm"], "x");
  EXPECT_EQ(j["code"], "3");
}

}  // namespace
}  // namespace kubicle::log
