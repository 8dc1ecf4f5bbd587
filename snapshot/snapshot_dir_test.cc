#include "snapshot/snapshot_dir.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "snapshot/testing/sample_state.h"
#include "snapshot/testing/temp_dir.h"

namespace kubicle::snapshot {
namespace {

using testing::TempDir;
constexpr uint64_t kMiB = 1 << 20;

MachineState StateFor(uint64_t mem_bytes) {
  MachineState s = testing::SampleState();
  s.config.mem_bytes = mem_bytes;
  s.config.memory = {{0, mem_bytes}};
  return s;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename());
  return out;
}

void Overwrite(const std::string& path, const std::string& text) {
  ::chmod(path.c_str(), 0644);
  std::ofstream(path, std::ios::trunc) << text;
}

void ExpectError(const Result<SnapshotDir>& r, StatusCode code, const std::string& words) {
  ASSERT_FALSE(r.ok()) << "opened a bad snapshot";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().ToString();
}

class SnapshotDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = MmapRegion::Anonymous(16 * kMiB);
    ASSERT_TRUE(m.ok());
    mem_ = std::move(*m);
    for (uint64_t gpa : {uint64_t{0}, 5 * kMiB + 4096, 16 * kMiB - 8})
      Put(gpa, 0x0123456789abcdefull ^ gpa);
    meta_.template_name = "python";
    meta_.kernel = "/var/lib/kubicle/kernels/vmlinux";
  }
  std::string Write(const std::string& name) {
    Result<SnapshotMeta> m = SnapshotDir::Write(dir_ / name, StateFor(16 * kMiB),
                                                testing::SampleDisks(), Memory(), meta_);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return dir_ / name;
  }

  TempDir dir_;
  // Guest memory: one range at 0.
  void Put(uint64_t gpa, uint64_t v) { std::memcpy(mem_.data() + gpa, &v, sizeof(v)); }
  std::vector<MemoryRegion> Memory() const { return {{0, mem_.size(), mem_.data()}}; }

  MmapRegion mem_;
  SnapshotMeta meta_;
};

TEST_F(SnapshotDirTest, WriteThenOpenGivesStateMemoryAndMeta) {
  std::string path = Write("snap");
  EXPECT_EQ(Entries(dir_.path()), std::vector<std::string>{"snap"});  // no temporaries left
  Result<SnapshotDir> snap = SnapshotDir::Open(path, {.verify_memory_digest = true});
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  EXPECT_TRUE(snap->state() == StateFor(16 * kMiB));
  EXPECT_EQ(snap->disks(), testing::SampleDisks());
  EXPECT_EQ(snap->meta().template_name, "python");
  EXPECT_EQ(snap->meta().mem_bytes, 16 * kMiB);
  EXPECT_EQ(snap->meta().memory_data_bytes, 3 * 4096u);
  EXPECT_EQ(snap->meta().memory.sha256.size(), 64u);
  auto mem = snap->MapMemory();
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  ASSERT_EQ(mem->size(), 1u);
  uint64_t v = 0;
  std::memcpy(&v, (*mem)[0].data() + 5 * kMiB + 4096, sizeof(v));
  EXPECT_EQ(v, 0x0123456789abcdefull ^ (5 * kMiB + 4096));
  for (const char* f : {kStateFileName, kMemoryFileName, kDiskFileName, kMetaFileName}) {
    struct stat st{};
    ASSERT_EQ(::stat((path + "/" + f).c_str(), &st), 0) << f;
    EXPECT_EQ(st.st_mode & 0777, 0444u) << f << " is writable";
  }
}

TEST_F(SnapshotDirTest, WriteRefusesAnExistingTargetAndMismatchedMemory) {
  std::string path = Write("snap");
  auto again =
      SnapshotDir::Write(path, StateFor(16 * kMiB), testing::SampleDisks(), Memory(), meta_);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists);
  auto wrong = SnapshotDir::Write(dir_ / "other", StateFor(32 * kMiB), testing::SampleDisks(),
                                  Memory(), meta_);
  EXPECT_EQ(wrong.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Entries(dir_.path()), std::vector<std::string>{"snap"});
}

TEST_F(SnapshotDirTest, FailedWriteLeavesNothingBehind) {
  // Files above 64 KiB fail with EFBIG mid-write (state and disk already written).
  struct sigaction ignore{}, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ignore, &old);
  rlimit saved{};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  rlimit small = saved;
  small.rlim_cur = 64 << 10;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto r = SnapshotDir::Write(dir_ / "snap", StateFor(16 * kMiB), testing::SampleDisks(),
                              Memory(), meta_);
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::sigaction(SIGXFSZ, &old, nullptr);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(Entries(dir_.path()).empty()) << Entries(dir_.path())[0];
}

TEST_F(SnapshotDirTest, OpenRefusesMissingFiles) {
  ExpectError(SnapshotDir::Open(dir_ / "nothing"), StatusCode::kNotFound, "does not exist");
  std::string path = Write("snap");
  ASSERT_EQ(::unlink((path + "/memory").c_str()), 0);
  ExpectError(SnapshotDir::Open(path), StatusCode::kNotFound, "memory is missing");
}

TEST_F(SnapshotDirTest, OpenRefusesTruncatedMemory) {
  std::string path = Write("snap");
  ASSERT_EQ(::truncate((path + "/memory").c_str(), 8 * kMiB), 0);
  ExpectError(SnapshotDir::Open(path), StatusCode::kDataLoss, "shorter than the guest");
}

TEST_F(SnapshotDirTest, OpenRefusesCorruptedOrTruncatedState) {
  std::string path = Write("snap");
  std::string state = path + "/state";
  ::chmod(state.c_str(), 0644);
  {
    std::fstream f(state, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  ExpectError(SnapshotDir::Open(path), StatusCode::kDataLoss, "checksum mismatch");
  ASSERT_EQ(::truncate(state.c_str(), 100), 0);
  ExpectError(SnapshotDir::Open(path), StatusCode::kDataLoss, "truncated");
}

TEST_F(SnapshotDirTest, OpenRefusesBadMetaAndDiskIndex) {
  std::string path = Write("snap");
  std::ifstream in(path + "/meta.json");
  std::string meta((std::istreambuf_iterator<char>(in)), {});
  Overwrite(path + "/meta.json", "{not json");
  ExpectError(SnapshotDir::Open(path), StatusCode::kDataLoss, "meta.json");
  std::string v2 = meta;
  v2.replace(v2.find("\"version\": \"1.0\""), 16, "\"version\": \"2.0\"");
  Overwrite(path + "/meta.json", v2);
  ExpectError(SnapshotDir::Open(path), StatusCode::kFailedPrecondition, "version 2.0");
  Overwrite(path + "/meta.json", meta);
  ASSERT_TRUE(SnapshotDir::Open(path).ok());
  Overwrite(path + "/disk", "{\"version\":1,\"disks\":[]}\n");
  ExpectError(SnapshotDir::Open(path), StatusCode::kDataLoss, "disk");
}

TEST(DiskIndexTest, RoundTripsAndRefusesBadIndexes) {
  auto disks = testing::SampleDisks();
  disks.push_back({3, "scratch", true, {"/img/ro.ext4", 4096, {}}});
  Result<std::vector<DiskIndexEntry>> back = ParseDiskIndex(DiskIndexToJson(disks));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, disks);
  // The written form is what tools read: stable.
  EXPECT_NE(DiskIndexToJson(disks).find("\"id\": \"a0a1a2a3a4a5a6a7a8a9aaabacadaeaf\""),
            std::string::npos);
  for (const char* bad :
       {"", "[]", "{\"version\":2,\"disks\":[]}", "{\"version\":1}", "{\"version\":1,\"disks\":7}",
        "{\"version\":1,\"disks\":[{\"slot\":0}]}",
        "{\"version\":1,\"disks\":[{\"slot\":0,\"serial\":\"\",\"read_only\":true,\"base\":\"/b\","
        "\"size\":1,\"layers\":[{\"path\":\"/l\",\"id\":\"xyz\"}]}]}"}) {
    EXPECT_FALSE(ParseDiskIndex(bad).ok()) << bad;
  }
  disks.back().slot = 0;
  EXPECT_FALSE(ParseDiskIndex(DiskIndexToJson(disks)).ok()) << "two disks in one slot";
}

// A number that is a float, negative or beyond its field is refused, not cast
// (a cast of 1e104 to uint64_t is undefined; found by fuzz_meta).
TEST(MetaTest, RefusesNumbersThatAreNotIntegersOfTheirField) {
  SnapshotMeta m;
  m.template_name = "t";
  m.mem_bytes = 16 * kMiB;
  m.vcpus = 2;
  const std::string good = MetaToJson(m);
  ASSERT_TRUE(ParseMeta(good).ok());
  auto with = [&](const std::string& field, const std::string& value) {
    std::string text = good;
    const size_t at = text.find("\"" + field + "\": ");
    EXPECT_NE(at, std::string::npos) << field;
    const size_t begin = text.find(": ", at) + 2, end = text.find_first_of(",\n", begin);
    return text.replace(begin, end - begin, value);
  };
  for (const char* value : {"1.5e104", "-1", "16.5", "\"16\"", "true"})
    EXPECT_FALSE(ParseMeta(with("mem_bytes", value)).ok()) << value;
  EXPECT_FALSE(ParseMeta(with("vcpus", "4294967296")).ok()) << "beyond uint32";
  EXPECT_TRUE(ParseMeta(with("vcpus", "4294967295")).ok());
  EXPECT_FALSE(ParseDiskIndex("{\"version\":1.0e300,\"disks\":[]}").ok());
}

TEST_F(SnapshotDirTest, MismatchedMemoryFileIsCaughtByTheDigest) {
  std::string a = Write("a");
  Put(4096, 42);
  std::string b = Write("b");
  ASSERT_EQ(::rename((b + "/memory").c_str(), (a + "/memory").c_str()), 0);
  EXPECT_TRUE(SnapshotDir::Open(a).ok());  // sizes agree: the fast path cannot tell
  ExpectError(SnapshotDir::Open(a, {.verify_memory_digest = true}), StatusCode::kDataLoss,
              "does not match its digest");
}

TEST_F(SnapshotDirTest, RemoveStaleTempsCleansCrashedWrites) {
  Write("snap");
  std::filesystem::create_directory(dir_ / ".snap2.tmp-abc123");
  std::ofstream(dir_ / ".snap2.tmp-abc123/state") << "x";
  ASSERT_TRUE(SnapshotDir::RemoveStaleTemps(dir_.path()).ok());
  EXPECT_EQ(Entries(dir_.path()), std::vector<std::string>{"snap"});
}

// A writer killed at arbitrary points never leaves a snapshot under the
// final name that does not open.
TEST_F(SnapshotDirTest, KilledWriterNeverLeavesAPartialSnapshot) {
  for (uint64_t gpa = 0; gpa < 16 * kMiB; gpa += 65536) Put(gpa, gpa + 1);
  // Spread the kills over 1.5x the time a whole write takes here (fsync
  // times vary a lot on a busy host, hence the cap).
  auto t0 = std::chrono::steady_clock::now();
  Write("timed");
  auto write_us = std::min<int64_t>(200'000, std::chrono::duration_cast<std::chrono::microseconds>(
                                                 std::chrono::steady_clock::now() - t0).count());
  std::filesystem::remove_all(dir_ / "timed");
  int complete = 0;
  constexpr int kRounds = 12;
  for (int i = 0; i < kRounds; ++i) {
    std::string target = dir_ / ("snap" + std::to_string(i));
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto r = SnapshotDir::Write(target, StateFor(16 * kMiB), testing::SampleDisks(), Memory(),
                                  meta_);
      ::_exit(r.ok() ? 0 : 1);
    }
    ::usleep(static_cast<useconds_t>(write_us * i / 8));
    if (i < kRounds - 1) ::kill(pid, SIGKILL);  // the last one always completes
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (::access(target.c_str(), F_OK) == 0) {
      ++complete;
      Result<SnapshotDir> snap = SnapshotDir::Open(target, {.verify_memory_digest = true});
      EXPECT_TRUE(snap.ok()) << "kill " << i << ": " << snap.status().ToString();
    }
  }
  ASSERT_TRUE(SnapshotDir::RemoveStaleTemps(dir_.path()).ok());
  for (const std::string& e : Entries(dir_.path())) EXPECT_EQ(e.rfind("snap", 0), 0u) << e;
  EXPECT_GE(complete, 1);
  RecordProperty("complete_snapshots", complete);
}

}  // namespace
}  // namespace kubicle::snapshot
