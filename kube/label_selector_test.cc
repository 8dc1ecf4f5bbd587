#include "kube/label_selector.h"

#include <gtest/gtest.h>

namespace kubicle::kube {
namespace {

TEST(LabelSelectorTest, EqualityAndSetTerms) {
  auto sel = LabelSelector::Parse("kubicle.dev/run=r1, tier in (a, b),env notin (prod),x,!y");
  ASSERT_TRUE(sel.ok()) << sel.status().ToString();
  std::map<std::string, std::string> labels{{"kubicle.dev/run", "r1"}, {"tier", "b"}, {"x", ""}};
  EXPECT_TRUE(sel->Matches(labels));
  labels["y"] = "1";
  EXPECT_FALSE(sel->Matches(labels));
  labels.erase("y");
  labels["tier"] = "c";
  EXPECT_FALSE(sel->Matches(labels));
  labels["tier"] = "a";
  labels["env"] = "prod";
  EXPECT_FALSE(sel->Matches(labels));
}

TEST(LabelSelectorTest, NotEqualMatchesMissingKey) {
  auto sel = LabelSelector::Parse("a!=1");
  ASSERT_TRUE(sel.ok());
  EXPECT_TRUE(sel->Matches({}));
  EXPECT_FALSE(sel->Matches({{"a", "1"}}));
}

TEST(LabelSelectorTest, EmptySelectsEverythingAndBadInputFails) {
  auto sel = LabelSelector::Parse("");
  ASSERT_TRUE(sel.ok());
  EXPECT_TRUE(sel->MatchesObject(nlohmann::json{{"metadata", {{"labels", {{"a", "b"}}}}}}));
  EXPECT_FALSE(LabelSelector::Parse("a in (x").ok());
  EXPECT_FALSE(LabelSelector::Parse("a,,b").ok());
  EXPECT_FALSE(LabelSelector::Parse("bad key=1").ok());
}

TEST(LabelSelectorTest, FormatIsSorted) {
  EXPECT_EQ(FormatEqualitySelector({{"b", "2"}, {"a", "1"}}), "a=1,b=2");
}

}  // namespace
}  // namespace kubicle::kube
