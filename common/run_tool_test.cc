#include "common/run_tool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

namespace kubicle {
namespace {

// Each test's stderr log, in GoogleTest's temporary directory.
class RunToolTest : public ::testing::Test {
 protected:
  bool LogExists() const { return ::access(log_.c_str(), F_OK) == 0; }

  const std::string log_ = ::testing::TempDir() + "run_tool_test." + std::to_string(::getpid()) +
                           "." + ::testing::UnitTest::GetInstance()->current_test_info()->name();
};

TEST_F(RunToolTest, ExitZeroIsOkAndTheLogIsRemoved) {
  Status s = RunTool({"sh", "-c", "echo chatter >&2; exit 0"}, log_);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(LogExists());
}

TEST_F(RunToolTest, AFailureCarriesTheTailOfStderrAndTheLogIsRemoved) {
  Status s = RunTool({"sh", "-c", "echo; echo 'mke2fs: no space' >&2; exit 3"}, log_);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "sh failed: mke2fs: no space");  // stdout dropped, newline trimmed
  EXPECT_FALSE(LogExists());
}

TEST_F(RunToolTest, OnlyTheLast512BytesOfStderrAreKept) {
  Status s =
      RunTool({"sh", "-c", "yes a | head -c 4000 | tr -d '\\n' >&2; printf END >&2; exit 1"}, log_);
  ASSERT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_EQ(s.message(), "sh failed: " + std::string(509, 'a') + "END");
}

TEST_F(RunToolTest, AKilledToolFails) {
  Status s = RunTool({"sh", "-c", "kill -9 $$"}, log_);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_FALSE(LogExists());
}

TEST_F(RunToolTest, AMissingToolFailsToStart) {
  Status s = RunTool({"kubicle-no-such-tool-xyz"}, log_);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("starting kubicle-no-such-tool-xyz"), std::string::npos)
      << s.message();
  EXPECT_FALSE(LogExists());
}

TEST_F(RunToolTest, StdinIsEmpty) {
  // cat on /dev/null ends at once; a tool that read the caller's stdin would hang.
  Status s = RunTool({"sh", "-c", "test -z \"$(cat)\""}, log_);
  EXPECT_TRUE(s.ok()) << s.message();
}

}  // namespace
}  // namespace kubicle
