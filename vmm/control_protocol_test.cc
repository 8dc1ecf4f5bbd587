#include "vmm/control_protocol.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

namespace kubicle::vmm::control {
namespace {

VmStatus SampleStatus() {
  VmStatus s;
  s.id = "sbx-1";
  s.state = VmState::kPaused;
  s.vcpus = 2;
  s.mem_bytes = 64ull << 20;
  s.guest_cid = 41;
  s.pid = 4242;
  s.uptime_ms = 17;
  s.guest_memory = {{0, 0x7f0000000000ull, 64ull << 20}};
  return s;
}

std::vector<Request> SampleRequests() {
  RestoreRequest full{"/snap", "/v.sock", "/serial.log", "id-1", "/layers", 41};
  RestoreRequest minimal;
  minimal.snapshot = "/snap";
  ForkRequest fork;
  fork.children = {{"/c1.ctl", 7, "/c1.vsock", "/c1.serial", "/c1"}, {"/c2.ctl", 0xfffffffe, "", "", ""}};
  RestoreRequest networked = minimal;
  networked.net = NetAttachment{"tap0", "02:00:00:00:00:2a", "/run/kubicle/netns/s-1"};
  ForkRequest networked_fork;
  networked_fork.children = {{"/c1.ctl", 7, "", "", "", NetAttachment{"tap0", "02:aa:00:00:00:01", "/n1"}},
                             {"/c2.ctl", 8, "", "", "", NetAttachment{"tap1", "0a:aa:00:00:00:02", ""}}};
  RestoreRequest with_workspace = minimal;
  with_workspace.workspace = "/state/workspaces/ws-1/disk.img";
  return {StatusRequest{}, PauseRequest{}, ResumeRequest{}, SnapshotRequest{"/s", false},
          SnapshotRequest{"/s", true}, full, minimal, networked, fork, networked_fork,
          ShutdownRequest{}, with_workspace};
}

TEST(ControlProtocolTest, RequestsRoundTrip) {
  for (const Request& r : SampleRequests()) {
    Result<std::string> line = EncodeRequest(r);
    ASSERT_TRUE(line.ok()) << line.status().ToString();
    Result<Request> back = DecodeRequest(*line);
    ASSERT_TRUE(back.ok()) << *line << ": " << back.status().ToString();
    EXPECT_TRUE(*back == r) << *line;
  }
}

// The wire form is an interface with running VMMs and other clients: these
// strings change only with the version rule of control_protocol.h.
TEST(ControlProtocolTest, GoldenRequestEncodings) {
  EXPECT_EQ(*EncodeRequest(StatusRequest{}), R"({"cmd":"status","v":1})");
  EXPECT_EQ(*EncodeRequest(SnapshotRequest{"/s", false}),
            R"({"cmd":"snapshot","dir":"/s","resume":false,"v":1})");
  EXPECT_EQ(*EncodeRequest(RestoreRequest{"/snap", "/v.sock", std::nullopt, "id-1", "/l", 41}),
            R"({"cid":41,"cmd":"restore","id":"id-1","layer_dir":"/l","snapshot":"/snap","v":1,)"
            R"("vsock_uds":"/v.sock"})");
  ForkRequest fork;
  fork.children = {{"/c.ctl", 9, "/c.vsock", "", ""}};
  EXPECT_EQ(*EncodeRequest(fork),
            R"({"children":[{"cid":9,"control":"/c.ctl","vsock_uds":"/c.vsock"}],"cmd":"fork",)"
            R"("count":1,"v":1})");
}

TEST(ControlProtocolTest, GoldenNetAttachment) {
  RestoreRequest r;
  r.snapshot = "/snap";
  r.net = NetAttachment{"tap0", "02:00:00:00:00:2a", "/ns"};
  EXPECT_EQ(*EncodeRequest(r),
            R"({"cmd":"restore","net":{"mac":"02:00:00:00:00:2a","netns":"/ns","tap":"tap0"},)"
            R"("snapshot":"/snap","v":1})");
}

TEST(ControlProtocolTest, GoldenAndRefusedWorkspaces) {
  RestoreRequest r;
  r.snapshot = "/snap";
  r.workspace = "/w/disk.img";
  EXPECT_EQ(*EncodeRequest(r), R"({"cmd":"restore","snapshot":"/snap","v":1,"workspace":"/w/disk.img"})");
  for (const char* bad : {R"("")", R"("relative/disk.img")", "7", "null", "[]"}) {
    auto d = DecodeRequest(std::string(R"({"cmd":"restore","snapshot":"/s","workspace":)") + bad + "}");
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  r.workspace = "relative";
  EXPECT_FALSE(EncodeRequest(r).ok()) << "a client cannot send what the server refuses";
  r.workspace = "/" + std::string(5000, 'a');
  EXPECT_FALSE(EncodeRequest(r).ok());
}

// A network attachment is checked like the kernel checks an interface name
// and a NIC its MAC, before the VMM touches anything.
TEST(ControlProtocolTest, RefusesBadNetAttachments) {
  auto restore = [](const std::string& net) {
    return DecodeRequest(R"({"cmd":"restore","snapshot":"/s","net":)" + net + "}");
  };
  EXPECT_TRUE(restore(R"({"tap":"tap0","mac":"02:00:00:00:00:01"})").ok());
  for (const char* bad : {
           R"("tap0")",                                                   // not an object
           R"({"mac":"02:00:00:00:00:01"})",                              // no tap
           R"({"tap":"tap0"})",                                           // no mac
           R"({"tap":"","mac":"02:00:00:00:00:01"})",                     // empty tap
           R"({"tap":"a-name-of-16-byte","mac":"02:00:00:00:00:01"})",    // too long
           R"({"tap":"../x","mac":"02:00:00:00:00:01"})",                 // a path
           R"({"tap":"ta p","mac":"02:00:00:00:00:01"})",                 // whitespace
           R"({"tap":"tap:0","mac":"02:00:00:00:00:01"})",                // alias syntax
           R"({"tap":"..","mac":"02:00:00:00:00:01"})",
           R"({"tap":"tap0","mac":"03:00:00:00:00:01"})",                 // multicast
           R"({"tap":"tap0","mac":"00:00:00:00:00:00"})",                 // zero
           R"({"tap":"tap0","mac":"02-00-00-00-00-01"})",                 // wrong form
           R"({"tap":"tap0","mac":"02:00:00:00:00:01","netns":"ns/1"})",  // relative
           R"({"tap":"tap0","mac":"02:00:00:00:00:01","netns":7})",
       }) {
    auto r = restore(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(r.status().message().find("net"), std::string::npos) << r.status().ToString();
    }
  }
  auto fork = DecodeRequest(
      R"({"cmd":"fork","children":[{"control":"/c","cid":5,"net":{"tap":"t","mac":"01:00:00:00:00:01"}}]})");
  EXPECT_FALSE(fork.ok());
  // Encoding refuses the same, so a client cannot send it.
  RestoreRequest r;
  r.snapshot = "/s";
  r.net = NetAttachment{"tap0", "ff:ff:ff:ff:ff:ff", ""};
  EXPECT_FALSE(EncodeRequest(r).ok());
}

TEST(ControlProtocolTest, ReadsRequestsOfClientsBeforeTheVersionField) {
  // What kubicle-node and the tests sent before this protocol had a version.
  auto r = DecodeRequest(R"({"cmd":"restore","snapshot":"/s","vsock_uds":"/v","cid":3,"serial":"/x",)"
                         R"("id":"a","layer_dir":"/d"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(std::get<RestoreRequest>(*r).cid, 3u);
  auto f = DecodeRequest(R"({"cmd":"fork","count":1,"children":[{"control":"/c","cid":5}]})");
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(std::get<ForkRequest>(*f).children.at(0).cid, 5u);
  // Unknown fields are ignored (additive changes keep the version).
  EXPECT_TRUE(DecodeRequest(R"({"cmd":"status","future":{"x":1}})").ok());
}

TEST(ControlProtocolTest, RepliesRoundTrip) {
  VmStatus s = SampleStatus();
  auto status = DecodeReply<StatusRequest>(EncodeReply(s));
  ASSERT_TRUE(status.ok()) << status.status().ToString();
  EXPECT_EQ(*status, s);
  SnapshotReply snap{s, "/snap"};
  EXPECT_EQ(*DecodeReply<SnapshotRequest>(EncodeReply(snap)), snap);
  RestoreReply restore{s, 1234};
  EXPECT_EQ(*DecodeReply<RestoreRequest>(EncodeReply(restore)), restore);
  ForkReply fork{s, {100, 101}, 900};
  EXPECT_EQ(*DecodeReply<ForkRequest>(EncodeReply(fork)), fork);
  EXPECT_TRUE(DecodeReply<ShutdownRequest>(EncodeReply(ShutdownReply{})).ok());
}

TEST(ControlProtocolTest, GoldenReplyEncodings) {
  VmStatus s = SampleStatus();
  s.guest_memory = {{0, 4096, 8192}};
  EXPECT_EQ(EncodeReply(s),
            R"({"guest_cid":41,"guest_memory":[{"guest":0,"host":4096,"size":8192}],"id":"sbx-1",)"
            R"("mem_bytes":67108864,"ok":true,"pid":4242,"state":"paused","uptime_ms":17,"v":1,"vcpus":2})");
  EXPECT_EQ(EncodeReply(ShutdownReply{}), R"({"ok":true,"v":1})");
  EXPECT_EQ(EncodeError("FailedPrecondition: vm is paused"),
            R"({"error":"FailedPrecondition: vm is paused","ok":false,"v":1})");
}

TEST(ControlProtocolTest, ReadsRepliesOfServersBeforeTheVersionField) {
  auto r = DecodeReply<StatusRequest>(
      R"({"ok":true,"id":"vm","state":"pooled","vcpus":1,"mem_bytes":1,"guest_cid":3,"pid":9,)"
      R"("uptime_ms":0,"guest_memory":[]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->state, VmState::kPooled);
}

TEST(ControlProtocolTest, ErrorRepliesBecomeStatuses) {
  auto r = DecodeReply<SnapshotRequest>(EncodeError("Unimplemented: raw disk"));
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "kubicle-vmm snapshot: Unimplemented: raw disk");
  EXPECT_EQ(DecodeReply<StatusRequest>(R"({"ok":false})").status().message(),
            "kubicle-vmm status: no error text");
}

TEST(ControlProtocolTest, OneCidRule) {
  EXPECT_FALSE(ValidCid(0));
  EXPECT_FALSE(ValidCid(2));
  EXPECT_TRUE(ValidCid(3));
  EXPECT_TRUE(ValidCid(0xfffffffe));
  EXPECT_FALSE(ValidCid(0xffffffff));
  EXPECT_FALSE(ValidCid(1ull << 32));
  for (uint64_t bad : {0ull, 2ull, 0xffffffffull, 1ull << 40}) {
    std::string cid = std::to_string(bad);
    EXPECT_EQ(DecodeRequest(R"({"cmd":"restore","snapshot":"/s","cid":)" + cid + "}").status().code(),
              StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(DecodeRequest(R"({"cmd":"fork","children":[{"control":"/c","cid":)" + cid + "}]}").ok())
        << bad;
    ForkRequest f;
    f.children = {{"/c", bad, "", "", ""}};
    EXPECT_FALSE(EncodeRequest(f).ok()) << "the client refuses it too: " << bad;
  }
}

void ExpectRefused(std::string_view line, std::string_view why) {
  Result<Request> r = DecodeRequest(line);
  EXPECT_FALSE(r.ok()) << line;
  if (!r.ok()) {
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  }
}

TEST(ControlProtocolTest, RefusesHostileRequests) {
  ExpectRefused("", "not a JSON object");
  ExpectRefused("not json", "not a JSON object");
  ExpectRefused("[1,2]", "not a JSON object");
  ExpectRefused(R"({"cmd":7})", "no string field 'cmd'");
  ExpectRefused(R"({"cmd":"nope"})", "unknown command 'nope'");
  ExpectRefused(R"({"cmd":"status","v":2})", "version 2");
  ExpectRefused(R"({"cmd":"status","v":-1})", "protocol version");
  ExpectRefused(R"({"cmd":"snapshot"})", "needs \"dir\"");
  ExpectRefused(R"({"cmd":"snapshot","dir":""})", "must not be empty");
  ExpectRefused(R"({"cmd":"snapshot","dir":["x"]})", "must be a string");
  ExpectRefused(R"({"cmd":"snapshot","dir":"/d","resume":"yes"})", "true or false");
  ExpectRefused(R"({"cmd":"restore"})", "needs \"snapshot\"");
  ExpectRefused(R"({"cmd":"restore","snapshot":"/s","cid":"3"})", "non-negative integer");
  ExpectRefused(R"({"cmd":"restore","snapshot":"/s","cid":-5})", "non-negative integer");
  ExpectRefused(R"({"cmd":"restore","snapshot":"/s","cid":3.5})", "non-negative integer");
  ExpectRefused(R"({"cmd":"restore","snapshot":"/s","id":null})", "must be a string");
  ExpectRefused(R"({"cmd":"fork"})", "needs \"children\"");
  ExpectRefused(R"({"cmd":"fork","children":[]})", "non-empty");
  ExpectRefused(R"({"cmd":"fork","children":{}})", "must be an array");
  ExpectRefused(R"({"cmd":"fork","children":[1]})", "each child is an object");
  ExpectRefused(R"({"cmd":"fork","children":[{"cid":9}]})", "needs \"control\"");
  ExpectRefused(R"({"cmd":"fork","children":[{"control":"/c"}]})", "needs \"cid\"");
  ExpectRefused(R"({"cmd":"fork","count":2,"children":[{"control":"/c","cid":9}]})", "count");
  std::string many = R"({"cmd":"fork","children":[)";
  for (int i = 0; i < 65; ++i) many += std::string(i ? "," : "") + R"({"control":"/c","cid":9})";
  ExpectRefused(many + "]}", "more than 64");
  ExpectRefused(R"({"cmd":"snapshot","dir":")" + std::string(kMaxStringBytes + 1, 'a') + R"("})",
                "longer than");
  ExpectRefused(R"({"cmd":"status","x":")" + std::string(kMaxRequestBytes, 'a') + R"("})",
                "above the limit");
  ExpectRefused(R"({"cmd":"status","x":)" + std::string(100, '[') + std::string(100, ']') + "}",
                "nested deeper");
  // Brackets inside strings are not nesting.
  EXPECT_TRUE(DecodeRequest(R"({"cmd":"status","x":"[[[[[[[[[[[[[[[[[[[["})").ok());
}

TEST(ControlProtocolTest, RefusesHostileReplies) {
  EXPECT_EQ(DecodeReply<StatusRequest>("garbage").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeReply<StatusRequest>(R"({"ok":"yes"})").status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeReply<StatusRequest>(R"({"ok":true})").status().code(), StatusCode::kDataLoss);
  auto s = nlohmann::json::parse(EncodeReply(SampleStatus()));
  s["state"] = "hibernating";
  EXPECT_EQ(DecodeReply<StatusRequest>(s.dump()).status().code(), StatusCode::kDataLoss);
  s = nlohmann::json::parse(EncodeReply(ForkReply{SampleStatus(), {5}, 1}));
  s["pids"] = {5, -1};
  EXPECT_EQ(DecodeReply<ForkRequest>(s.dump()).status().code(), StatusCode::kDataLoss);
  s["pids"] = "5";
  EXPECT_EQ(DecodeReply<ForkRequest>(s.dump()).status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(DecodeReply<StatusRequest>(std::string(kMaxReplyBytes + 1, ' ')).status().code(),
            StatusCode::kDataLoss);
}

TEST(ControlProtocolTest, EncodeRefusesWhatTheServerWouldRefuse) {
  EXPECT_FALSE(EncodeRequest(SnapshotRequest{"", true}).ok());
  EXPECT_FALSE(EncodeRequest(ForkRequest{}).ok());
  EXPECT_FALSE(EncodeRequest(SnapshotRequest{"/bad\xff", true}).ok());
  // A reply never fails to encode: a string that is not UTF-8 is replaced.
  VmStatus s = SampleStatus();
  s.id = "bad\xff";
  EXPECT_TRUE(DecodeReply<StatusRequest>(EncodeReply(s)).ok());
}

// Bounded fuzzing: mutations of valid requests and replies, and random
// bytes, must decode or fail cleanly (no throw, no crash), and whatever
// decodes must encode and decode to itself.
TEST(ControlProtocolTest, FuzzedLinesNeverThrow) {
  std::mt19937 rng(1234);
  std::vector<std::string> seeds;
  for (const Request& r : SampleRequests()) seeds.push_back(*EncodeRequest(r));
  seeds.push_back(EncodeReply(ForkReply{SampleStatus(), {1, 2}, 3}));
  std::string alphabet = "{}[]\":,0123456789-.eE truefalsnul\\\xff";
  alphabet.push_back('\0');
  for (int i = 0; i < 20000; ++i) {
    std::string line = seeds[rng() % seeds.size()];
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !line.empty(); ++e) {
      size_t at = rng() % line.size();
      switch (rng() % 3) {
        case 0: line[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: line.erase(at, 1 + rng() % 3); break;
        default: line.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
      }
    }
    if (i % 10 == 0) {
      line.assign(rng() % 64, '\0');
      for (char& c : line) c = static_cast<char>(rng());
    }
    Result<Request> r = DecodeRequest(line);
    if (r.ok()) {
      Result<std::string> again = EncodeRequest(*r);
      ASSERT_TRUE(again.ok()) << line;
      ASSERT_TRUE(*DecodeRequest(*again) == *r) << line;
    }
    (void)DecodeReply<ForkRequest>(line);
    (void)DecodeReply<StatusRequest>(line);
  }
}

}  // namespace
}  // namespace kubicle::vmm::control
