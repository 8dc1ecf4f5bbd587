#include "e2e/nested/test_watchdog.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace kubicle::e2e::nested {
namespace {

using Clock = std::chrono::steady_clock;

struct State {
  std::mutex mu;
  std::string test;  // running test, empty between tests
  Clock::time_point test_start;
  std::string step;
  std::set<std::string> vm_dirs;
  Clock::time_point origin = Clock::now();
};

State& S() {
  static State* s = new State();  // never destroyed: the thread outlives main
  return *s;
}

std::string Tail(const std::string& path, size_t max_bytes) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  return all.size() > max_bytes ? "..." + all.substr(all.size() - max_bytes) : all;
}

// State, wait channel and kernel stack of every process whose command line
// mentions kubicle (the VMMs and this test binary).
void DumpKubicleProcesses() {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return;
  while (dirent* e = ::readdir(proc)) {
    const std::string pid = e->d_name;
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = Tail("/proc/" + pid + "/cmdline", 300);
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    if (cmdline.find("kubicle") == std::string::npos) continue;
    std::fprintf(stderr, "--- pid %s: %s\n    wchan %s\n%s", pid.c_str(), cmdline.c_str(),
                 Tail("/proc/" + pid + "/wchan", 100).c_str(),
                 Tail("/proc/" + pid + "/stack", 2000).c_str());
    std::fprintf(stderr, "    status: %s\n",
                 Tail("/proc/" + pid + "/stat", 200).c_str());
  }
  ::closedir(proc);
}

void Report(State& s, double seconds) {
  std::fprintf(stderr, "\n[watchdog] %s ran %.0f s; last step: %s\n", s.test.c_str(), seconds,
               s.step.c_str());
  for (const std::string& dir : s.vm_dirs) {
    std::fprintf(stderr, "[watchdog] %s/serial.log (tail):\n%s\n", dir.c_str(),
                 Tail(dir + "/serial.log", 3000).c_str());
    std::fprintf(stderr, "[watchdog] %s/vmm.log (tail):\n%s\n", dir.c_str(),
                 Tail(dir + "/vmm.log", 3000).c_str());
  }
  DumpKubicleProcesses();
  std::fflush(stderr);
}

// Times every phase: a suite's set-up, each test, the gap to the next test
// or the suite's tear-down.
class Listener : public ::testing::EmptyTestEventListener {
  static void Phase(std::string name) {
    std::lock_guard l(S().mu);
    S().test = std::move(name);
    S().test_start = Clock::now();
    S().step = "(started)";
  }
  void OnTestSuiteStart(const ::testing::TestSuite& suite) override {
    Phase(std::string(suite.name()) + " (suite set-up)");
  }
  void OnTestStart(const ::testing::TestInfo& info) override {
    Phase(std::string(info.test_suite_name()) + "." + info.name());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    Phase(std::string(info.test_suite_name()) + " (after " + info.name() + ")");
  }
  void OnTestSuiteEnd(const ::testing::TestSuite&) override {
    std::lock_guard l(S().mu);
    S().test.clear();
  }
};

}  // namespace

void Progress(const std::string& what) {
  State& s = S();
  std::lock_guard l(s.mu);
  s.step = what;
  const double t = std::chrono::duration<double>(Clock::now() - s.origin).count();
  std::fprintf(stderr, "[progress +%.1fs] %s\n", t, what.c_str());
}

void WatchVmDir(const std::string& dir) {
  std::lock_guard l(S().mu);
  S().vm_dirs.insert(dir);
}

void StartWatchdog(std::chrono::seconds limit) {
  static std::once_flag once;
  std::call_once(once, [limit] {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    ::testing::UnitTest::GetInstance()->listeners().Append(new Listener());
    std::thread([limit] {
      for (;;) {
        std::this_thread::sleep_for(std::chrono::seconds(1));
        State& s = S();
        std::lock_guard l(s.mu);
        if (s.test.empty()) continue;
        const double ran = std::chrono::duration<double>(Clock::now() - s.test_start).count();
        if (ran < double(limit.count())) continue;
        Report(s, ran);
        std::fprintf(stderr, "[watchdog] %s exceeded %lld s: exiting with status 1\n",
                     s.test.c_str(), static_cast<long long>(limit.count()));
        std::_Exit(1);
      }
    }).detach();
  });
}

}  // namespace kubicle::e2e::nested
