// Agent: EXEC_START with a handful of built-in programs (docs/testguest.md).
// The test guest has no processes: a program runs to completion inside the
// request, so the START reply, the OUTPUT frames and the EXIT frame leave
// together, exactly in the order the Linux agent sends them. EXEC_STDIN
// frames arrive after the exec ended and are dropped, as the protocol says
// for unknown ids; inline stdin feeds `cat` without arguments.
#include "guest/testguest/agent.h"
#include "guest/testguest/fields.h"
#include "guest/testguest/freestanding.h"
#include "guest/testguest/sha256.h"

namespace kubicle::guest::testguest {

using wire::ErrorCode;
using wire::Tag;

namespace {

constexpr uint8_t kStdout = 1;
constexpr uint8_t kStderr = 2;
bool NameIs(const char* name, uint32_t len, const char* want) {
  const size_t n = CStrLen(want);
  return len == n && Equal(name, want, n);
}

// The program's base name: "/bin/echo" runs echo.
void BaseName(const char** name, uint32_t* len) {
  for (uint32_t i = *len; i > 0; --i) {
    if ((*name)[i - 1] == '/') {
      *name += i;
      *len -= i;
      return;
    }
  }
}

}  // namespace

void Agent::ExecOut::Write(uint8_t stream, const void* data, uint32_t n) {
  uint8_t* buf = stream == kStdout ? out : err;
  uint32_t& len = stream == kStdout ? out_len : err_len;
  const uint32_t cap = stream == kStdout ? limit : kErrCap;
  const uint32_t room = cap > len ? cap - len : 0;
  if (n > room) {
    truncated = true;
    n = room;
  }
  Copy(buf + len, data, n);
  len += n;
}

void Agent::ExecOut::WriteStr(uint8_t stream, const char* s) {
  Write(stream, s, uint32_t(CStrLen(s)));
}

bool Agent::ParseExec(Fields& f, const uint8_t* payload, uint32_t size, ExecArgs* a) {
  const char* shell = nullptr;
  uint32_t shell_len = 0;
  const bool has_shell = f.Str(Tag::kShellCommand, &shell, &shell_len, wire::kMaxPayload);
  f.Bool(Tag::kBackground, &a->background);
  f.Bytes(Tag::kStdin, &a->stdin_data, &a->stdin_len);
  uint64_t limit = 0;
  f.U64(Tag::kOutputLimit, &limit);
  if (limit != 0 && limit < a->output_limit) a->output_limit = uint32_t(limit);
  wire::TlvReader r(payload, size);
  wire::Tlv t;
  while (f.ok() && r.Next(&t)) {
    if (t.tag == uint16_t(Tag::kEnv)) {
      for (uint32_t i = 0; i < t.length; ++i) {
        if (t.value[i] == 0) f.Fail("env entry contains NUL");
      }
      if (a->envc < ExecArgs::kMax) {
        a->env[a->envc] = reinterpret_cast<const char*>(t.value);
        a->env_len[a->envc] = t.length;
      }
      ++a->envc;
      continue;
    }
    if (t.tag != uint16_t(Tag::kArgv)) continue;
    for (uint32_t i = 0; i < t.length; ++i) {
      if (t.value[i] == 0) f.Fail("argv entry contains NUL");
    }
    if (a->argc < ExecArgs::kMax) {
      a->argv[a->argc] = reinterpret_cast<const char*>(t.value);
      a->argv_len[a->argc] = t.length;
    }
    ++a->argc;
  }
  if (f.ok() && a->argc > ExecArgs::kMax) f.Fail("too many argv entries for the test guest");
  if (f.ok() && a->envc > ExecArgs::kMax) f.Fail("too many env entries for the test guest");
  if (f.ok() && has_shell && a->argc != 0) f.Fail("exactly one of argv and shell_command is required");
  if (f.ok() && !has_shell && a->argc == 0) f.Fail("exactly one of argv and shell_command is required");
  if (f.ok() && a->argc != 0 && a->argv_len[0] == 0) f.Fail("argv[0] is empty");
  return f.ok();
}

void Agent::ExecStart(Session* s, uint32_t id, Fields& f, const uint8_t* payload, uint32_t size) {
  ExecArgs a;
  a.output_limit = ExecOut::kOutCap;
  if (!ParseExec(f, payload, size, &a)) {
    return s->SendError(id, ErrorCode::kInvalidArgument, f.error());
  }
  if (a.argc == 0) {
    return s->SendError(id, ErrorCode::kUnimplemented, "the test guest has no shell");
  }
  exec_out_.out = exec_stdout_;
  exec_out_.out_len = exec_out_.err_len = 0;
  exec_out_.limit = a.output_limit;
  exec_out_.truncated = false;
  const int32_t code = RunBuiltin(a, &exec_out_);
  const uint32_t pid = next_pid_++;
  wire::TlvWriter* w = s->BeginReply(Type::kExecStart, a.background ? 0 : wire::kFlagMore, id);
  w->PutU32(Tag::kPid, pid);
  s->EndReply();
  if (a.background) return;  // detached: no output, no exit report
  SendExecOutput(s, id, kStdout, exec_out_.out, exec_out_.out_len);
  SendExecOutput(s, id, kStderr, exec_out_.err, exec_out_.err_len);
  w = s->BeginReply(Type::kExecExit, 0, id);
  w->PutU32(Tag::kExitCode, uint32_t(code));
  if (exec_out_.truncated) w->PutU8(Tag::kTruncated, 1);
  s->EndReply();
}

void Agent::SendExecOutput(Session* s, uint32_t id, uint8_t stream, const uint8_t* data,
                           uint32_t len) {
  // Chunks within kMaxChunk and the peer's limit (which is at least 4 KiB).
  const uint32_t overhead = 2 * wire::kTlvHeaderSize + 1;
  const uint32_t chunk = Min<uint32_t>(wire::kMaxChunk, s->peer_max_payload() - overhead);
  for (uint32_t off = 0; off < len;) {
    const uint32_t n = Min(chunk, len - off);
    wire::TlvWriter* w = s->BeginReply(Type::kExecOutput, wire::kFlagMore, id);
    w->PutU8(Tag::kStream, stream);
    w->Put(Tag::kData, data + off, n);
    s->EndReply();
    off += n;
  }
}

int32_t Agent::RunBuiltin(const ExecArgs& a, ExecOut* o) {
  const char* name = a.argv[0];
  uint32_t name_len = a.argv_len[0];
  BaseName(&name, &name_len);
  if (NameIs(name, name_len, "true")) return 0;
  if (NameIs(name, name_len, "false")) return 1;
  if (NameIs(name, name_len, "echo")) {
    uint32_t first = 1;
    const bool newline = !(a.argc > 1 && NameIs(a.argv[1], a.argv_len[1], "-n"));
    if (!newline) first = 2;
    for (uint32_t i = first; i < a.argc; ++i) {
      if (i > first) o->Write(kStdout, " ", 1);
      o->Write(kStdout, a.argv[i], a.argv_len[i]);
    }
    if (newline) o->Write(kStdout, "\n", 1);
    return 0;
  }
  if (NameIs(name, name_len, "hostname")) {
    o->Write(kStdout, hostname_, hostname_len_);
    o->Write(kStdout, "\n", 1);
    return 0;
  }
  if (NameIs(name, name_len, "printenv")) return PrintEnv(a, o);
  if (NameIs(name, name_len, "console")) return Console(a, o);
  if (NameIs(name, name_len, "cat")) return Cat(a, o);
  if (NameIs(name, name_len, "sha256sum")) return Sha256Sum(a, o);
  o->WriteStr(kStderr, "kubicle-testguest: ");
  o->Write(kStderr, name, name_len);
  o->WriteStr(kStderr, ": not found\n");
  return 127;
}

namespace {

// The start of a coreutils line, "<64 hex digits>  ", for data.
constexpr uint32_t kDigestPrefix = 2 * Sha256::kDigestBytes + 2;
void DigestPrefix(const uint8_t* data, uint32_t len, char out[kDigestPrefix]) {
  Sha256 h;
  h.Update(data, len);
  uint8_t d[Sha256::kDigestBytes];
  h.Final(d);
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < sizeof(d); ++i) {
    out[2 * i] = kHex[d[i] >> 4];
    out[2 * i + 1] = kHex[d[i] & 15];
  }
  out[kDigestPrefix - 2] = out[kDigestPrefix - 1] = ' ';
}

}  // namespace

int32_t Agent::Sha256Sum(const ExecArgs& a, ExecOut* o) {
  if (a.argc == 1) {  // no files: inline stdin, named "-"
    char prefix[kDigestPrefix];
    DigestPrefix(a.stdin_data, a.stdin_len, prefix);
    o->Write(kStdout, prefix, kDigestPrefix);
    o->Write(kStdout, "-\n", 2);
    return 0;
  }
  int32_t code = 0;
  for (uint32_t i = 1; i < a.argc; ++i) {
    const char* path = a.argv[i];
    const uint32_t len = a.argv_len[i];
    const int slot = RamFs::ValidPath(path, len) ? fs_.Find(path, len) : -1;
    if (slot < 0) {
      o->WriteStr(kStderr, "sha256sum: ");
      o->Write(kStderr, path, Min<uint32_t>(len, RamFs::kMaxPath));
      o->WriteStr(kStderr, ": No such file or directory\n");
      code = 1;
      continue;
    }
    const RamFs::File& file = fs_.file(slot);
    char prefix[kDigestPrefix];
    DigestPrefix(file.data, file.size, prefix);
    o->Write(kStdout, prefix, kDigestPrefix);
    o->Write(kStdout, path, len);
    o->Write(kStdout, "\n", 1);
  }
  return code;
}

int32_t Agent::Cat(const ExecArgs& a, ExecOut* o) {
  if (a.argc == 1) {  // no files: inline stdin
    o->Write(kStdout, a.stdin_data, a.stdin_len);
    return 0;
  }
  int32_t code = 0;
  for (uint32_t i = 1; i < a.argc; ++i) {
    const char* path = a.argv[i];
    const uint32_t len = a.argv_len[i];
    const int slot = RamFs::ValidPath(path, len) ? fs_.Find(path, len) : -1;
    if (slot < 0) {
      o->WriteStr(kStderr, "cat: ");
      o->Write(kStderr, path, Min<uint32_t>(len, RamFs::kMaxPath));
      const bool dir = RamFs::ValidPath(path, len) && fs_.IsDir(path, len);
      o->WriteStr(kStderr, dir ? ": Is a directory\n" : ": No such file or directory\n");
      code = 1;
      continue;
    }
    const RamFs::File& file = fs_.file(slot);
    o->Write(kStdout, file.data, file.size);
  }
  return code;
}

// printenv NAME...: each named variable's value and a newline; 1 if any is
// unset. Without names, every "KEY=VALUE" entry.
int32_t Agent::PrintEnv(const ExecArgs& a, ExecOut* o) {
  if (a.argc == 1) {
    for (uint32_t i = 0; i < a.envc; ++i) {
      o->Write(kStdout, a.env[i], a.env_len[i]);
      o->Write(kStdout, "\n", 1);
    }
    return 0;
  }
  int32_t code = 0;
  for (uint32_t n = 1; n < a.argc; ++n) {
    bool found = false;
    // The last entry of a name wins, as in a process environment built in order.
    for (uint32_t i = a.envc; i > 0 && !found; --i) {
      const char* kv = a.env[i - 1];
      const uint32_t len = a.env_len[i - 1];
      if (len > a.argv_len[n] && kv[a.argv_len[n]] == '=' && Equal(kv, a.argv[n], a.argv_len[n])) {
        o->Write(kStdout, kv + a.argv_len[n] + 1, len - a.argv_len[n] - 1);
        o->Write(kStdout, "\n", 1);
        found = true;
      }
    }
    if (!found) code = 1;
  }
  return code;
}

// console BYTES: writes BYTES bytes to the serial console, as 64-byte lines
// "kubicle-testguest: console flood ....\n" (the last one cut short), so the
// host's console log limits can be tested with a guest that floods.
int32_t Agent::Console(const ExecArgs& a, ExecOut* o) {
  uint64_t n = 0;
  bool ok = a.argc == 2 && a.argv_len[1] > 0 && a.argv_len[1] <= 12;
  for (uint32_t i = 0; ok && i < a.argv_len[1]; ++i) {
    const char c = a.argv[1][i];
    ok = c >= '0' && c <= '9';
    n = n * 10 + uint64_t(c - '0');
  }
  if (!ok) {
    o->WriteStr(kStderr, "console: usage: console BYTES (decimal, at most 12 digits)\n");
    return 2;
  }
  char line[64];
  const char kHead[] = "kubicle-testguest: console flood ";
  Copy(line, kHead, sizeof(kHead) - 1);
  for (size_t i = sizeof(kHead) - 1; i < sizeof(line) - 1; ++i) line[i] = '.';
  line[sizeof(line) - 1] = '\n';
  while (n > 0 && platform_ != nullptr) {
    const uint32_t k = uint32_t(Min<uint64_t>(n, sizeof(line)));
    platform_->ConsoleWrite(line, k);
    n -= k;
  }
  return 0;
}

}  // namespace kubicle::guest::testguest
