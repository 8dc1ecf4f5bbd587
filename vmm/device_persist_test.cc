// Devices saving and restoring their own state (vmm/devices/virtio/persist.h,
// vmm/devices/legacy/serial_persist.h): the golden state file's device
// records decode with the devices' own decoders and encode back byte for
// byte (snapshot/testing/sample_state.cc writes them by hand from
// docs/snapshot-format.md), round trips, hostile records, and a device
// saving itself through its transport.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <random>

#include "snapshot/state.h"
#include "vmm/devices/legacy/serial_persist.h"
#include "vmm/devices/virtio/block.h"
#include "vmm/devices/virtio/persist.h"
#include "vmm/devices/virtio/rng.h"
#include "vmm/devices/virtio/test_driver.h"
#include "vmm/devices/virtio/vsock.h"

namespace kubicle::vmm::devices {
namespace {

using virtio::Block;
using virtio::BlockState;
using virtio::MmioTransportState;

snapshot::MachineState Golden() {
  std::ifstream in(KUBICLE_SNAPSHOT_TESTDATA "/state-v1.0.bin", std::ios::binary);
  EXPECT_TRUE(in) << "missing golden file";
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  auto s = snapshot::DecodeState(bytes);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : snapshot::MachineState{};
}

struct Record {
  MmioTransportState transport;
  std::vector<uint8_t> own;
};

Record Split(const snapshot::VirtioDeviceState& d) {
  Record r;
  Status st = virtio::DecodeRecord(d.state, false, &r.transport, &r.own);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return r;
}

TEST(DevicePersistTest, GoldenRecordsDecodeAndEncodeBackByteForByte) {
  snapshot::MachineState s = Golden();
  ASSERT_TRUE(s.serial.has_value());
  auto serial = legacy::DecodeSerialState(*s.serial, false);
  ASSERT_TRUE(serial.ok()) << serial.status().ToString();
  EXPECT_EQ(serial->mcr, 0xb);
  EXPECT_EQ(serial->input, (std::vector<uint8_t>{'l', 's', '\n'}));
  EXPECT_EQ(legacy::EncodeSerialState(*serial), *s.serial);

  ASSERT_EQ(s.virtio.size(), 3u);
  const uint16_t queues[] = {1, 3, 1};
  for (size_t i = 0; i < 3; ++i) {
    Record r = Split(s.virtio[i]);
    EXPECT_EQ(r.transport.status, 0xfu);
    EXPECT_EQ(r.transport.queues.size(), queues[i]);
    EXPECT_EQ(r.transport.queues.at(0).size, 256);
    EXPECT_EQ(virtio::EncodeRecord(r.transport, r.own), s.virtio[i].state) << i;
    EXPECT_TRUE(virtio::CheckDevice(s.virtio[i], false).ok());
  }
  EXPECT_EQ(s.virtio[0].kind, Block::kPersistKind);
  EXPECT_EQ(s.virtio[1].kind, virtio::Vsock::kPersistKind);
  EXPECT_EQ(s.virtio[2].kind, virtio::Rng::kPersistKind);

  std::vector<uint8_t> own = Split(s.virtio[0]).own;
  auto block = Block::DecodeState(own, false);
  ASSERT_TRUE(block.ok()) << block.status().ToString();
  EXPECT_FALSE(block->read_only);
  EXPECT_EQ(block->serial, "rootfs");
  EXPECT_EQ(block->chain.base_path, "/var/lib/kubicle/images/python.ext4");
  EXPECT_EQ(block->chain.size, 1ull << 30);
  ASSERT_EQ(block->chain.layers.size(), 1u);
  EXPECT_EQ(block->chain.layers[0].id[15], 0xaf);
  EXPECT_EQ(Block::EncodeState(*block), own);

  auto cid = virtio::Vsock::DecodeState(Split(s.virtio[1]).own, false);
  ASSERT_TRUE(cid.ok());
  EXPECT_EQ(*cid, 3u);
  EXPECT_TRUE(Split(s.virtio[2]).own.empty());
}

TEST(DevicePersistTest, StatesRoundTrip) {
  BlockState b{true, "data", {"/img/ro.ext4", 4096, {}}};
  EXPECT_EQ(*Block::DecodeState(Block::EncodeState(b), false), b);
  b = {false, std::string(20, 'x'), {"/img/base", 1 << 20, {{"/l/1", {1, 2, 3}}, {"/l/2", {9}}}}};
  EXPECT_EQ(*Block::DecodeState(Block::EncodeState(b), false), b);

  legacy::SerialState serial;
  serial.overrun = true;
  serial.input.assign(legacy::Serial::kInputCapacity, 'x');
  auto back = legacy::DecodeSerialState(legacy::EncodeSerialState(serial), false);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->input, serial.input);
  EXPECT_TRUE(back->overrun);

  MmioTransportState t;
  t.driver_features = ~0ull;
  t.queues.resize(virtio::kMaxSavedQueues);
  t.queues.back().next_avail = 65535;
  std::vector<uint8_t> own = {1, 2, 3};
  MmioTransportState t2;
  std::vector<uint8_t> own2;
  ASSERT_TRUE(virtio::DecodeRecord(virtio::EncodeRecord(t, own), false, &t2, &own2).ok());
  EXPECT_EQ(t2, t);
  EXPECT_EQ(own2, own);
}

void ExpectRefused(const Status& st, StatusCode code, const std::string& words) {
  EXPECT_EQ(st.code(), code) << st.ToString();
  EXPECT_NE(st.message().find(words), std::string::npos) << st.ToString();
}

TEST(DevicePersistTest, RefusesHostileRecords) {
  snapshot::MachineState s = Golden();
  // Every truncation of every record fails cleanly.
  for (const snapshot::VirtioDeviceState& d : s.virtio) {
    for (size_t len = 0; len < d.state.size(); ++len) {
      snapshot::VirtioDeviceState cut = d;
      cut.state.resize(len);
      Status st = virtio::CheckDevice(cut, false);
      ASSERT_FALSE(st.ok()) << "kind " << d.kind << " cut at " << len;
      ASSERT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
    }
  }
  for (size_t len = 0; len < s.serial->size(); ++len)
    ASSERT_FALSE(legacy::DecodeSerialState({s.serial->data(), len}, false).ok()) << len;

  // Bytes left over: an error from the same minor version, skipped from a newer one.
  snapshot::VirtioDeviceState longer = s.virtio[0];
  longer.state.push_back(0);
  ExpectRefused(virtio::CheckDevice(longer, false), StatusCode::kDataLoss, "trailing");
  EXPECT_TRUE(virtio::CheckDevice(longer, true).ok());
  std::vector<uint8_t> own = Split(s.virtio[1]).own;
  own.push_back(1);
  EXPECT_FALSE(virtio::Vsock::CheckSaved(own, false).ok());
  EXPECT_TRUE(virtio::Vsock::CheckSaved(own, true).ok());
  std::vector<uint8_t> serial = *s.serial;
  serial.push_back(0);
  EXPECT_FALSE(legacy::DecodeSerialState(serial, false).ok());
  EXPECT_TRUE(legacy::DecodeSerialState(serial, true).ok());

  // Counts over the caps, flags that are not flags, contradictions.
  MmioTransportState t;
  t.queues.resize(virtio::kMaxSavedQueues + 1);
  snapshot::VirtioDeviceState many{virtio::Rng::kPersistKind, 0, virtio::EncodeRecord(t, {})};
  ExpectRefused(virtio::CheckDevice(many, false), StatusCode::kInvalidArgument, "exceeds the cap");
  BlockState b{false, "x", {"/b", 1, std::vector<snapshot::LayerRef>(Block::kMaxSavedLayers + 1)}};
  ExpectRefused(Block::DecodeState(Block::EncodeState(b), false).status(),
                StatusCode::kInvalidArgument, "exceeds the cap");
  b = {true, "x", {"/b", 1, {{"/l", {}}}}};
  ExpectRefused(Block::DecodeState(Block::EncodeState(b), false).status(), StatusCode::kDataLoss,
                "read-only disk has layers");
  std::vector<uint8_t> bad_bool = Block::EncodeState({});
  bad_bool[0] = 2;
  ExpectRefused(Block::DecodeState(bad_bool, false).status(), StatusCode::kDataLoss, "not 0 or 1");
  legacy::SerialState big;
  big.input.assign(legacy::Serial::kInputCapacity + 1, 'x');
  EXPECT_FALSE(legacy::DecodeSerialState(legacy::EncodeSerialState(big), false).ok());

  // A kind this build does not know is refused by name.
  snapshot::VirtioDeviceState unknown = s.virtio[2];
  unknown.kind = 77;
  ExpectRefused(virtio::CheckDevice(unknown, false), StatusCode::kFailedPrecondition,
                "kind 77 (slot 2) that this build cannot restore");
  virtio::DeviceResources host;
  EXPECT_FALSE(virtio::RestoreDevice(unknown, false, host).ok());
  // A resource the snapshot needs and the VM did not give.
  ExpectRefused(virtio::RestoreDevice(s.virtio[1], false, host).status(),
                StatusCode::kInvalidArgument, "--vsock-uds is required");
  ExpectRefused(virtio::RestoreDevice(s.virtio[0], false, host).status(),
                StatusCode::kFailedPrecondition, "no disk was given");
}

// Mutated records decode or fail cleanly; what decodes encodes back to itself.
TEST(DevicePersistTest, FuzzedRecordsNeverCrash) {
  snapshot::MachineState s = Golden();
  std::mt19937 rng(7);
  for (int i = 0; i < 20000; ++i) {
    snapshot::VirtioDeviceState d = s.virtio[rng() % s.virtio.size()];
    for (int e = 0, n = 1 + static_cast<int>(rng() % 4); e < n && !d.state.empty(); ++e)
      d.state[rng() % d.state.size()] = static_cast<uint8_t>(rng());
    if (rng() % 8 == 0) d.state.resize(rng() % (d.state.size() + 1));
    MmioTransportState t;
    std::vector<uint8_t> own;
    if (virtio::DecodeRecord(d.state, false, &t, &own).ok()) {
      ASSERT_EQ(virtio::EncodeRecord(t, own), d.state);
    }
    (void)virtio::CheckDevice(d, i % 2 == 0);
    if (auto b = Block::DecodeState(own, false); b.ok()) {
      ASSERT_EQ(Block::EncodeState(*b), own);
    }
    std::vector<uint8_t> serial = *s.serial;
    serial[rng() % serial.size()] = static_cast<uint8_t>(rng());
    if (auto st = legacy::DecodeSerialState(serial, false); st.ok()) {
      ASSERT_EQ(legacy::EncodeSerialState(*st), serial);
    }
  }
}

class DevicePersistTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto mem = GuestMemory::CreateAnonymous({{0, 1 << 20}});
    ASSERT_TRUE(mem.ok());
    mem_ = std::move(*mem);
    irq_ = std::make_shared<virtio::testing::CountingInterrupt>();
  }
  std::unique_ptr<virtio::MmioTransport> Attach(std::unique_ptr<virtio::VirtioDevice> d) {
    auto t = virtio::MmioTransport::Create(std::move(d), *mem_, irq_);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }
  std::unique_ptr<GuestMemory> mem_;
  std::shared_ptr<virtio::testing::CountingInterrupt> irq_;
};

TEST_F(DevicePersistTransportTest, ADeviceSavesItselfAndComesBack) {
  std::string image = ::testing::TempDir() + "/persist-" + std::to_string(::getpid()) + ".img";
  std::ofstream(image) << std::string(8192, 'z');
  auto raw = virtio::RawFileBackend::Open(image, /*read_only=*/true);
  ASSERT_TRUE(raw.ok());
  auto t = Attach(std::make_unique<Block>(std::move(*raw), "ro-disk"));
  ASSERT_TRUE(t);
  auto record = virtio::SaveDevice(*t, 4);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  EXPECT_EQ(record->kind, Block::kPersistKind);
  EXPECT_EQ(record->slot, 4u);
  auto state = Block::DecodeState(Split(*record).own, false);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(*state, (BlockState{true, "ro-disk", {image, 8192, {}}}));

  // Back through the table, on the disk the host resources open.
  virtio::DeviceResources host;
  std::optional<BlockState> asked;
  host.open_disk = [&](const BlockState& b) -> Result<std::unique_ptr<virtio::BlockBackend>> {
    asked = b;
    ASSIGN_OR_RETURN(auto r, virtio::RawFileBackend::Open(b.chain.base_path, true));
    return std::unique_ptr<virtio::BlockBackend>(std::move(r));
  };
  auto restored = virtio::RestoreDevice(*record, false, host);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(asked, *state);
  auto t2 = Attach(std::move(restored->device));
  ASSERT_TRUE(t2);
  EXPECT_TRUE(t2->RestoreState(restored->transport).ok());
  EXPECT_EQ(static_cast<Block*>(t2->device())->id(), "ro-disk");
  ::unlink(image.c_str());

  // virtio-rng: a record with the transport's state only.
  auto rng = Attach(std::make_unique<virtio::Rng>());
  auto rng_record = virtio::SaveDevice(*rng, 0);
  ASSERT_TRUE(rng_record.ok());
  EXPECT_TRUE(Split(*rng_record).own.empty());
  EXPECT_TRUE(virtio::RestoreDevice(*rng_record, false, {}).ok());
}

}  // namespace
}  // namespace kubicle::vmm::devices
