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

}  // namespace
}  // namespace kubicle
