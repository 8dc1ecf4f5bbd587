#include "vmm/control_client.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "common/unique_fd.h"
#include "vmm/control_server.h"

namespace kubicle::vmm::control {
namespace {

using namespace std::chrono_literals;

std::string TempSocket(const char* name) {
  return ::testing::TempDir() + "/cc-" + std::to_string(::getpid()) + "-" + name + ".sock";
}

// A listening socket nobody serves: connects succeed (the backlog), replies
// never come.
UniqueFd ListenOnly(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path.c_str());
  ::unlink(path.c_str());
  EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(::listen(fd.get(), 4), 0);
  return fd;
}

TEST(ControlClientTest, TransportErrors) {
  EXPECT_EQ(ControlClient(TempSocket("none")).GetStatus(100ms).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(ControlClient(std::string(200, 'x')).GetStatus(100ms).status().code(),
            StatusCode::kInvalidArgument);
  // The client refuses a request the server would refuse, before connecting.
  EXPECT_EQ(ControlClient(TempSocket("none")).Fork(ForkRequest{}, 100ms).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ControlClientTest, GivesUpAtTheDeadline) {
  std::string path = TempSocket("silent");
  UniqueFd listener = ListenOnly(path);
  auto start = std::chrono::steady_clock::now();
  auto r = ControlClient(path).GetStatus(150ms);
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  // Not before the deadline; and it came back at all, which a client that
  // ignored its deadline would not (the silent server never closes): 60 s is
  // no scheduling delay, so a loaded host cannot fail this.
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 60s);
  ::unlink(path.c_str());
}

TEST(ControlClientTest, RefusesAnOversizedReply) {
  std::string path = TempSocket("big");
  UniqueFd listener = ListenOnly(path);
  std::thread server([&] {
    UniqueFd c(::accept(listener.get(), nullptr, nullptr));
    std::string junk(64 * 1024, 'x');
    for (size_t sent = 0; sent <= kMaxReplyBytes + junk.size();) {
      ssize_t n = ::send(c.get(), junk.data(), junk.size(), MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
  });
  auto r = ControlClient(path).GetStatus(5s);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss) << r.status().ToString();
  server.join();
  ::unlink(path.c_str());
}

TEST(ControlClientTest, TypedCallsThroughTheServer) {
  auto loop = EventLoop::Create();
  ASSERT_TRUE(loop.ok());
  std::string path = TempSocket("served");
  auto server = ControlServer::Listen(path, loop->get(), [](const Request& r) -> Result<Reply> {
    if (const auto* s = std::get_if<SnapshotRequest>(&r)) {
      if (s->resume) return Status::FailedPrecondition("vm is not started");
      VmStatus st;
      st.id = "a";
      st.state = VmState::kPaused;
      return Reply{SnapshotReply{st, s->dir}};
    }
    if (const auto* f = std::get_if<ForkRequest>(&r)) {
      ForkReply reply;
      for (size_t i = 0; i < f->children.size(); ++i) reply.pids.push_back(100 + static_cast<int64_t>(i));
      return Reply{reply};
    }
    return Reply{VmStatus{}};
  });
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::thread t([&] { (void)(*loop)->Run(); });
  ControlClient client(path);
  auto snap = client.Snapshot({"/snap", false}, 5s);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  EXPECT_EQ(snap->dir, "/snap");
  EXPECT_EQ(snap->status.state, VmState::kPaused);
  auto refused = client.Snapshot({"/snap", true}, 5s);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(refused.status().message(), "kubicle-vmm snapshot: FailedPrecondition: vm is not started");
  ForkRequest fork;
  fork.children = {{"/a.ctl", 5, "", "", ""}, {"/b.ctl", 6, "", "", ""}};
  auto forked = client.Fork(fork, 5s);
  ASSERT_TRUE(forked.ok()) << forked.status().ToString();
  EXPECT_EQ(forked->pids, (std::vector<int64_t>{100, 101}));
  // The wire level reaches the server's own validation.
  auto raw = client.RoundTrip(R"({"cmd":"fork","children":[{"control":"/c","cid":2}]})", 5s);
  ASSERT_TRUE(raw.ok());
  EXPECT_NE(raw->find("\"ok\":false"), std::string::npos) << *raw;
  (*loop)->Stop();
  t.join();
}

}  // namespace
}  // namespace kubicle::vmm::control
