#include "common/flag_args.h"

#include <gtest/gtest.h>

namespace kubicle {
namespace {

using Args = std::vector<std::string>;

TEST(FlagArgsTest, SplitsInlineValuesOnly) {
  EXPECT_EQ(SplitFlagValues(Args{"--runs=3", "--only", "fork", "--label=a=b", "-l=x", "pos=1"}),
            (Args{"--runs", "3", "--only", "fork", "--label", "a=b", "-l=x", "pos=1"}));
  EXPECT_EQ(SplitFlagValues(Args{"--empty="}), (Args{"--empty", ""}));
  EXPECT_EQ(SplitFlagValues(Args{"--unix=/p", "--", "--x=1"}), (Args{"--unix", "/p", "--", "--x=1"}))
      << "nothing after the terminator";
  EXPECT_TRUE(SplitFlagValues(Args{}).empty());
  char prog[] = "prog", a1[] = "--n=1";
  char* argv[] = {prog, a1, nullptr};
  EXPECT_EQ(SplitFlagValues(2, argv), (Args{"--n", "1"}));
  EXPECT_TRUE(SplitFlagValues(0, argv).empty());
}

TEST(FlagArgsTest, KeepsTheValueOfAValueTakingFlagWhole) {
  auto is_boolean = [](const std::string& f) { return f == "--no-rng"; };
  EXPECT_EQ(SplitFlagValues(Args{"--cmdline", "--init=/sbin/x", "--mem=1G", "--no-rng", "--id=a"},
                            is_boolean),
            (Args{"--cmdline", "--init=/sbin/x", "--mem", "1G", "--no-rng", "--id", "a"}));
  EXPECT_EQ(SplitFlagValues(Args{"--cmdline=a=b c", "--disk", "/x,ro"}, is_boolean),
            (Args{"--cmdline", "a=b c", "--disk", "/x,ro"}));
  EXPECT_EQ(SplitFlagValues(Args{"--kernel"}, is_boolean), (Args{"--kernel"}))
      << "a missing value is the parser's to report";
  EXPECT_EQ(SplitFlagValues(Args{"--", "--x=1"}, is_boolean), (Args{"--", "--x=1"}));
}

}  // namespace
}  // namespace kubicle
