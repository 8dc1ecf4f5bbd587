#include "vmm/control_server.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cstring>
#include <nlohmann/json.hpp>

namespace kubicle::vmm {
namespace {

using nlohmann::json;

class ControlServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loop = EventLoop::Create();
    ASSERT_TRUE(loop.ok());
    loop_ = std::move(loop).value();
    path_ = ::testing::TempDir() + "/ctl-" + std::to_string(::getpid()) + ".sock";
    auto server = ControlServer::Listen(path_, loop_.get(),
                                        [this](const control::Request& r) -> Result<control::Reply> {
                                          ++handled_;
                                          if (std::holds_alternative<control::PauseRequest>(r))
                                            return Status::FailedPrecondition("vm is paused");
                                          control::VmStatus s;
                                          s.id = "t";
                                          s.state = control::VmState::kRunning;
                                          return control::Reply{s};
                                        });
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }

  // Sends raw bytes and returns the first response line, pumping the loop.
  std::string Exchange(const std::string& raw) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path_.c_str());
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(::write(fd, raw.data(), raw.size()), static_cast<ssize_t>(raw.size()));
    std::string out;
    for (int i = 0; i < 50 && out.find('\n') == std::string::npos; ++i) {
      EXPECT_TRUE(loop_->RunOnce(20).ok());
      char buf[256];
      ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) out.append(buf, n);
      if (n == 0) break;
    }
    ::close(fd);
    return out;
  }

  int handled_ = 0;
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<ControlServer> server_;
  std::string path_;
};

TEST_F(ControlServerTest, AnswersRegisteredCommand) {
  json r = json::parse(Exchange("{\"cmd\":\"status\"}\n"));
  EXPECT_EQ(r["ok"], true);
  EXPECT_EQ(r["state"], "running");
}

TEST_F(ControlServerTest, ErrorsForBadRequests) {
  EXPECT_EQ(json::parse(Exchange("not json\n"))["ok"], false);
  EXPECT_EQ(json::parse(Exchange("[1,2]\n"))["error"], "request is not a JSON object");
  EXPECT_EQ(json::parse(Exchange("{\"cmd\":\"nope\"}\n"))["error"], "unknown command 'nope'");
  // Requests that do not decode never reach the handler.
  EXPECT_EQ(json::parse(Exchange("{\"cmd\":\"snapshot\",\"dir\":7}\n"))["ok"], false);
  EXPECT_EQ(json::parse(Exchange("{\"cmd\":\"status\",\"v\":99}\n"))["ok"], false);
  EXPECT_EQ(handled_, 0);
  json r = json::parse(Exchange("{\"cmd\":\"pause\"}\n"));
  EXPECT_EQ(r["ok"], false);
  EXPECT_EQ(r["error"], "FailedPrecondition: vm is paused");
  EXPECT_EQ(handled_, 1);
}

TEST_F(ControlServerTest, OverlongLineClosesConnection) {
  std::string big(ControlServer::kMaxLineBytes + 10, 'x');
  EXPECT_EQ(Exchange(big), "");
  // The server keeps serving others.
  EXPECT_EQ(json::parse(Exchange("{\"cmd\":\"status\"}\n"))["ok"], true);
}

}  // namespace
}  // namespace kubicle::vmm
