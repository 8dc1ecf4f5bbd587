#!/usr/bin/env python3
"""linux tier: a SandboxTemplate from a container image with python3 (issue
24, docs/images.md), through the real control plane, operator and
kubicle-node, with the real Linux guest, inside the nested test host.

    e2e/nested/image-template-test.py IMAGES_ENV TEST_BINARY [GTEST_ARGS...]

Here, on the build machine (native speed), the image's base layer is made
from the python rootfs the `linux_images` fixture built from Debian's
packages (guest/linux/build-rootfs.sh python: bookworm minbase + python3):
its files are copied out of the ext4 with debugfs (no mount, no root) and
written as one gzip'd tar layer, cached beside that rootfs under
$KUBICLE_CACHE/oci-layers/ so a rerun costs nothing. Device nodes are left
out, as an image has none (the guest's /dev is devtmpfs).

Then TEST_BINARY (linux_image_template_test) runs in one test host boot
(run-in-testhost.py) with KUBICLE_PYTHON_IMAGE_LAYER naming the layer: it
pushes the image (that layer plus one of its own, an Env and a
WorkingDir) to a loopback registry over TLS with basic auth, and checks
that a template naming it bakes and runs python3 in a Sandbox and in a fork
child (see linux_image_template_test.cc).
"""

import gzip
import os
import stat
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Bump when the layer's making changes: it names the cached layer.
LAYER_VERSION = 1


def log(msg):
    print(f"[image-template-test] {msg}", file=sys.stderr, flush=True)


def read_env(path):
    out = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.strip().partition("=")
            out[k] = v.strip("'\"")
    return out


def python_layer(rootfs):
    """The cached gzip'd tar of the python rootfs's files; made when missing."""
    cache = os.environ.get("KUBICLE_CACHE", os.path.expanduser("~/.cache/kubicle"))
    # The rootfs's directory is named by its content key (build-rootfs.sh).
    key = os.path.basename(os.path.dirname(rootfs))
    out_dir = os.path.join(cache, "oci-layers", f"{key}-v{LAYER_VERSION}")
    out = os.path.join(out_dir, "layer.tar.gz")
    if os.path.exists(out):
        log(f"cached: {out}")
        return out
    start = time.monotonic()
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kubicle-python-layer-") as tmp:
        tree = os.path.join(tmp, "root")
        os.mkdir(tree)
        # rdump copies files, directories and symlinks (modes, owners when
        # root) and skips device nodes.
        r = subprocess.run(["debugfs", "-R", f"rdump / {tree}", rootfs], capture_output=True,
                           text=True)
        if r.returncode != 0 or not os.path.exists(os.path.join(tree, "usr/bin/python3")):
            raise SystemExit(f"debugfs rdump of {rootfs} failed: {r.stderr[-2000:]}")
        partial = out + ".partial"
        n = 0
        with open(partial, "wb") as raw, \
                gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, compresslevel=6) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for root, dirs, files in os.walk(tree):
                dirs.sort()
                for name in sorted(dirs) + sorted(files):
                    full = os.path.join(root, name)
                    mode = os.lstat(full).st_mode
                    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                        continue
                    ti = tar.gettarinfo(full, arcname=os.path.relpath(full, tree))
                    ti.uname = ti.gname = ""
                    ti.mtime = 0
                    if ti.isreg():
                        with open(full, "rb") as f:
                            tar.addfile(ti, f)
                    else:
                        tar.addfile(ti)
                    n += 1
        os.rename(partial, out)
    log(f"made {out}: {n} entries, {os.path.getsize(out) >> 20} MiB gzip'd, "
        f"in {time.monotonic() - start:.1f} s")
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    images = read_env(sys.argv[1])
    binary = os.path.realpath(sys.argv[2])
    layer = python_layer(images["KUBICLE_LINUX_ROOTFS_PYTHON"])
    os.environ["KUBICLE_PYTHON_IMAGE_LAYER"] = layer
    return subprocess.call([os.path.join(HERE, "run-in-testhost.py"), "--timeout", "900", "--",
                            binary] + sys.argv[3:])


if __name__ == "__main__":
    sys.exit(main())
