#include "guest/protocol/messages.h"

#include <gtest/gtest.h>

#include "guest/protocol/tlv.h"

namespace kubicle::guest::protocol {
namespace {

template <typename M>
M RoundTrip(const M& m) {
  auto r = M::Decode(m.Encode());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : M{};
}

template <typename M>
Status DecodeStatus(const Bytes& payload) {
  return M::Decode(payload).status();
}

TEST(Messages, HelloRoundTripAndNegotiation) {
  HelloRequest h;
  h.name = "kubicle-node";
  h.software_version = "0.1";
  h.capabilities = {"exec", "files"};
  h.max_payload = 8192;
  auto d = RoundTrip(h);
  EXPECT_EQ(d.name, "kubicle-node");
  EXPECT_EQ(d.capabilities, h.capabilities);
  EXPECT_EQ(d.max_payload, 8192u);
  EXPECT_EQ(d.min_version, kMinVersion);

  HelloReply r;
  r.version = 1;
  r.name = "kubicle-testguest";
  r.capabilities = {"testguest"};
  r.max_payload = 66 * 1024;
  auto dr = RoundTrip(r);
  EXPECT_TRUE(dr.HasCapability("testguest"));
  EXPECT_FALSE(dr.HasCapability("exec"));
  EXPECT_EQ(dr.max_payload, 66u * 1024);

  EXPECT_EQ(NegotiateVersion(1, 3, 2, 5), 3);
  EXPECT_EQ(NegotiateVersion(1, 1, 2, 5), 0);
}

TEST(Messages, HelloRejectsBadRanges) {
  HelloRequest h;
  h.min_version = 3;
  h.max_version = 2;
  EXPECT_FALSE(HelloRequest::Decode(h.Encode()).ok());
  h.min_version = 1;
  h.max_payload = 100;  // below kMinPayloadLimit
  EXPECT_FALSE(HelloRequest::Decode(h.Encode()).ok());
  EXPECT_FALSE(HelloRequest::Decode(TlvBuilder().U16(Tag::kMaxVersion, 1).Take()).ok());
}

TEST(Messages, PingPongEchoError) {
  EXPECT_EQ(RoundTrip(PingRequest{42}).nonce, 42u);
  EXPECT_EQ(RoundTrip(PongReply{43}).nonce, 43u);
  EXPECT_EQ(RoundTrip(EchoMessage{{1, 2, 3}}).data, (Bytes{1, 2, 3}));
  EXPECT_TRUE(RoundTrip(EchoMessage{}).data.empty());

  auto e = RoundTrip(ErrorReply::FromStatus(Status::NotFound("no such file")));
  EXPECT_EQ(e.code, ErrorCode::kNotFound);
  Status s = e.ToStatus();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no such file");
  ErrorReply unknown;
  unknown.code = ErrorCode(999);
  EXPECT_EQ(RoundTrip(unknown).ToStatus().code(), StatusCode::kInternal);
  EXPECT_FALSE(ErrorReply::Decode(TlvBuilder().U32(Tag::kErrorCode, 0).Take()).ok());
}

TEST(Messages, ExecRoundTrips) {
  ExecStartRequest x;
  x.argv = {"/bin/sh", "-c", "echo hi"};
  x.env = {"A=1", "B="};
  x.cwd = "/tmp";
  x.stdin_data = {'i', 'n'};
  x.timeout_ms = 5000;
  x.output_limit = 1 << 20;
  auto d = RoundTrip(x);
  EXPECT_EQ(d.argv, x.argv);
  EXPECT_EQ(d.env, x.env);
  EXPECT_EQ(d.cwd, "/tmp");
  EXPECT_EQ(d.stdin_data, x.stdin_data);
  EXPECT_EQ(d.timeout_ms, 5000u);
  EXPECT_FALSE(d.background);
  EXPECT_FALSE(d.as_agent);

  ExecStartRequest sh;
  sh.shell_command = "ls | wc -l";
  sh.stdin_streamed = true;
  sh.as_agent = true;
  auto ds = RoundTrip(sh);
  EXPECT_EQ(ds.shell_command, sh.shell_command);
  EXPECT_TRUE(ds.stdin_streamed);
  EXPECT_TRUE(ds.as_agent);

  EXPECT_EQ(RoundTrip(ExecStartReply{77}).pid, 77u);
  EXPECT_EQ(RoundTrip(ExecStdinChunk{{9}}).data, Bytes{9});
  auto out = RoundTrip(ExecOutputChunk{OutputStream::kStderr, {'e'}});
  EXPECT_EQ(out.stream, OutputStream::kStderr);

  ExecExitReply ex;
  ex.exit_code = -1;
  ex.truncated = true;
  auto dx = RoundTrip(ex);
  EXPECT_EQ(dx.exit_code, -1);
  EXPECT_FALSE(dx.signal.has_value());
  EXPECT_TRUE(dx.truncated);
  ExecExitReply sig;
  sig.signal = 9;
  sig.timed_out = true;
  auto ds2 = RoundTrip(sig);
  EXPECT_EQ(ds2.signal, 9u);
  EXPECT_TRUE(ds2.timed_out);

  auto ks = RoundTrip(ExecSignalRequest{5, 15});
  EXPECT_EQ(ks.exec_id, 5u);
  EXPECT_EQ(ks.signal, 15u);
}

TEST(Messages, ExecRejectsInconsistentRequests) {
  ExecStartRequest none;
  EXPECT_FALSE(ExecStartRequest::Decode(none.Encode()).ok());
  ExecStartRequest both;
  both.argv = {"ls"};
  both.shell_command = "ls";
  EXPECT_FALSE(ExecStartRequest::Decode(both.Encode()).ok());
  ExecStartRequest env;
  env.argv = {"ls"};
  env.env = {"NOEQUALS"};
  EXPECT_FALSE(ExecStartRequest::Decode(env.Encode()).ok());
  ExecStartRequest stdin_both;
  stdin_both.argv = {"cat"};
  stdin_both.stdin_data = {1};
  stdin_both.stdin_streamed = true;
  EXPECT_FALSE(ExecStartRequest::Decode(stdin_both.Encode()).ok());
  ExecExitReply neither;
  EXPECT_FALSE(ExecExitReply::Decode(neither.Encode()).ok());
  EXPECT_FALSE(ExecOutputChunk::Decode(
                   TlvBuilder().U8(Tag::kStream, 3).Bytes(Tag::kData, {}).Take())
                   .ok());
  EXPECT_FALSE(ExecSignalRequest::Decode(ExecSignalRequest{1, 0}.Encode()).ok());
}

TEST(Messages, FileRoundTrips) {
  FileWriteChunk first;
  first.path = "/data/x";
  first.mode = 0600;
  first.atomic = true;
  first.data = {1, 2, 3};
  auto d = RoundTrip(first);
  EXPECT_EQ(d.path, "/data/x");
  EXPECT_EQ(d.mode, 0600u);
  EXPECT_TRUE(d.atomic);
  EXPECT_EQ(d.data.size(), 3u);
  FileWriteChunk later;
  later.offset = 3;
  later.data = {4};
  auto dl = RoundTrip(later);
  EXPECT_FALSE(dl.path.has_value());
  EXPECT_EQ(dl.offset, 3u);
  EXPECT_EQ(RoundTrip(FileWriteReply{4}).size, 4u);

  auto rr = RoundTrip(FileReadRequest{"/f", 10, 20});
  EXPECT_EQ(rr.offset, 10u);
  EXPECT_EQ(rr.length, 20u);
  FileReadChunk rc;
  rc.offset = 5;
  rc.data = {7};
  rc.size = 100;
  auto drc = RoundTrip(rc);
  EXPECT_EQ(drc.size, 100u);

  StatReply st;
  st.type = FileType::kDirectory;
  st.size = 4096;
  st.mode = 0755;
  st.mtime_ns = 123;
  st.uid = 1000;
  auto dst = RoundTrip(st);
  EXPECT_EQ(dst.type, FileType::kDirectory);
  EXPECT_EQ(dst.uid, 1000u);
  EXPECT_EQ(RoundTrip(StatRequest{"/etc"}).path, "/etc");

  ListReply lr;
  lr.entries = {{"a", FileType::kFile, 3, 0644, 1}, {"dir", FileType::kDirectory, 0, 0755, 2}};
  EXPECT_EQ(RoundTrip(lr).entries, lr.entries);
  EXPECT_EQ(RoundTrip(ListRequest{"/"}).path, "/");

  auto mk = RoundTrip(MkdirRequest{"/a/b", 0700, true});
  EXPECT_TRUE(mk.parents);
  EXPECT_EQ(mk.mode, 0700u);
  EXPECT_TRUE(RoundTrip(RemoveRequest{"/a", true}).recursive);
  EXPECT_EQ(RoundTrip(ChmodRequest{"/a", 0444}).mode, 0444u);
}

TEST(Messages, FileRejectsBadPathsAndModes) {
  EXPECT_FALSE(StatRequest::Decode(StatRequest{"relative"}.Encode()).ok());
  EXPECT_FALSE(StatRequest::Decode(StatRequest{""}.Encode()).ok());
  EXPECT_FALSE(StatRequest::Decode(StatRequest{std::string("/a\0b", 4)}.Encode()).ok());
  EXPECT_FALSE(StatRequest::Decode(StatRequest{"/" + std::string(kMaxPathLen, 'a')}.Encode()).ok());
  EXPECT_FALSE(ChmodRequest::Decode(ChmodRequest{"/a", 010000}.Encode()).ok());
  EXPECT_FALSE(RemoveRequest::Decode(RemoveRequest{"/", true}.Encode()).ok());
  EXPECT_FALSE(FileWriteChunk::Decode(TlvBuilder().Bytes(Tag::kData, {}).Take()).ok());
  FileWriteChunk overflow;
  overflow.offset = ~uint64_t{0};
  overflow.data = {1};
  EXPECT_FALSE(FileWriteChunk::Decode(overflow.Encode()).ok());
  ListReply bad;
  bad.entries = {{"a/b", FileType::kFile, 0, 0, 0}};
  EXPECT_FALSE(ListReply::Decode(bad.Encode()).ok());
}

TEST(Messages, IdentityPostRestoreAndTestExtras) {
  IdentityReply id;
  id.hostname = "sbx-1";
  id.cid = 3;
  id.generation = 7;
  id.boot_id = Bytes(16, 0xab);
  id.cpus = 2;
  id.memory_bytes = 256 << 20;
  id.wall_clock_ns = 99;
  id.entropy_digest = 0x1234;
  id.name = "kubicle-testguest";
  auto d = RoundTrip(id);
  EXPECT_EQ(d.hostname, "sbx-1");
  EXPECT_EQ(d.cid, 3u);
  EXPECT_EQ(d.boot_id, id.boot_id);
  EXPECT_EQ(d.cpus, 2u);
  EXPECT_EQ(d.wall_clock_ns, 99u);
  EXPECT_EQ(d.entropy_digest, 0x1234u);

  PostRestoreRequest pr;
  pr.entropy_seed = Bytes(32, 1);
  pr.wall_clock_ns = 1700000000000000000ull;
  pr.hostname = "clone-2";
  pr.generation = 2;
  pr.nic_mac = {0x02, 0x6b, 0, 0, 0, 9};
  auto dp = RoundTrip(pr);
  EXPECT_EQ(dp.entropy_seed.size(), 32u);
  EXPECT_EQ(dp.hostname, "clone-2");
  EXPECT_EQ(dp.nic_mac, pr.nic_mac);
  for (Bytes bad : {Bytes{1, 0, 0, 0, 0, 9}, Bytes{2, 0, 0, 0, 9}, Bytes(7, 2)}) {
    PostRestoreRequest m = pr;
    m.nic_mac = bad;
    EXPECT_FALSE(PostRestoreRequest::Decode(m.Encode()).ok());
  }
  EXPECT_EQ(RoundTrip(PostRestoreReply{2}).generation, 2u);
  pr.hostname = "bad host!";
  EXPECT_FALSE(PostRestoreRequest::Decode(pr.Encode()).ok());

  auto mf = RoundTrip(MemFillRequest{5, 4096});
  EXPECT_EQ(mf.size, 4096u);
  EXPECT_FALSE(MemFillRequest::Decode(MemFillRequest{5, 4095}.Encode()).ok());
  EXPECT_EQ(RoundTrip(MemFillReply{8}).size, 8u);
  auto mc = RoundTrip(MemChecksumReply{8, 5, 77});
  EXPECT_EQ(mc.checksum, 77u);
  EXPECT_EQ(RoundTrip(EntropyReadRequest{16}).length, 16u);
  EXPECT_FALSE(EntropyReadRequest::Decode(EntropyReadRequest{0}.Encode()).ok());
  EXPECT_FALSE(EntropyReadRequest::Decode(EntropyReadRequest{kMaxEntropyRead + 1}.Encode()).ok());
  EXPECT_EQ(RoundTrip(EntropyReadReply{{1, 2}}).data.size(), 2u);
}

TEST(Messages, ExpectedMemChecksumMatchesTheWireDefinition) {
  std::vector<uint64_t> words(1000);
  for (size_t i = 0; i < words.size(); ++i) words[i] = MemPatternWord(11, i);
  MemChecksumState st;
  st.Update(words.data(), words.size());
  EXPECT_EQ(ExpectedMemChecksum(11, 8000), st.Final());
  EXPECT_NE(ExpectedMemChecksum(11, 8000), ExpectedMemChecksum(12, 8000));
}

TEST(Messages, HostileTlvInput) {
  // Truncated TLV, overflowing length, wrong width, duplicates, NUL in string.
  Bytes truncated = {0x40, 0x00, 0x05, 0x00};
  EXPECT_EQ(DecodeStatus<StatRequest>(truncated).code(), StatusCode::kInvalidArgument);
  Bytes overflow = {0x40, 0x00, 0xff, 0xff, 0xff, 0xff, '/'};
  EXPECT_FALSE(StatRequest::Decode(overflow).ok());
  EXPECT_FALSE(MemFillRequest::Decode(
                   TlvBuilder().U32(Tag::kSeed, 1).U64(Tag::kSize, 8).Take())
                   .ok());
  Status dup = DecodeStatus<StatRequest>(
      TlvBuilder().Str(Tag::kPath, "/a").Str(Tag::kPath, "/b").Take());
  EXPECT_NE(dup.message().find("duplicate"), std::string::npos) << dup.ToString();
  Status missing = DecodeStatus<StatRequest>({});
  EXPECT_NE(missing.message().find("missing required field path"), std::string::npos);
  EXPECT_FALSE(HelloReply::Decode(TlvBuilder()
                                      .U16(Tag::kVersion, 1)
                                      .U32(Tag::kMaxPayload, 4096)
                                      .Str(Tag::kName, std::string("a\0", 2))
                                      .Take())
                   .ok());
  EXPECT_FALSE(
      RemoveRequest::Decode(TlvBuilder().Str(Tag::kPath, "/a").U8(Tag::kRecursive, 2).Take())
          .ok());
}

TEST(Messages, UnknownTagsAreSkipped) {
  TlvBuilder b;
  b.U64(Tag(0x7fff), 1).Str(Tag::kPath, "/x").Bytes(Tag(0x1234), Bytes(100, 0));
  auto r = StatRequest::Decode(b.Take());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->path, "/x");
  TlvBuilder e;
  e.Bytes(Tag::kData, Bytes{1}).U32(Tag(0x9999), 5);
  ASSERT_TRUE(EchoMessage::Decode(e.Take()).ok());
}

}  // namespace
}  // namespace kubicle::guest::protocol

namespace kubicle::guest::protocol {
namespace {

// Pins the worked example of docs/agent-protocol.md section 9.
TEST(Messages, GoldenPingAndPongBytes) {
  const Bytes ping = *EncodeFrame(MakeFrame(PingRequest{0x2a}, 1));
  const Bytes expect_ping = {0x4b, 0x42, 0x41, 0x50, 0x01, 0x00, 0x02, 0x00, 0x00, 0x00,
                             0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x0e, 0x00, 0x00, 0x00,
                             0x00, 0x00, 0x00, 0x00, 0x21, 0x00, 0x08, 0x00, 0x00, 0x00,
                             0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  EXPECT_EQ(ping, expect_ping);
  Bytes pong = *EncodeFrame(MakeFrame(PongReply{0x2a}, 1, kFlagReply));
  Bytes expect_pong = expect_ping;
  expect_pong[6] = 0x03;  // PONG
  expect_pong[8] = 0x01;  // REPLY
  EXPECT_EQ(pong, expect_pong);
}

}  // namespace
}  // namespace kubicle::guest::protocol
