// BuildRootfs end to end: tar layers made in memory (plain and gzip) are
// built into an ext4 image, which is then opened with libext2fs and checked
// entry by entry (contents, modes, owners, mtimes, symlink targets, shared
// inodes, xattrs, whiteouts, opaque directories, image.json) and by
// `e2fsck -fn`. Then every refusal, each naming its layer and entry and
// leaving no image behind.
#include "noderuntime/oci/rootfs_builder.h"

// Not <et/com_err.h> on its own: ext2fs.h includes it inside extern "C".
#include <ext2fs/ext2fs.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/sha256.h"
#include "noderuntime/oci/tar_test_writer.h"

namespace kubicle::noderuntime::oci {
namespace {

namespace fs = std::filesystem;

constexpr char kGzip[] = "application/vnd.oci.image.layer.v1.tar+gzip";
constexpr char kTar[] = "application/vnd.oci.image.layer.v1.tar";
constexpr char kDockerGzip[] = "application/vnd.docker.image.rootfs.diff.tar.gzip";
constexpr char kZstdType[] = "application/vnd.oci.image.layer.v1.tar+zstd";

// The built image, read back through libext2fs.
class Image {
 public:
  explicit Image(const std::string& path) {
    initialize_ext2_error_table();
    err_ = ext2fs_open2(path.c_str(), nullptr, EXT2_FLAG_64BITS, 0, 0, unix_io_manager, &fs_);
  }
  ~Image() {
    if (fs_) ext2fs_close_free(&fs_);
  }
  bool ok() const { return err_ == 0; }
  // 0 when absent. Symlinks are not followed (namei with follow=0).
  ext2_ino_t Ino(const std::string& path) {
    ext2_ino_t ino = 0;
    if (path == "/") return EXT2_ROOT_INO;
    if (ext2fs_namei(fs_, EXT2_ROOT_INO, EXT2_ROOT_INO, path.c_str() + 1, &ino)) return 0;
    return ino;
  }
  ext2_inode_large Inode(const std::string& path) {
    ext2_inode_large in{};
    const ext2_ino_t ino = Ino(path);
    EXPECT_NE(ino, 0u) << path;
    if (ino) ext2fs_read_inode_full(fs_, ino, reinterpret_cast<ext2_inode*>(&in), sizeof(in));
    return in;
  }
  std::string Read(const std::string& path) {
    const ext2_ino_t ino = Ino(path);
    if (!ino) return "<absent>";
    ext2_file_t f = nullptr;
    if (ext2fs_file_open(fs_, ino, 0, &f)) return "<unreadable>";
    std::string out;
    char buf[4096];
    unsigned got = 0;
    while (ext2fs_file_read(f, buf, sizeof(buf), &got) == 0 && got > 0) out.append(buf, got);
    ext2fs_file_close(f);
    return out;
  }
  std::string SymlinkTarget(const std::string& path) {
    ext2_inode_large in = Inode(path);
    if (!LINUX_S_ISLNK(in.i_mode)) return "<not a symlink>";
    const size_t size = EXT2_I_SIZE(&in);
    if (size < sizeof(in.i_block))
      return std::string(reinterpret_cast<const char*>(in.i_block), size);
    return Read(path);
  }
  std::string Xattr(const std::string& path, const std::string& name) {
    ext2_xattr_handle* h = nullptr;
    std::string out = "<absent>";
    if (ext2fs_xattrs_open(fs_, Ino(path), &h)) return "<error>";
    void* v = nullptr;
    size_t len = 0;
    if (ext2fs_xattrs_read(h) == 0 && ext2fs_xattr_get(h, name.c_str(), &v, &len) == 0) {
      out.assign(static_cast<const char*>(v), len);
      ext2fs_free_mem(&v);
    }
    ext2fs_xattrs_close(&h);
    return out;
  }
  std::vector<std::string> List(const std::string& path) {
    std::vector<std::string> names;
    ext2fs_dir_iterate2(
        fs_, Ino(path), 0, nullptr,
        [](ext2_ino_t, int, ext2_dir_entry* d, int, int, char*, void* priv) {
          std::string n(d->name, ext2fs_dirent_name_len(d));
          if (n != "." && n != "..") static_cast<std::vector<std::string>*>(priv)->push_back(n);
          return 0;
        },
        &names);
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  ext2_filsys fs_ = nullptr;
  errcode_t err_ = 0;
};

class RootfsBuilderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rootfs_builder_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    out_ = dir_ + "/rootfs.ext4";
  }
  void TearDown() override { fs::remove_all(dir_); }

  LayerBlob Layer(const std::string& bytes, const std::string& media_type = kGzip) {
    const std::string path = dir_ + "/layer" + std::to_string(n_++);
    std::ofstream(path, std::ios::binary) << bytes;
    return LayerBlob{"sha256:" + Sha256Hex(bytes), media_type, bytes.size(), path};
  }
  LayerBlob GzLayer(const TarTestWriter& w) { return Layer(Gzip(w.Finish()), kGzip); }

  Result<RootfsInfo> Build(const std::vector<LayerBlob>& layers, RootfsLimits limits = {},
                           ImageConfig config = {}) {
    return BuildRootfs(layers, config, out_, limits,
                       [&](const std::string& m) { progress_.push_back(m); });
  }
  // The refusal's status; and no image left behind.
  Status Refused(const std::vector<LayerBlob>& layers, RootfsLimits limits = {}) {
    auto r = Build(layers, limits);
    EXPECT_FALSE(r.ok());
    EXPECT_FALSE(fs::exists(out_)) << "a failed build left " << out_;
    EXPECT_FALSE(fs::exists(out_ + ".mke2fs.log"));
    return r.status();
  }
  void ExpectFsck() {
    const std::string cmd = "e2fsck -fn " + out_ + " >" + dir_ + "/fsck.log 2>&1";
    std::ifstream log_in;
    const int rc = std::system(cmd.c_str());
    std::ifstream log(dir_ + "/fsck.log");
    std::stringstream ss;
    ss << log.rdbuf();
    EXPECT_EQ(rc, 0) << ss.str();
  }

  std::string dir_, out_;
  int n_ = 0;
  std::vector<std::string> progress_;
};

TEST_F(RootfsBuilderTest, PlainLayersWithModesOwnersLinksAndXattrs) {
  TarTestWriter base;
  base.Dir("./", 0755).Dir("etc/", 0755).File("etc/hostname", "base\n");
  TestEntry suid;
  suid.path = "usr/bin/sudo";
  suid.mode = 04755;
  suid.uid = 0;
  suid.content = "#!/bin/true\n";
  suid.xattrs = {{"security.capability", std::string("\x01\x00\x00\x02\x00\x20\x00\x00", 8)},
                 {"user.origin", "layer0"}};
  base.Add(suid);
  TestEntry owned;
  owned.path = "home/app/notes.txt";
  owned.uid = 100000;  // over 16 bits: the high half of the ext4 uid
  owned.gid = 1001;
  owned.mode = 0600;
  owned.content = "mine";
  owned.mtime_pax = "1700000123.456789";
  base.Add(owned);
  base.Symlink("bin", "usr/bin").Symlink("etc/long", std::string(200, 'L'));
  base.HardLink("usr/bin/sudo-again", "usr/bin/sudo");
  TestEntry fifo;
  fifo.path = "run/ctl";
  fifo.flag = '6';
  base.Add(fifo);
  TestEntry abs;
  abs.path = "/opt/abs.txt";  // absolute: the image's root
  abs.content = "abs";
  base.Add(abs);
  const std::string long_name = "usr/share/" + std::string(120, 'n') + "/" + std::string(90, 'm');
  TestEntry lp;
  lp.path = long_name;
  lp.content = "long";
  base.Add(lp);
  lp.path = long_name + "-gnu";
  lp.gnu_long_name = true;
  base.Add(lp);
  // 64 KiB of zeros then a byte: the zeros stay a hole and read back as zeros.
  base.File("var/zeros", std::string(64 << 10, '\0') + "z");

  ImageConfig config;
  config.env = {"PATH=/usr/bin", "LANG=C.UTF-8"};
  config.working_dir = "/home/app";
  config.user = "1000:1000";
  config.cmd = {"python3"};
  auto r = Build({Layer(base.Finish(), kTar)}, {}, config);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->path, out_);
  EXPECT_EQ(r->image_bytes, fs::file_size(out_));
  EXPECT_FALSE(progress_.empty());
  ExpectFsck();

  Image img(out_);
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(img.Read("/etc/hostname"), "base\n");
  auto sudo = img.Inode("/usr/bin/sudo");
  EXPECT_EQ(sudo.i_mode, LINUX_S_IFREG | 04755);
  EXPECT_EQ(sudo.i_links_count, 2);
  EXPECT_EQ(img.Ino("/usr/bin/sudo"), img.Ino("/usr/bin/sudo-again"));
  EXPECT_EQ(img.Xattr("/usr/bin/sudo", "security.capability"),
            std::string("\x01\x00\x00\x02\x00\x20\x00\x00", 8));
  EXPECT_EQ(img.Xattr("/usr/bin/sudo", "user.origin"), "layer0");
  auto notes = img.Inode("/home/app/notes.txt");
  EXPECT_EQ(notes.i_mode, LINUX_S_IFREG | 0600);
  EXPECT_EQ(inode_uid(notes), 100000u);
  EXPECT_EQ(inode_gid(notes), 1001u);
  EXPECT_EQ(notes.i_mtime, 1700000123u);
  EXPECT_EQ(notes.i_mtime_extra >> 2, 456789000u);
  EXPECT_EQ(img.Read("/home/app/notes.txt"), "mine");
  // Implicit parents: 0755 root.
  auto home = img.Inode("/home");
  EXPECT_EQ(home.i_mode, LINUX_S_IFDIR | 0755);
  EXPECT_EQ(inode_uid(home), 0u);
  EXPECT_EQ(img.SymlinkTarget("/bin"), "usr/bin");
  EXPECT_EQ(img.SymlinkTarget("/etc/long"), std::string(200, 'L'));
  EXPECT_TRUE(LINUX_S_ISFIFO(img.Inode("/run/ctl").i_mode));
  EXPECT_EQ(img.Read("/opt/abs.txt"), "abs");
  EXPECT_EQ(img.Read("/" + long_name), "long");
  EXPECT_EQ(img.Read("/" + long_name + "-gnu"), "long");
  EXPECT_EQ(img.Read("/var/zeros"), std::string(64 << 10, '\0') + "z");
  EXPECT_LT(img.Inode("/var/zeros").i_blocks, 64u * 2)
      << "zero blocks were written, not left as holes";
  // The guest's mount points, /tmp sticky.
  for (const char* d : {"/proc", "/sys", "/dev", "/tmp", "/run"})
    EXPECT_TRUE(LINUX_S_ISDIR(img.Inode(d).i_mode)) << d;
  EXPECT_EQ(img.Inode("/tmp").i_mode, LINUX_S_IFDIR | 01777);
  // The image config.
  auto j = nlohmann::json::parse(img.Read("/.kubicle/image.json"));
  EXPECT_EQ(j["Env"], nlohmann::json({"PATH=/usr/bin", "LANG=C.UTF-8"}));
  EXPECT_EQ(j["WorkingDir"], "/home/app");
  EXPECT_EQ(j["User"], "1000:1000");
  EXPECT_EQ(j["Cmd"], nlohmann::json({"python3"}));
  EXPECT_EQ(r->file_bytes,
            5u + 12 + 4 + 3 + 4 + 4 + (64 << 10) + 1 + img.Read("/.kubicle/image.json").size());
}

TEST_F(RootfsBuilderTest, LaterLayersReplaceWhiteoutAndHide) {
  TarTestWriter l0;
  l0.File("keep.txt", "0").File("gone.txt", "0").File("replaced.txt", "old");
  l0.Dir("dir2file/").File("dir2file/child", "c").File("file2dir", "f");
  l0.Dir("opq/").File("opq/lower", "l").Dir("opq/sub/").File("opq/sub/deep", "d");
  l0.Dir("merge/", 0700).File("merge/lower", "l");
  l0.File("linked", "shared").HardLink("linked2", "linked");
  TarTestWriter l1;
  l1.File(".wh.gone.txt", "").File("replaced.txt", "new");
  l1.File("dir2file", "now a file").Dir("file2dir/").File("file2dir/x", "x");
  // Same-layer entries survive their directory's opaque marker, in either
  // order; the lower ones do not, nor below a re-declared subdirectory.
  l1.File("opq/upper-before", "u").File("opq/.wh..wh..opq", "").File("opq/upper-after", "u");
  l1.Dir("opq/sub/").File("opq/sub/new", "n");
  l1.Dir("merge/", 0750).File("merge/upper", "u");
  l1.File("linked", "replaced");  // the other name keeps the old inode
  l1.File(".wh.never-existed", "");
  TarTestWriter l2;
  l2.File("gone.txt", "back");  // a whiteout does not stop a later layer
  auto r = Build({GzLayer(l0), Layer(Gzip(l1.Finish()), kDockerGzip), Layer(l2.Finish(), kTar)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectFsck();
  Image img(out_);
  ASSERT_TRUE(img.ok());
  EXPECT_EQ(img.Read("/keep.txt"), "0");
  EXPECT_EQ(img.Read("/gone.txt"), "back");
  EXPECT_EQ(img.Read("/replaced.txt"), "new");
  EXPECT_EQ(img.Read("/dir2file"), "now a file");
  EXPECT_EQ(img.Ino("/dir2file/child"), 0u);
  EXPECT_EQ(img.Read("/file2dir/x"), "x");
  EXPECT_EQ(img.List("/opq"), (std::vector<std::string>{"sub", "upper-after", "upper-before"}));
  EXPECT_EQ(img.List("/opq/sub"), (std::vector<std::string>{"new"}));
  EXPECT_EQ(img.List("/merge"), (std::vector<std::string>{"lower", "upper"}));
  EXPECT_EQ(img.Inode("/merge").i_mode, LINUX_S_IFDIR | 0750);
  EXPECT_EQ(img.Read("/linked"), "replaced");
  EXPECT_EQ(img.Read("/linked2"), "shared");
  EXPECT_EQ(img.Inode("/linked2").i_links_count, 1);
  for (const auto& n : img.List("/")) EXPECT_EQ(n.rfind(".wh.", 0), std::string::npos) << n;
}

// Names are written a block at a time, not one ext2fs_link each (which is
// quadratic in a directory's size).
TEST_F(RootfsBuilderTest, ManyEntriesInOneDirectoryGrowIt) {
  TarTestWriter w;
  for (int i = 0; i < 20000; ++i)
    w.File("many/file-with-a-longish-name-" + std::to_string(i), std::to_string(i));
  auto r = Build({GzLayer(w)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectFsck();
  Image img(out_);
  EXPECT_EQ(img.List("/many").size(), 20000u);
  EXPECT_EQ(img.Read("/many/file-with-a-longish-name-2999"), "2999");
}

TEST_F(RootfsBuilderTest, LostAndFoundIsMke2fsOrTheImages) {
  ASSERT_TRUE(Build({GzLayer(TarTestWriter().File("a", "1"))}).ok());
  {
    Image img(out_);
    EXPECT_EQ(img.List("/"), (std::vector<std::string>{".kubicle", "a", "dev", "lost+found", "proc",
                                                       "run", "sys", "tmp"}));
  }
  ExpectFsck();
  fs::remove(out_);
  TarTestWriter own;
  own.Dir("lost+found/", 0700).File("lost+found/kept", "image's");
  ASSERT_TRUE(Build({GzLayer(own)}).ok());
  ExpectFsck();  // mke2fs's lost+found freed, not left unattached
  Image img(out_);
  EXPECT_EQ(img.Read("/lost+found/kept"), "image's");
  EXPECT_EQ(img.Inode("/lost+found").i_mode, LINUX_S_IFDIR | 0700);
}

// A layer written by GNU tar (PAX, xattrs) from a real directory, checked
// entry by entry against that directory: an independent writer, not ours.
TEST_F(RootfsBuilderTest, GnuTarLayerMatchesItsDirectory) {
  const std::string src = dir_ + "/src";
  fs::create_directories(src + "/usr/bin");
  fs::create_directories(src + "/" + std::string(120, 'd') + "/" + std::string(100, 'e'));
  std::ofstream(src + "/usr/bin/tool") << "#!/bin/sh\necho tool\n";
  ::chmod((src + "/usr/bin/tool").c_str(), 04755);
  std::ofstream(src + "/" + std::string(120, 'd') + "/" + std::string(100, 'e') + "/deep.txt")
      << "deep";
  std::ofstream(src + "/big.bin") << std::string(300000, 'x') + std::string(8192, '\0') + "end";
  fs::create_symlink("usr/bin/tool", src + "/link");
  fs::create_symlink("/etc/absolute/elsewhere", src + "/dangling");
  fs::create_hard_link(src + "/usr/bin/tool", src + "/usr/bin/tool-again");
  if (::geteuid() == 0) {
    ASSERT_EQ(::lchown((src + "/big.bin").c_str(), 1234, 5678), 0);
    ASSERT_EQ(::lchown((src + "/link").c_str(), 42, 43), 0);
  }
  const std::string layer = dir_ + "/layer.tar.gz";
  const std::string cmd =
      "tar --format=pax --xattrs --numeric-owner -C " + src + " -cf - . | gzip -n >" + layer;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(layer, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  auto r = Build({Layer(bytes.str(), kGzip)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ExpectFsck();
  Image img(out_);
  int checked = 0;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    const std::string rel =
        "/" +
        entry.path().lexically_relative(src).string();  // not fs::relative: it follows symlinks
    struct stat st {};
    ASSERT_EQ(::lstat(entry.path().c_str(), &st), 0);
    const auto in_image = img.Inode(rel);
    EXPECT_EQ(in_image.i_mode, st.st_mode) << rel;
    EXPECT_EQ(inode_uid(in_image), st.st_uid) << rel;
    EXPECT_EQ(inode_gid(in_image), st.st_gid) << rel;
    EXPECT_EQ(static_cast<int64_t>(in_image.i_mtime), st.st_mtim.tv_sec) << rel;
    if (S_ISREG(st.st_mode)) {
      std::ifstream f(entry.path(), std::ios::binary);
      std::stringstream want;
      want << f.rdbuf();
      EXPECT_EQ(img.Read(rel), want.str()) << rel;
      EXPECT_EQ(in_image.i_links_count, st.st_nlink) << rel;
    } else if (S_ISLNK(st.st_mode)) {
      EXPECT_EQ(img.SymlinkTarget(rel), fs::read_symlink(entry.path()).string()) << rel;
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);
  EXPECT_EQ(img.Ino("/usr/bin/tool"), img.Ino("/usr/bin/tool-again"));
}

void ExpectNames(const Status& s, StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), code) << s.ToString();
  for (const auto& p : parts)
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
}

TEST_F(RootfsBuilderTest, PathRefusals) {
  TarTestWriter ok;
  ok.File("fine", "1");
  ExpectNames(Refused({GzLayer(ok), GzLayer(TarTestWriter().File("a/../../etc/passwd", "x"))}),
              StatusCode::kInvalidArgument, {"layer 2 of 2", "a/../../etc/passwd", ".."});
  ExpectNames(
      Refused({GzLayer(TarTestWriter().Symlink("lib", "/usr/lib").File("lib/evil.so", "x"))}),
      StatusCode::kInvalidArgument, {"layer 1 of 1", "lib/evil.so", "symlink"});
  ExpectNames(Refused({GzLayer(TarTestWriter().File("f", "x").File("f/child", "x"))}),
              StatusCode::kInvalidArgument, {"f/child", "not a directory"});
  ExpectNames(Refused({GzLayer(TarTestWriter().HardLink("h", "/etc/shadow"))}),
              StatusCode::kInvalidArgument, {"entry 'h'", "/etc/shadow", "not in the image"});
  ExpectNames(Refused({GzLayer(TarTestWriter().Dir("d/").HardLink("h", "d"))}),
              StatusCode::kInvalidArgument, {"entry 'h'", "directory"});
  TestEntry dev;
  dev.path = "dev/sda";
  dev.flag = '4';
  ExpectNames(Refused({GzLayer(TarTestWriter().Add(dev))}), StatusCode::kInvalidArgument,
              {"dev/sda", "device"});
  dev.path = "dev/mem";
  dev.flag = '3';
  ExpectNames(Refused({GzLayer(TarTestWriter().Add(dev))}), StatusCode::kInvalidArgument,
              {"dev/mem", "device"});
  ExpectNames(Refused({GzLayer(TarTestWriter().Symlink("s", std::string(4096, 't')))}),
              StatusCode::kInvalidArgument, {"entry 's'", "symlink target"});
  TestEntry x;
  x.path = "f";
  x.xattrs = {{"system.evil", "1"}};
  ExpectNames(Refused({GzLayer(TarTestWriter().Add(x))}), StatusCode::kInvalidArgument,
              {"system.evil"});
}

TEST_F(RootfsBuilderTest, SizeRefusals) {
  RootfsLimits l;
  l.max_file_bytes = 1000;
  ExpectNames(Refused({GzLayer(TarTestWriter().File("big", std::string(1001, 'b')))}, l),
              StatusCode::kResourceExhausted, {"entry 'big'", "1001", "limit"});
  l = {};
  l.max_total_bytes = 1500;
  ExpectNames(Refused({GzLayer(TarTestWriter().File("a", std::string(1000, 'a'))),
                       GzLayer(TarTestWriter().File("b", std::string(1000, 'b')))},
                      l),
              StatusCode::kResourceExhausted, {"layer 2 of 2", "entry 'b'", "1500"});
  l = {};
  l.max_entries = 10;
  TarTestWriter many;
  for (int i = 0; i < 11; ++i) many.File("f" + std::to_string(i), "");
  ExpectNames(Refused({GzLayer(many)}, l), StatusCode::kResourceExhausted,
              {"entry 'f10'", "10 entries"});
  l = {};
  l.max_path_bytes = 64;
  ExpectNames(Refused({GzLayer(TarTestWriter().File(std::string(80, 'p'), ""))}, l),
              StatusCode::kInvalidArgument, {"longer than 64"});
}

TEST_F(RootfsBuilderTest, HardLinksStopAtExt4sLimit) {
  TarTestWriter w;
  w.File("target", "t");
  for (int i = 0; i < 65000; ++i) w.HardLink("l" + std::to_string(i), "target");
  ExpectNames(Refused({GzLayer(w)}), StatusCode::kInvalidArgument, {"65000 hard links"});
}

TEST_F(RootfsBuilderTest, DecompressionBombIsRefusedWhileInflating) {
  // 32 MiB of zeros gzip to ~32 KiB: a ratio near 1000.
  const LayerBlob bomb = GzLayer(TarTestWriter().File("zeros", std::string(32 << 20, '\0')));
  ExpectNames(Refused({bomb}), StatusCode::kResourceExhausted,
              {"layer 1 of 1", "decompression bomb"});
  RootfsLimits lenient;
  lenient.max_expansion_ratio = 5000;
  auto r = Build({bomb}, lenient);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
}

TEST_F(RootfsBuilderTest, CorruptAndLyingLayers) {
  TarTestWriter w;
  w.File("a", std::string(5000, 'a')).File("b", "b");
  const std::string gz = Gzip(w.Finish());
  ExpectNames(Refused({Layer(gz.substr(0, gz.size() / 2))}), StatusCode::kDataLoss,
              {"layer 1 of 1", "truncated"});
  std::string corrupt = gz;
  corrupt[corrupt.size() / 2] ^= 0x55;
  corrupt[corrupt.size() / 2 + 1] ^= 0x55;
  EXPECT_EQ(Refused({Layer(corrupt)}).code(), StatusCode::kDataLoss);
  // A plain tar cut inside a file's data.
  ExpectNames(Refused({Layer(w.bytes().substr(0, 2000), kTar)}), StatusCode::kDataLoss,
              {"truncated", "a"});
  // A blob whose bytes are not its digest.
  LayerBlob lie = Layer(gz);
  lie.digest = "sha256:" + std::string(64, '0');
  ExpectNames(Refused({lie}), StatusCode::kDataLoss, {"does not match its digest"});
  LayerBlob wrong_size = Layer(gz);
  wrong_size.size += 1;
  EXPECT_EQ(Refused({wrong_size}).code(), StatusCode::kDataLoss);
  // Garbage after the gzip stream.
  EXPECT_EQ(Refused({Layer(gz + "garbage!")}).code(), StatusCode::kDataLoss);
  // Media types.
  EXPECT_EQ(Refused({Layer(gz, kZstdType)}).code(), StatusCode::kDataLoss);  // gzip is not zstd
  EXPECT_EQ(Refused({Layer(gz, "text/plain")}).code(), StatusCode::kInvalidArgument);
  // gzip data under a plain tar type: not a tar.
  EXPECT_FALSE(Build({Layer(gz, kTar)}).ok());
  EXPECT_FALSE(fs::exists(out_));
}

TEST_F(RootfsBuilderTest, ZstdLayers) {
  TarTestWriter w;
  w.File("a", "first").File("b", std::string(100000, 'b'));
  const std::string tar = w.Finish();
  // Two frames, as a parallel compressor writes them.
  auto r = Build({Layer(Zstd(tar.substr(0, 1024)) + Zstd(tar.substr(1024)), kZstdType)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  {
    Image img(out_);
    EXPECT_EQ(img.Read("/a"), "first");
    EXPECT_EQ(img.Read("/b"), std::string(100000, 'b'));
  }
  fs::remove(out_);
  const std::string z = Zstd(tar);
  ExpectNames(Refused({Layer(z.substr(0, z.size() - 6), kZstdType)}), StatusCode::kDataLoss,
              {"layer 1 of 1", "zstd"});
  std::string corrupt = z;
  corrupt[corrupt.size() / 2] ^= 0x5a;
  EXPECT_EQ(Refused({Layer(corrupt, kZstdType)}).code(), StatusCode::kDataLoss);
  EXPECT_EQ(Refused({Layer(z + "trailing", kZstdType)}).code(), StatusCode::kDataLoss);
  const LayerBlob bomb =
      Layer(Zstd(TarTestWriter().File("zeros", std::string(32 << 20, '\0')).Finish()), kZstdType);
  ExpectNames(Refused({bomb}), StatusCode::kResourceExhausted, {"decompression bomb"});
}

TEST_F(RootfsBuilderTest, ConcatenatedGzipMembersAreOneLayer) {
  TarTestWriter w;
  w.File("a", "first").File("b", "second");
  const std::string tar = w.Finish();
  auto r = Build({Layer(Gzip(tar.substr(0, 1024)) + Gzip(tar.substr(1024)))});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Image img(out_);
  EXPECT_EQ(img.Read("/b"), "second");
}

TEST_F(RootfsBuilderTest, AnExistingOutputIsNeverTouched) {
  std::ofstream(out_) << "someone else's";
  auto r = Build({GzLayer(TarTestWriter().File("a", "1"))});
  EXPECT_EQ(r.status().code(), StatusCode::kAlreadyExists);
  std::ifstream in(out_);
  std::string s;
  std::getline(in, s);
  EXPECT_EQ(s, "someone else's");
}

}  // namespace
}  // namespace kubicle::noderuntime::oci
