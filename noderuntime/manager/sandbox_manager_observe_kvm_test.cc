// kvm tests of the manager's console and stats reads (sandbox_manager_observe.cc)
// with real kubicle-vmm processes and the test guest, whose `console N`
// command floods the serial console.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include "noderuntime/manager/sandbox_manager_test_util.h"

namespace kubicle::noderuntime {
namespace {

using namespace std::chrono_literals;
using testing::ManagerTest;
namespace fs = std::filesystem;

using SandboxObserveKvmTest = ManagerTest;

Result<guest::client::ExecResult> RunIn(SandboxManager& m, const std::string& id,
                                      std::vector<std::string> argv) {
  ExecOptions eo;
  eo.request.argv = std::move(argv);
  eo.timeout = 180s;  // each console byte is an emulated port write: slow on a loaded nested host
  return m.Exec(id, eo);
}

// The node passes its console limits to every VMM (pool VMs, so restores
// and forks too): a guest writing 2.5x the cap leaves a bounded log, and
// ReadConsole serves the current file from an offset.
TEST_F(SandboxObserveKvmTest, ConsoleIsBoundedByTheNodesLimits) {
  config_.console.max_file_bytes = 16 << 10;
  config_.console.rotated_files = 1;
  config_.console.rate_bytes_per_sec = 0;  // the cap, not the rate, is under test
  OpenAndBake();
  auto a = Create("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  auto empty = m_->ReadConsole("a", 0, 1 << 20);
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->running);

  auto r = RunIn(*m_, "a", {"console", "40960"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->exit_code, 0);
  // The serial device writes as the guest does: wait until the log stops growing.
  uint64_t size = 0;
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(50ms);
    auto c = m_->ReadConsole("a", 0, 1 << 20);
    ASSERT_TRUE(c.ok());
    if (c->size == size && size > 0) break;
    size = c->size;
  }
  auto all = m_->ReadConsole("a", 0, 1 << 20);
  ASSERT_TRUE(all.ok());
  EXPECT_GT(all->size, 0u);
  EXPECT_LE(all->size, (16u << 10) + 256) << "the cap is max_file_bytes plus a marker line";
  EXPECT_EQ(all->data.size(), all->size);
  EXPECT_TRUE(fs::exists(state_dir_ + "/sandboxes/a/serial.log.1")) << "the log never rotated";
  const std::string text(all->data.begin(), all->data.end());
  EXPECT_NE(text.find("kubicle-testguest: console flood"), std::string::npos) << text.substr(0, 200);

  auto tail = m_->ReadConsole("a", all->size - 10, 1 << 20);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->offset, all->size - 10);
  EXPECT_EQ(std::string(tail->data.begin(), tail->data.end()), text.substr(text.size() - 10));
  // Past the end (as after a rotation): from the start.
  EXPECT_EQ(m_->ReadConsole("a", all->size + 5000, 100)->offset, 0u);
  EXPECT_EQ(m_->ReadConsole("nope", 0, 10).status().code(), StatusCode::kNotFound);
}

TEST_F(SandboxObserveKvmTest, StatsOfTheVm) {
  OpenAndBake();
  auto a = Create("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  // Some guest work, so the VM has used CPU time.
  ASSERT_TRUE(RunIn(*m_, "a", {"console", "4096"}).ok());
  auto s = m_->GetSandboxStats("a");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->source, real_cgroups() ? "cgroup" : "proc");
  EXPECT_GT(s->cpu_usage_ns, 0u);
  EXPECT_GT(s->memory_bytes, 0u);
  EXPECT_EQ(s->mem_mib, 64u);
  EXPECT_EQ(s->vcpus, 1u);
  if (real_cgroups()) {
    EXPECT_EQ(s->memory_limit_bytes, (64ull + 64) << 20);
    EXPECT_GE(s->pids, 1u);
  }
  ASSERT_TRUE(m_->DeleteSandbox("a").ok());
  EXPECT_EQ(m_->GetSandboxStats("a").status().code(), StatusCode::kNotFound);
}

// stat, list and remove through the test guest's agent.
TEST_F(SandboxObserveKvmTest, FileStatListRemove) {
  OpenAndBake();
  auto a = Create("a");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const std::string data = "twelve bytes";
  const auto* p = reinterpret_cast<const uint8_t*>(data.data());
  ASSERT_TRUE(m_->WriteFile("a", "/d/f.txt", {p, data.size()}, 0600).ok());
  auto st = m_->StatFile("a", "/d/f.txt");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->type, guest::protocol::FileType::kFile);
  EXPECT_EQ(st->size, data.size());
  auto ls = m_->ListFiles("a", "/d");
  ASSERT_TRUE(ls.ok()) << ls.status().ToString();
  bool found = false;
  for (const auto& e : *ls) found = found || e.name == "f.txt";
  EXPECT_TRUE(found);
  ASSERT_TRUE(m_->RemoveFile("a", "/d/f.txt", false).ok());
  EXPECT_EQ(m_->StatFile("a", "/d/f.txt").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(m_->RemoveFile("nope", "/d", true).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kubicle::noderuntime
