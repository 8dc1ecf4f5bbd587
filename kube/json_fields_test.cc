#include "kube/json_fields.h"

#include <gtest/gtest.h>

namespace kubicle::kube {
namespace {

TEST(JsonFieldsTest, ReadsPathsAndDefaultsOnEveryWrongShape) {
  const Json obj = Json::parse(R"({
    "metadata": {"name": "s", "generation": 3, "labels": ["not", "a", "map"]},
    "spec": {"n": 7, "big": 18446744073709551615, "f": 1.5, "s": "7", "b": true},
    "list": [1, 2]
  })");
  EXPECT_EQ(StrAt(obj, {"metadata", "name"}), "s");
  EXPECT_EQ(IntAt(obj, {"metadata", "generation"}), 3);
  EXPECT_EQ(IntAt(obj, {"spec", "n"}), 7);
  EXPECT_TRUE(BoolAt(obj, {"spec", "b"}));
  // Missing, through a non-object, or of another type: the default.
  EXPECT_EQ(StrAt(obj, {"metadata", "labels", "app"}), "");
  EXPECT_EQ(StrAt(obj, {"list", "0"}), "");
  EXPECT_EQ(StrAt(obj, {"spec", "n"}), "");
  EXPECT_EQ(StrAt(obj, {"nope", "deeper"}), "");
  EXPECT_EQ(IntAt(obj, {"spec", "s"}, -1), -1);
  EXPECT_EQ(IntAt(obj, {"spec", "f"}, -1), -1);
  EXPECT_EQ(IntAt(obj, {"spec", "big"}, -1), -1) << "does not fit int64";
  EXPECT_FALSE(BoolAt(obj, {"spec", "s"}));
  EXPECT_TRUE(At(obj, {"spec", "n", "x"}).is_null());
  EXPECT_EQ(At(obj, {}), obj);
  // Scalars and null at the root.
  EXPECT_EQ(StrAt(Json("text"), {"metadata"}), "");
  EXPECT_EQ(IntAt(Json(), {"a"}, 5), 5);
  EXPECT_EQ(StrAt(Json::array(), {"a"}), "");
  EXPECT_EQ(NumAt(obj, {"spec", "f"}), 1.5);
  EXPECT_EQ(NumAt(obj, {"spec", "n"}), 7.0);
  EXPECT_EQ(NumAt(obj, {"spec", "s"}, -1), -1);
}

TEST(JsonFieldsTest, BoundedCutsOnAUtf8Boundary) {
  EXPECT_EQ(Bounded("short", 10), "short");
  EXPECT_EQ(Bounded("abcdef", 3), "abc...");
  // "é" is two bytes: a cut inside it steps back before it.
  EXPECT_EQ(Bounded("ab\xc3\xa9z", 3), "ab...");
}

}  // namespace
}  // namespace kubicle::kube
