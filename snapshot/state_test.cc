#include "snapshot/state.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "snapshot/crc32c.h"
#include "snapshot/testing/sample_state.h"

namespace kubicle::snapshot {
namespace {

using testing::SampleState;

std::vector<uint8_t> Encode(const MachineState& s) {
  Result<std::vector<uint8_t>> r = EncodeState(s);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<uint8_t>{};
}

template <typename T>
T Get(const std::vector<uint8_t>& f, size_t off) {
  T v;
  std::memcpy(&v, f.data() + off, sizeof(T));
  return v;
}
template <typename T>
void Put(std::vector<uint8_t>& f, size_t off, T v) {
  std::memcpy(f.data() + off, &v, sizeof(T));
}

// Recomputes the trailer checksum after a test edited the file.
void Reseal(std::vector<uint8_t>& f) {
  size_t body = f.size() - 8;
  Put<uint32_t>(f, body, Crc32c({f.data(), body}));
}

struct Section {
  uint32_t type, flags;
  std::vector<uint8_t> payload;
};

// Splits a valid file into its sections (test-side reader of the layout).
std::vector<Section> Sections(const std::vector<uint8_t>& f) {
  std::vector<Section> out;
  uint32_t n = Get<uint32_t>(f, 20);
  for (uint32_t i = 0; i < n; ++i) {
    size_t at = 64 + i * 24;
    uint64_t off = Get<uint64_t>(f, at + 8), len = Get<uint64_t>(f, at + 16);
    out.push_back({Get<uint32_t>(f, at), Get<uint32_t>(f, at + 4),
                   std::vector<uint8_t>(f.begin() + off, f.begin() + off + len)});
  }
  return out;
}

// Builds a file from sections with the given version (an independent writer,
// so tests can produce what EncodeState never would).
std::vector<uint8_t> Assemble(const std::vector<Section>& secs, uint16_t major, uint16_t minor) {
  std::vector<uint8_t> f(64 + secs.size() * 24, 0);
  std::memcpy(f.data(), "KBLSTATE", 8);
  Put<uint16_t>(f, 8, major);
  Put<uint16_t>(f, 10, minor);
  Put<uint32_t>(f, 12, 64);
  Put<uint32_t>(f, 16, 62);
  Put<uint32_t>(f, 20, static_cast<uint32_t>(secs.size()));
  Put<uint64_t>(f, 32, 64);
  for (size_t i = 0; i < secs.size(); ++i) {
    while (f.size() % 8) f.push_back(0);
    size_t at = 64 + i * 24;
    Put<uint32_t>(f, at, secs[i].type);
    Put<uint32_t>(f, at + 4, secs[i].flags);
    Put<uint64_t>(f, at + 8, f.size());
    Put<uint64_t>(f, at + 16, secs[i].payload.size());
    f.insert(f.end(), secs[i].payload.begin(), secs[i].payload.end());
  }
  while (f.size() % 8) f.push_back(0);
  f.resize(f.size() + 8, 0);
  std::memcpy(f.data() + f.size() - 4, "KEND", 4);
  Put<uint64_t>(f, 24, f.size());
  Reseal(f);
  return f;
}

void ExpectError(const Result<MachineState>& r, StatusCode code, const std::string& words) {
  ASSERT_FALSE(r.ok()) << "decoded a bad file";
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().ToString();
}

TEST(StateTest, RoundTripsTheFullSample) {
  MachineState s = SampleState();
  Result<MachineState> back = DecodeState(Encode(s));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == s);
  EXPECT_FALSE(*back == SampleState(2));  // equality really compares content
}

// One round trip per struct: each part of the state changed on its own must
// survive encode/decode (so every field is actually written and read).
TEST(StateTest, RoundTripsEachStructIndependently) {
  std::vector<std::pair<const char*, std::function<void(MachineState&)>>> edits = {
      {"vcpu regs", [](MachineState& s) { testing::FillPattern(&s.vcpus[1].regs, 99); }},
      {"vcpu sregs", [](MachineState& s) { s.vcpus[0].sregs.cr3 = 0x9000; }},
      {"vcpu fpu", [](MachineState& s) { s.vcpus[0].fpu.fcw = 0x37f; }},
      {"msrs", [](MachineState& s) { s.vcpus[0].msrs.push_back({0x6e0, 0, 42}); }},
      {"no msrs", [](MachineState& s) { s.vcpus[1].msrs.clear(); }},
      {"cpuid", [](MachineState& s) { s.vcpus[0].cpuid[2].eax = 7; }},
      {"lapic", [](MachineState& s) { s.vcpus[1].lapic.regs[0x20] = 1; }},
      {"mp_state", [](MachineState& s) { s.vcpus[1].mp_state.mp_state = KVM_MP_STATE_HALTED; }},
      {"events", [](MachineState& s) { s.vcpus[0].events.nmi.pending = 1; }},
      {"xsave", [](MachineState& s) { s.vcpus[0].xsave.resize(11008, 0x5a); }},
      {"xcrs", [](MachineState& s) { s.vcpus[0].xcrs.nr_xcrs = 1; }},
      {"debugregs", [](MachineState& s) { s.vcpus[0].debugregs.dr7 = 0x400; }},
      {"tsc_khz", [](MachineState& s) { s.vcpus[0].tsc_khz = 0; }},
      {"pic", [](MachineState& s) { s.vm.pic_slave.chip.pic.imr = 0xff; }},
      {"ioapic", [](MachineState& s) { s.vm.ioapic.chip.ioapic.base_address = 0xfec00000; }},
      {"pit", [](MachineState& s) { s.vm.pit.channels[0].count = 1193; }},
      {"clock", [](MachineState& s) { s.vm.clock.clock = 123456789; }},
      {"realtime", [](MachineState& s) { s.vm.captured_realtime_ns = 1; }},
      {"config", [](MachineState& s) { s.config.cmdline = "x"; }},
      {"memory ranges",
       [](MachineState& s) {
         s.config.mem_bytes = 4ull << 30;
         s.config.memory = {{0, 0xd0000000}, {1ull << 32, (4ull << 30) - 0xd0000000}};
       }},
      {"no serial",
       [](MachineState& s) {
         s.serial.reset();
         s.config.devices.erase(s.config.devices.begin());
       }},
      // Device records are the devices' bytes: framed and carried exactly.
      {"serial record", [](MachineState& s) { (*s.serial)[3] ^= 0xff; }},
      {"empty serial record", [](MachineState& s) { s.serial->clear(); }},
      {"virtio record byte", [](MachineState& s) { s.virtio[1].state[40] ^= 0xff; }},
      {"longer virtio record", [](MachineState& s) { s.virtio[0].state.push_back(7); }},
      {"empty virtio record", [](MachineState& s) { s.virtio[2].state.clear(); }},
      {"device kind",
       [](MachineState& s) {
         s.virtio[2].kind = 77;
         s.config.devices[3].kind = 77;
       }},
  };
  for (auto& [name, edit] : edits) {
    MachineState s = SampleState();
    edit(s);
    ASSERT_FALSE(s == SampleState()) << name << ": edit had no effect";
    Result<MachineState> back = DecodeState(Encode(s));
    ASSERT_TRUE(back.ok()) << name << ": " << back.status().ToString();
    EXPECT_TRUE(*back == s) << name << " did not round-trip";
  }
}

// The golden file was written once by snapshot_golden_gen. If this fails the
// format changed: bump the version and add a new golden file instead.
TEST(StateTest, GoldenFileDecodesAndEncodingIsStable) {
  std::ifstream in(KUBICLE_SNAPSHOT_TESTDATA "/state-v1.0.bin", std::ios::binary);
  ASSERT_TRUE(in) << "missing golden file";
  std::vector<uint8_t> golden((std::istreambuf_iterator<char>(in)), {});
  Result<MachineState> decoded = DecodeState(golden);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(*decoded == SampleState());
  EXPECT_TRUE(Encode(SampleState()) == golden) << "EncodeState output changed for format 1.0";
}

TEST(StateTest, RejectsBadMagic) {
  std::vector<uint8_t> f = Encode(SampleState());
  f[0] = 'X';
  ExpectError(DecodeState(f), StatusCode::kInvalidArgument, "bad magic");
}

TEST(StateTest, RejectsUnknownMajorVersion) {
  std::vector<uint8_t> f = Assemble(Sections(Encode(SampleState())), 2, 0);
  ExpectError(DecodeState(f), StatusCode::kFailedPrecondition, "version 2.0 is not supported");
}

TEST(StateTest, RejectsOtherArchitecture) {
  std::vector<uint8_t> f = Encode(SampleState());
  Put<uint32_t>(f, 16, 183);  // aarch64
  Reseal(f);
  ExpectError(DecodeState(f), StatusCode::kFailedPrecondition, "machine 183");
}

TEST(StateTest, RejectsEveryTruncation) {
  std::vector<uint8_t> f = Encode(SampleState());
  for (size_t len = 0; len < f.size(); ++len) {
    Result<MachineState> r = DecodeState({f.data(), len});
    ASSERT_FALSE(r.ok()) << "decoded a file cut at " << len;
    ASSERT_EQ(r.status().code(), StatusCode::kDataLoss) << len << ": " << r.status().ToString();
    ASSERT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().ToString();
  }
}

TEST(StateTest, RejectsTrailingBytes) {
  std::vector<uint8_t> f = Encode(SampleState());
  f.push_back(0);
  ExpectError(DecodeState(f), StatusCode::kDataLoss, "after its declared end");
}

TEST(StateTest, RejectsAnyCorruptedByte) {
  std::vector<uint8_t> f = Encode(SampleState());
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] ^= 0x40;
    Result<MachineState> r = DecodeState(f);
    ASSERT_FALSE(r.ok()) << "byte " << i;
    f[i] ^= 0x40;
  }
  f[f.size() / 2] ^= 1;
  ExpectError(DecodeState(f), StatusCode::kDataLoss, "checksum mismatch");
}

TEST(StateTest, RejectsSectionsOutOfBounds) {
  std::vector<uint8_t> f = Encode(SampleState());
  Put<uint64_t>(f, 64 + 2 * 24 + 16, 1ull << 40);  // section 2 length
  Reseal(f);
  ExpectError(DecodeState(f), StatusCode::kDataLoss, "out of bounds");
  f = Encode(SampleState());
  Put<uint64_t>(f, 64 + 8, 8);  // section 0 starts inside the header
  Reseal(f);
  ExpectError(DecodeState(f), StatusCode::kDataLoss, "out of bounds");
  f = Encode(SampleState());
  Put<uint32_t>(f, 20, 100000);  // more sections than the table holds
  Reseal(f);
  ExpectError(DecodeState(f), StatusCode::kInvalidArgument, "cap");
}

TEST(StateTest, RejectsTruncatedSectionPayload) {
  std::vector<Section> secs = Sections(Encode(SampleState()));
  secs[2].payload.resize(secs[2].payload.size() - 3);  // vcpu 0 loses its tail
  ExpectError(DecodeState(Assemble(secs, 1, 0)), StatusCode::kDataLoss,
              "state section 2 (vcpu): truncated reading tsc_khz");
}

TEST(StateTest, RejectsTrailingSectionBytesFromTheSameMinor) {
  std::vector<Section> secs = Sections(Encode(SampleState()));
  secs[1].payload.push_back(0);
  ExpectError(DecodeState(Assemble(secs, 1, 0)), StatusCode::kDataLoss, "unexpected trailing");
  // A newer minor may append fields: they are ignored, and device decoders
  // are told so (device records are read whole here).
  Result<MachineState> r = DecodeState(Assemble(secs, 1, 7));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r == SampleState());
  EXPECT_TRUE(r->newer_minor);
  EXPECT_FALSE(DecodeState(Encode(SampleState()))->newer_minor);
}

TEST(StateTest, NewerMinorOptionalSectionIsSkippedRequiredIsRefused) {
  std::vector<Section> secs = Sections(Encode(SampleState()));
  secs.push_back({99, 0, {1, 2, 3}});
  Result<MachineState> r = DecodeState(Assemble(secs, 1, 1));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r == SampleState());
  secs.back().flags = 1;
  ExpectError(DecodeState(Assemble(secs, 1, 1)), StatusCode::kFailedPrecondition,
              "type 99, unknown to this build and marked required");
}

TEST(StateTest, EnforcesDecodeCaps) {
  std::vector<uint8_t> f = Encode(SampleState());
  DecodeLimits small;
  small.max_file_bytes = f.size() - 1;
  ExpectError(DecodeState(f, small), StatusCode::kInvalidArgument, "decode cap");
  DecodeLimits few_msrs;
  few_msrs.max_msrs = 4;
  ExpectError(DecodeState(f, few_msrs), StatusCode::kInvalidArgument, "msr count 5 exceeds the cap 4");
  DecodeLimits few_vcpus;
  few_vcpus.max_vcpus = 1;
  ExpectError(DecodeState(f, few_vcpus), StatusCode::kInvalidArgument, "more than 1 vcpu");
}

TEST(StateTest, RejectsMissingAndInconsistentSections) {
  std::vector<Section> secs = Sections(Encode(SampleState()));
  std::vector<Section> no_vm = secs;
  no_vm.erase(no_vm.begin() + 1);
  ExpectError(DecodeState(Assemble(no_vm, 1, 0)), StatusCode::kDataLoss, "exactly one");
  std::vector<Section> one_vcpu = secs;
  one_vcpu.erase(one_vcpu.begin() + 3);
  ExpectError(DecodeState(Assemble(one_vcpu, 1, 0)), StatusCode::kDataLoss,
              "2 vcpus but state for 1");
}

TEST(StateTest, EncodeRefusesInconsistentState) {
  MachineState s = SampleState();
  s.vcpus[1].id = 5;
  EXPECT_EQ(EncodeState(s).status().code(), StatusCode::kInvalidArgument);
  s = SampleState();
  s.config.mem_bytes += 4096;
  EXPECT_EQ(EncodeState(s).status().code(), StatusCode::kInvalidArgument);
  s = SampleState();
  s.virtio[2].slot = 9;
  EXPECT_EQ(EncodeState(s).status().code(), StatusCode::kInvalidArgument);
  s = SampleState();
  s.vcpus[0].xsave.resize(100);
  EXPECT_EQ(EncodeState(s).status().code(), StatusCode::kInvalidArgument);
  s = SampleState();
  s.virtio[2].kind = 0;
  s.config.devices[3].kind = 0;
  EXPECT_EQ(EncodeState(s).status().code(), StatusCode::kInvalidArgument);
  s = SampleState();
  s.serial.reset();  // configured but without state
  EXPECT_EQ(EncodeState(s).status().code(), StatusCode::kInvalidArgument);
}

TEST(StateTest, ReadsDeviceRecordsAsTheirBytes) {
  // What a device wrote is what it gets back: kind, slot and bytes of each
  // record, in order. The layout of the bytes is the device's
  // (vmm/device_persist_test.cc checks it against the golden file).
  Result<MachineState> s = DecodeState(Encode(SampleState()));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  ASSERT_EQ(s->virtio.size(), 3u);
  EXPECT_EQ(s->virtio[0].kind, testing::kSampleBlockKind);
  EXPECT_EQ(s->virtio[2].slot, 2u);
  EXPECT_EQ(s->virtio[0].state, SampleState().virtio[0].state);
  EXPECT_EQ(*s->serial, *SampleState().serial);
}

}  // namespace
}  // namespace kubicle::snapshot
