#include "noderuntime/ext4/ext4_client.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "common/unique_fd.h"

extern char** environ;

namespace kubicle::noderuntime::ext4 {

using json = nlohmann::json;
using guest::protocol::ByteSpan;
using guest::protocol::DirEntry;
using guest::protocol::FileType;
using guest::protocol::StatReply;
using Clock = std::chrono::steady_clock;

namespace {

Status Bad(const std::string& why) {
  return Status::DataLoss("kubicle-ext4 answered badly: " + why);
}

int MsLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

// Waits for `events` on fd until the deadline.
Status WaitFd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const int ms = MsLeft(deadline);
    if (ms == 0) return Status::DeadlineExceeded("kubicle-ext4 ran past its deadline");
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, ms);
    if (r > 0) return Status::Ok();
    if (r < 0 && errno != EINTR) return Status::FromErrno("poll");
  }
}

Status SendAll(int fd, const uint8_t* p, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    RETURN_IF_ERROR(WaitFd(fd, POLLOUT, deadline));
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w < 0) return Status::Unavailable("kubicle-ext4 stopped reading");
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status::Ok();
}

// Exactly n bytes; Unavailable at EOF.
Status RecvAll(int fd, uint8_t* p, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    RETURN_IF_ERROR(WaitFd(fd, POLLIN, deadline));
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return Status::Unavailable("kubicle-ext4 closed its socket");
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Status::Ok();
}

Status ErrorFrom(const json& j) {
  const json& e = j["error"];
  if (!e.is_object() || !e.contains("code") || !e["code"].is_number_integer() ||
      !e.contains("message") || !e["message"].is_string())
    return Bad("a malformed error");
  const int code = e["code"].get<int>();
  if (code <= 0 || code > static_cast<int>(StatusCode::kInternal)) return Bad("an unknown error code");
  std::string m = e["message"].get<std::string>();
  if (m.size() > 1024) m.resize(1024);
  return Status(static_cast<StatusCode>(code), m);
}

// One helper process: killed and reaped when this goes out of scope.
struct Child {
  pid_t pid = -1;
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int st;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
    }
  }
};

template <typename T>
bool Num(const json& j, const char* k, T* out) {
  auto it = j.find(k);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  const uint64_t v = it->get<uint64_t>();
  if (v > std::numeric_limits<T>::max()) return false;
  *out = static_cast<T>(v);
  return true;
}

bool TypeFrom(const json& j, FileType* t) {
  uint8_t v = 0;
  if (!Num(j, "type", &v) || v < 1 || v > 4) return false;
  *t = static_cast<FileType>(v);
  return true;
}

}  // namespace

Status Ext4Client::Call(const std::string& image, const Request& req, ByteSpan data,
                        const JsonFn& on_json, const DataFn& on_data) {
  const auto deadline = Clock::now() + options_.deadline;
  ASSIGN_OR_RETURN(std::string header, EncodeRequest(req));
  const bool writable = req.op == Op::kWrite || req.op == Op::kRemove;
  UniqueFd img(::open(image.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW));
  if (!img) return Status::FromErrno("opening workspace image " + image);
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return Status::FromErrno("socketpair");
  UniqueFd ours(sv[0]), theirs(sv[1]);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, theirs.get(), 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, img.get(), 3);
  posix_spawn_file_actions_addclosefrom_np(&fa, 4);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSID);
  const std::string mem = std::to_string(options_.mem_mib), cpu = std::to_string(options_.cpu_seconds);
  std::vector<char*> argv = {const_cast<char*>(options_.helper.c_str()), const_cast<char*>("--mem-mib"),
                             const_cast<char*>(mem.c_str()), const_cast<char*>("--cpu-seconds"),
                             const_cast<char*>(cpu.c_str()), nullptr};
  Child child;
  const int rc = ::posix_spawn(&child.pid, options_.helper.c_str(), &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    child.pid = -1;
    return Status::FromErrno("starting " + options_.helper, rc);
  }
  theirs.reset();
  img.reset();

  // The request; a helper that refuses it early stops reading, which is
  // not an error yet: its answer says why.
  Status sent = SendAll(ours.get(), reinterpret_cast<const uint8_t*>(header.data()), header.size(), deadline);
  if (sent.ok() && !data.empty()) sent = SendAll(ours.get(), data.data(), data.size(), deadline);
  if (sent.code() == StatusCode::kDeadlineExceeded) return sent;

  std::vector<uint8_t> buf;
  for (;;) {
    uint8_t h[5];
    Status st = RecvAll(ours.get(), h, sizeof(h), deadline);
    if (st.code() == StatusCode::kDeadlineExceeded) return st;
    if (!st.ok()) return Bad("it stopped before its answer ended (it crashed or hit a limit)");
    const uint32_t n = h[1] | (h[2] << 8) | (h[3] << 16) | (uint32_t{h[4]} << 24);
    if (h[0] == 'D') {
      if (n > kMaxDataFrame) return Bad("a data frame over 64 KiB");
      if (!on_data) return Bad("data where none was asked for");
    } else if (h[0] == 'J') {
      if (n > kMaxJsonFrame) return Bad("a JSON frame over 1 MiB");
    } else {
      return Bad("an unknown frame type");
    }
    buf.resize(n);
    st = RecvAll(ours.get(), buf.data(), n, deadline);
    if (st.code() == StatusCode::kDeadlineExceeded) return st;
    if (!st.ok()) return Bad("a truncated frame");
    if (h[0] == 'D') {
      RETURN_IF_ERROR(on_data(buf.data(), n));
      continue;
    }
    const std::string text(buf.begin(), buf.end());
    json j = json::parse(text, nullptr, false);
    if (!j.is_object()) return Bad("a frame that is not a JSON object");
    if (j.contains("error")) return ErrorFrom(j);
    bool final_frame = j.contains("ok");
    if (final_frame && !(j["ok"].is_boolean() && j["ok"].get<bool>())) return Bad("a bad ok field");
    RETURN_IF_ERROR(on_json(text, &final_frame));
    if (final_frame) break;
  }
  if (!sent.ok()) return Bad("it stopped reading its request but answered ok");
  // Reap it now: a clean exit is part of a good answer.
  int wst = 0;
  pid_t r;
  while ((r = ::waitpid(child.pid, &wst, 0)) < 0 && errno == EINTR) {
  }
  child.pid = -1;
  if (r > 0 && !(WIFEXITED(wst) && WEXITSTATUS(wst) == 0)) return Bad("it answered but did not exit cleanly");
  return Status::Ok();
}

Result<StatReply> Ext4Client::Stat(const std::string& image, const std::string& path) {
  StatReply out;
  bool got = false;
  RETURN_IF_ERROR(Call(image, {.op = Op::kStat, .path = path}, {},
                       [&](const std::string& text, bool*) {
                         json j = json::parse(text, nullptr, false);
                         auto s = j.find("stat");
                         if (s == j.end() || !s->is_object()) return Status::Ok();
                         if (!TypeFrom(*s, &out.type) || !Num(*s, "size", &out.size) ||
                             !Num(*s, "mode", &out.mode) || !Num(*s, "mtimeNs", &out.mtime_ns) ||
                             !Num(*s, "uid", &out.uid) || !Num(*s, "gid", &out.gid) || out.mode > 07777)
                           return Bad("a malformed stat");
                         got = true;
                         return Status::Ok();
                       },
                       nullptr));
  if (!got) return Bad("no stat");
  return out;
}

Status Ext4Client::Read(const std::string& image, const std::string& path,
                        const guest::client::FileChunkFn& on_chunk) {
  std::optional<uint64_t> size;
  uint64_t offset = 0;
  bool first = true;
  Status st = Call(
      image, {.op = Op::kRead, .path = path}, {},
      [&](const std::string& text, bool* final_frame) {
        json j = json::parse(text, nullptr, false);
        if (*final_frame) {
          if (!size || offset != *size) return Bad("a file that ended short of its size");
          if (first) {  // an empty file: one empty chunk
            guest::client::FileChunk c;
            c.file_size = 0;
            first = false;
            return on_chunk(c);
          }
          return Status::Ok();
        }
        uint64_t s = 0;
        if (size || !Num(j, "size", &s)) return Bad("a misplaced size frame");
        size = s;
        return Status::Ok();
      },
      [&](const uint8_t* p, size_t n) {
        if (!size || offset + n > *size) return Bad("more data than the file's size");
        guest::client::FileChunk c;
        c.offset = offset;
        c.data = ByteSpan(p, n);
        if (first) c.file_size = *size;
        first = false;
        offset += n;
        return on_chunk(c);
      });
  return st;
}

Status Ext4Client::Write(const std::string& image, const std::string& path, ByteSpan data, uint32_t mode) {
  if (data.size() > kMaxWriteBytes) return Status::ResourceExhausted("a workspace write is at most 64 MiB");
  return Call(image, {.op = Op::kWrite, .path = path, .mode = mode, .size = data.size()}, data,
              [](const std::string&, bool*) { return Status::Ok(); }, nullptr);
}

Result<std::vector<DirEntry>> Ext4Client::List(const std::string& image, const std::string& path,
                                               size_t max_entries) {
  std::vector<DirEntry> out;
  RETURN_IF_ERROR(Call(image, {.op = Op::kList, .path = path}, {},
                       [&](const std::string& text, bool* final_frame) {
                         if (*final_frame) return Status::Ok();
                         json j = json::parse(text, nullptr, false);
                         auto es = j.find("entries");
                         if (es == j.end() || !es->is_array()) return Bad("a frame without entries");
                         for (const json& e : *es) {
                           if (out.size() >= max_entries)
                             return Status::ResourceExhausted("the directory has more than " +
                                                              std::to_string(max_entries) + " entries");
                           DirEntry d;
                           if (!e.is_object() || !e.contains("name") || !e["name"].is_string() ||
                               !TypeFrom(e, &d.type) || !Num(e, "size", &d.size) ||
                               !Num(e, "mode", &d.mode) || !Num(e, "mtimeNs", &d.mtime_ns))
                             return Bad("a malformed entry");
                           d.name = e["name"].get<std::string>();
                           if (d.name.empty() || d.name.size() > 255 || d.name.find('/') != std::string::npos)
                             return Bad("a bad entry name");
                           out.push_back(std::move(d));
                         }
                         return Status::Ok();
                       },
                       nullptr));
  return out;
}

Status Ext4Client::Remove(const std::string& image, const std::string& path, bool recursive) {
  return Call(image, {.op = Op::kRemove, .path = path, .recursive = recursive}, {},
              [](const std::string&, bool*) { return Status::Ok(); }, nullptr);
}

}  // namespace kubicle::noderuntime::ext4
