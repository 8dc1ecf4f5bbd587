#!/usr/bin/env python3
"""Tests of the loopback registry fixture (registry.py) and push_image.py,
which the node's tests rely on to make hostile images: entries are written
exactly as asked (nothing cleaned), huge files stream, directory layers are
normalised, and a pushed image reads back from the registry with the
digests push_image.py reported (HTTP, and TLS with basic auth).

Run by CTest as oci_push_image (noderuntime/oci/CMakeLists.txt, label
unit); the registry cases skip without docker-registry.
"""
import gzip
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import push_image  # noqa: E402
from registry import Registry  # noqa: E402


class LayerTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="kubicle-push-test-")
        self.addCleanup(self.tmp.cleanup)

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def test_entries_are_written_exactly_as_given(self):
        entries = [
            {"path": "../escape", "data": "x"},
            {"path": "/abs/file", "data": "y"},
            {"path": "dev/null", "type": "char", "devmajor": 1, "devminor": 3},
            {"path": "dev/sda", "type": "block", "devmajor": 8, "devminor": 0},
            {"path": "etc/.wh.passwd"},
            {"path": "opt/.wh..wh..opq"},
            {"path": "bin/sh", "type": "symlink", "link": "/bin/busybox"},
            {"path": "bin/ash", "type": "hardlink", "link": "bin/busybox"},
            {"path": "setuid", "data": "z", "mode": 0o4755, "uid": 1000, "gid": 1000},
            {"path": "pipe", "type": "fifo"},
        ]
        out = self.path("l.tar")
        push_image.layer_from_entries(entries, out)
        with tarfile.open(out) as tar:
            got = {m.name: m for m in tar.getmembers()}
        # tarfile may normalise a leading "/" on read; the raw names are the test.
        with open(out, "rb") as f:
            raw = f.read()
        self.assertIn(b"../escape", raw)
        self.assertIn(b"/abs/file", raw)
        self.assertTrue(got["dev/null"].ischr())
        self.assertEqual((got["dev/null"].devmajor, got["dev/null"].devminor), (1, 3))
        self.assertTrue(got["dev/sda"].isblk())
        self.assertEqual(got["etc/.wh.passwd"].size, 0)
        self.assertIn("opt/.wh..wh..opq", got)
        self.assertEqual(got["bin/sh"].linkname, "/bin/busybox")
        self.assertTrue(got["bin/ash"].islnk())
        self.assertEqual(got["setuid"].mode, 0o4755)
        self.assertEqual((got["setuid"].uid, got["setuid"].gid), (1000, 1000))
        self.assertTrue(got["pipe"].isfifo())

    def test_a_huge_file_streams_and_compresses(self):
        size = 256 << 20
        out = self.path("big.tgz")
        push_image.layer_from_entries([{"path": "big", "size": size}], out, gz=True)
        self.assertLess(os.path.getsize(out), 1 << 20)  # zeros: gzip'd small
        with tarfile.open(out, "r:gz") as tar:
            m = tar.getmember("big")
            self.assertEqual(m.size, size)

    def test_a_directory_layer_is_relative_and_normalised(self):
        src = self.path("src")
        os.makedirs(os.path.join(src, "a/b"))
        with open(os.path.join(src, "a/b/f"), "w") as f:
            f.write("hello")
        os.link(os.path.join(src, "a/b/f"), os.path.join(src, "a/g"))
        os.symlink("b/f", os.path.join(src, "a/s"))
        out = self.path("d.tar")
        push_image.layer_from_dir(src, out)
        with tarfile.open(out) as tar:
            ms = {m.name: m for m in tar.getmembers()}
        self.assertEqual(sorted(ms), ["a", "a/b", "a/b/f", "a/g", "a/s"])
        self.assertTrue(all(m.uid == 0 and m.gid == 0 and m.mtime == 0 for m in ms.values()))
        self.assertTrue(ms["a/g"].islnk() or ms["a/b/f"].islnk())  # one is a hard link
        self.assertEqual(ms["a/s"].linkname, "b/f")


def get(reg, path, accept=None):
    req = urllib.request.Request(reg.url(path))
    if accept:
        req.add_header("Accept", accept)
    if reg.user:
        import base64
        req.add_header("Authorization", "Basic " + base64.b64encode(
            f"{reg.user}:{reg.password}".encode()).decode())
    with urllib.request.urlopen(req, context=reg.ssl_context(), timeout=30) as r:
        return r.read()


class PushTest(unittest.TestCase):
    def setUp(self):
        why = Registry.available()
        if why:
            self.skipTest(why)
        self.tmp = tempfile.TemporaryDirectory(prefix="kubicle-push-test-")
        self.addCleanup(self.tmp.cleanup)
        self.layer = os.path.join(self.tmp.name, "l.tar.gz")
        push_image.layer_from_entries([{"path": "hello", "data": "hi"}], self.layer, gz=True)

    def check_pushed(self, reg, out, repo):
        manifest = get(reg, f"/v2/{repo}/manifests/{out['manifest_digest']}",
                       accept=push_image.OCI_MANIFEST)
        self.assertEqual("sha256:" + hashlib.sha256(manifest).hexdigest(), out["manifest_digest"])
        m = json.loads(manifest)
        self.assertEqual(m["config"]["digest"], out["config_digest"])
        for desc, reported in zip(m["layers"], out["layers"]):
            blob = get(reg, f"/v2/{repo}/blobs/{desc['digest']}")
            self.assertEqual("sha256:" + hashlib.sha256(blob).hexdigest(), reported["digest"])
            self.assertEqual(len(blob), reported["size"])
        config = json.loads(get(reg, f"/v2/{repo}/blobs/{out['config_digest']}"))
        with gzip.open(self.layer) as f:
            diff_id = "sha256:" + hashlib.sha256(f.read()).hexdigest()
        self.assertEqual(config["rootfs"]["diff_ids"], [diff_id])
        return config

    def test_http_push_reads_back_with_the_reported_digests(self):
        with Registry() as reg:
            out = push_image.push(reg.address, "t/x", "1", [self.layer], gz=True, env=["A=b"],
                                  cmd=["/bin/sh"], insecure=True)
            config = self.check_pushed(reg, out, "t/x")
            self.assertEqual(config["config"]["Env"], ["A=b"])
            self.assertIsNone(out["index_digest"])

    def test_tls_basic_auth_and_an_index(self):
        with Registry(tls=True, user="alice", password="s3cret") as reg:
            with self.assertRaises(urllib.error.HTTPError) as e:  # credentials are required
                push_image.push(reg.address, "t/x", "1", [self.layer], gz=True, ca=reg.ca_file)
            self.assertEqual(e.exception.code, 401)
            out = push_image.push(reg.address, "t/x", "1", [self.layer], gz=True, ca=reg.ca_file,
                                  user="alice", password="s3cret", index=["linux/arm64", "linux/amd64"])
            self.check_pushed(reg, out, "t/x")
            index = json.loads(get(reg, "/v2/t/x/manifests/1", accept=push_image.OCI_INDEX))
            self.assertEqual([(e["platform"]["os"], e["platform"]["architecture"]) for e in index["manifests"]],
                             [("linux", "arm64"), ("linux", "amd64")])

    def test_the_command_line_prints_the_same(self):
        with Registry() as reg:
            d = os.path.join(self.tmp.name, "dir")
            os.makedirs(d)
            with open(os.path.join(d, "f"), "w") as f:
                f.write("x")
            out = subprocess.run([sys.executable, os.path.join(HERE, "push_image.py"), "--registry",
                                  reg.address, "--insecure", "--repo", "c/l", "--tag", "2",
                                  "--layer-dir", d], check=True, capture_output=True, text=True).stdout
            pushed = json.loads(out)
            self.assertEqual(pushed["reference"], f"{reg.address}/c/l:2")
            tag_manifest = get(reg, "/v2/c/l/manifests/2", accept=push_image.OCI_MANIFEST)
            self.assertEqual("sha256:" + hashlib.sha256(tag_manifest).hexdigest(), pushed["manifest_digest"])

    def test_a_tar_made_elsewhere_is_pushed_byte_for_byte_before_directories(self):
        with Registry() as reg:
            d = os.path.join(self.tmp.name, "dir")
            os.makedirs(d)
            with open(os.path.join(d, "g"), "w") as f:
                f.write("y")
            out = subprocess.run([sys.executable, os.path.join(HERE, "push_image.py"), "--registry",
                                  reg.address, "--insecure", "--repo", "c/t", "--layer-dir", d,
                                  "--layer-tar", self.layer, "--gzip"],
                                 check=True, capture_output=True, text=True).stdout
            pushed = json.loads(out)
            with open(self.layer, "rb") as f:
                digest = "sha256:" + hashlib.sha256(f.read()).hexdigest()
            self.assertEqual(len(pushed["layers"]), 2)
            self.assertEqual(pushed["layers"][0]["digest"], digest)
            self.assertEqual(pushed["layers"][0]["size"], os.path.getsize(self.layer))
            with tarfile.open(fileobj=io.BytesIO(get(reg, f"/v2/c/t/blobs/{pushed['layers'][1]['digest']}")),
                              mode="r:gz") as t:
                self.assertEqual(t.getnames(), ["g"])


if __name__ == "__main__":
    unittest.main()
