#!/usr/bin/env python3
"""Builds Kubicle's container images from the tree, without a container
engine: the root filesystems (kubicle binaries, the shared libraries they
load, the Debian tools the node runs, the guest files) and reproducible OCI
image archives of them (docs/helm.md, "Images").

  oci_image.py list   --build-dir B [--linux-kernel K --initramfs I]
  oci_image.py rootfs --build-dir B --out DIR [...]     (images/Containerfile)
  oci_image.py build  --build-dir B --out DIR --tag T --names FILE [...]

`list` prints every file of every image as "<image> <path> <source>";
`rootfs` writes each image's tree under DIR/<image>/ (the Containerfile's
runtime stages COPY those); `build` writes DIR/<image>-<tag>.oci.tar, an OCI
image layout in a tar (`ctr -n k8s.io images import` takes it), and skips an
image whose inputs are unchanged since it last wrote it. FILE holds one
"<image> <repository>" line per image (scripts/build-images.sh takes them
from helm/kubicle/values.yaml, so the chart and the archives cannot name
different images).

Reproducible: every timestamp is SOURCE_DATE_EPOCH (default 0), owners are
0:0, names are sorted, gzip carries no name or time, binaries are stripped
with the same strip; the same inputs give the same digests byte for byte.
"""

import argparse
import datetime
import gzip
import hashlib
import io
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile

# The images and what each holds. Build outputs are paths relative to the
# CMake build directory; host tools are found on the build machine's PATH
# (Debian packages in the comment) and copied with their libraries.
GUEST_DIR = "/usr/share/kubicle/guest"
IMAGES = {
    # The operator talks only to the apiserver: no KVM pieces, no tools.
    "kubicle-operator": {
        "build": {"/usr/bin/kubicle-operator": "operator/kubicle-operator"},
        "tools": [],
        "files": [],
        "guest": {},
        "config": {
            "User": "65532:65532",
            "Entrypoint": ["/usr/bin/kubicle-operator"],
            "Env": ["PATH=/usr/bin"],
        },
        "description": "Kubicle operator: schedules Sandboxes onto KVM nodes",
    },
    "kubicle-node": {
        "build": {
            "/usr/bin/kubicle-node": "noderuntime/daemon/kubicle-node",
            # kubicle-node looks for kubicle-vmm beside itself (--vmm too),
            # and for kubicle-ext4 beside kubicle-vmm.
            "/usr/bin/kubicle-vmm": "vmm/kubicle-vmm",
            "/usr/bin/kubicle-ext4": "vmm/kubicle-ext4",
            "/usr/bin/kubicle-nodectl": "noderuntime/cli/kubicle-nodectl",
        },
        # ip, nft: the sandbox network (iproute2, nftables); mke2fs: new
        # workspaces; e2fsck: journal replay of a workspace (e2fsprogs).
        "tools": ["ip", "nft", "mke2fs", "e2fsck"],
        # mke2fs reads its ext4 defaults from mke2fs.conf; HTTPS downloads
        # verify servers against the system CAs (OpenSSL's default paths).
        "files": ["/etc/mke2fs.conf", "/etc/ssl/certs/ca-certificates.crt"],
        "links": {"/usr/lib/ssl/cert.pem": "/etc/ssl/certs/ca-certificates.crt",
                  "/usr/lib/ssl/certs": "/etc/ssl/certs"},
        # The default guests: the tiny test guest (the examples' template)
        # and the Linux guest agent; the Linux kernel and initramfs when
        # given (--linux-kernel, --initramfs).
        "guest": {"kubicle-testguest": "kubicle-testguest",
                  "kubicle-agent": "guest/agent/kubicle-agent"},
        "config": {
            "User": "0:0",
            "Entrypoint": ["/usr/bin/kubicle-node"],
            "Env": ["PATH=/usr/sbin:/usr/bin"],
        },
        "description": "Kubicle node daemon: runs KVM microVMs (kubicle-node, kubicle-vmm)",
    },
}
# Debian's merged /usr: the dynamic loader is /lib64/ld-linux-x86-64.so.2.
MERGED_USR = {"/bin": "usr/bin", "/sbin": "usr/sbin", "/lib": "usr/lib", "/lib64": "usr/lib64"}
TOOL_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class Error(Exception):
    pass


def shared_libraries(binary):
    """The absolute paths of the libraries `binary` loads, transitively
    (ldd resolves the whole closure as the loader would)."""
    r = subprocess.run(["ldd", binary], capture_output=True, text=True)
    if r.returncode != 0:
        if "not a dynamic executable" in r.stdout + r.stderr:
            return []
        raise Error(f"ldd {binary}: {r.stderr.strip()}")
    libs = []
    for line in r.stdout.splitlines():
        line = line.strip()
        if "not found" in line:
            raise Error(f"{binary}: {line}")
        m = re.match(r"\S+ => (/\S+) \(0x", line) or re.match(r"(/\S+) \(0x", line)
        if m:
            libs.append(m.group(1))
    return libs


def canonical(path):
    """`path` with its directory resolved (merged /usr), the name kept: the
    image holds a library under the name the loader asks for."""
    p = pathlib.Path(path)
    return str(pathlib.Path(os.path.realpath(p.parent)) / p.name)


def find_tool(name):
    found = shutil.which(name, path=TOOL_PATH)
    if not found:
        raise Error(f"{name} is not installed (scripts/install-deps.sh installs it)")
    return found


def contents(name, build_dir, linux_kernel=None, initramfs=None):
    """The image's files: {path in image: ("file", source, mode) |
    ("strip", source, mode) | ("link", target) | ("dir", mode)}."""
    spec = IMAGES[name]
    entries = {}
    elves = []
    for dest, rel in spec["build"].items():
        src = os.path.join(build_dir, rel)
        if not os.access(src, os.X_OK):
            raise Error(f"{src} is missing: build the target first (scripts/build.sh)")
        entries[dest] = ("strip", src, 0o755)
        elves.append(src)
    for tool in spec["tools"]:
        src = find_tool(tool)
        entries[canonical(src)] = ("file", os.path.realpath(src), 0o755)
        elves.append(src)
    for path in spec["files"]:
        if not os.path.isfile(path):
            raise Error(f"{path} is missing on this machine")
        entries[path] = ("file", os.path.realpath(path), 0o644)
    for dest, target in spec.get("links", {}).items():
        entries[dest] = ("link", target)
    guest = {f"{GUEST_DIR}/{n}": os.path.join(build_dir, rel) for n, rel in spec["guest"].items()}
    if spec["guest"]:
        for dest, src in (("vmlinux", linux_kernel), ("initramfs.cpio", initramfs)):
            if src:
                guest[f"{GUEST_DIR}/{dest}"] = src
    for dest, src in guest.items():
        if not os.path.isfile(src):
            raise Error(f"{src} is missing (build it first)")
        # The agent is a host ELF, stripped like the binaries; the test
        # guest is freestanding and already minimal, vmlinux is kept whole.
        kind = "strip" if dest.endswith("/kubicle-agent") else "file"
        entries[dest] = (kind, src, 0o755 if dest.endswith("/kubicle-agent") else 0o644)
    for elf in elves:
        for lib in shared_libraries(elf):
            dest = canonical(lib)
            entries[dest] = ("file", os.path.realpath(lib), 0o755 if "/ld-linux" in dest else 0o644)
    for link, target in MERGED_USR.items():
        entries[link] = ("link", target)
    entries["/tmp"] = ("dir", 0o1777)
    entries["/etc"] = ("dir", 0o755)  # the runtime mounts hosts, resolv.conf
    # Every parent directory, explicitly (a tar without them still unpacks,
    # but with default modes chosen by the unpacker).
    for path in list(entries):
        parent = os.path.dirname(path)
        while parent != "/" and parent not in entries:
            entries[parent] = ("dir", 0o755)
            parent = os.path.dirname(parent)
    return dict(sorted(entries.items()))


def stage(entries, work):
    """The bytes of each file entry, stripped where asked, cached in `work`."""
    data = {}
    for dest, e in entries.items():
        if e[0] == "strip":
            out = os.path.join(work, hashlib.sha256(dest.encode()).hexdigest())
            subprocess.run(["strip", "--strip-all", "-o", out, e[1]], check=True)
            data[dest] = out
        elif e[0] == "file":
            data[dest] = e[1]
    return data


def layer_tar(entries, data, epoch):
    """The uncompressed layer: a tar of the tree, reproducible."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dest, e in entries.items():
            info = tarfile.TarInfo(dest.lstrip("/"))
            info.mtime = epoch
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if e[0] == "dir":
                info.type, info.mode = tarfile.DIRTYPE, e[1]
                tar.addfile(info)
            elif e[0] == "link":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, e[1], 0o777
                tar.addfile(info)
            else:
                info.mode = e[2]
                info.size = os.path.getsize(data[dest])
                with open(data[dest], "rb") as f:
                    tar.addfile(info, f)
    return buf.getvalue()


def write_rootfs(entries, data, root):
    """The tree on disk, for the Containerfile's runtime stages."""
    os.makedirs(root, exist_ok=True)
    for dest, e in entries.items():
        path = root + dest
        if e[0] == "dir":
            os.makedirs(path, exist_ok=True)
            os.chmod(path, e[1])
        elif e[0] == "link":
            os.symlink(e[1], path)
        else:
            shutil.copyfile(data[dest], path)
            os.chmod(path, e[2])


def blob(blobs, content):
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    blobs[digest] = content
    return digest


def canonical_json(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def oci_layout(name, entries, data, repository, tag, epoch):
    """(index.json bytes, {digest: bytes}, manifest digest) of the image."""
    layer = layer_tar(entries, data, epoch)
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, filename="", compresslevel=9) as f:
        f.write(layer)
    blobs = {}
    layer_digest = blob(blobs, gz.getvalue())
    created = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    spec = IMAGES[name]
    labels = {
        "org.opencontainers.image.title": name,
        "org.opencontainers.image.description": spec["description"],
        "org.opencontainers.image.version": tag,
        "org.opencontainers.image.created": created,
    }
    config = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": {**spec["config"], "Labels": labels},
        "rootfs": {"type": "layers",
                   "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        "history": [{"created": created, "created_by": "scripts/build-images.sh"}],
    }
    config_bytes = canonical_json(config)
    config_digest = blob(blobs, config_bytes)
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config_bytes)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digest, "size": len(blobs[layer_digest])}],
        "annotations": {"org.opencontainers.image.title": name,
                        "org.opencontainers.image.version": tag},
    }
    manifest_bytes = canonical_json(manifest)
    manifest_digest = blob(blobs, manifest_bytes)
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": len(manifest_bytes),
            "platform": {"architecture": "amd64", "os": "linux"},
            # containerd's import names the image by the first; the OCI
            # layout's own reference is the tag (as `ctr images export`).
            "annotations": {"io.containerd.image.name": f"{repository}:{tag}",
                            "org.opencontainers.image.ref.name": tag},
        }],
    }
    return canonical_json(index), blobs, manifest_digest


def write_archive(path, index, blobs, epoch):
    """The OCI image layout as a tar: oci-layout, index.json, blobs/sha256/."""
    files = {"oci-layout": canonical_json({"imageLayoutVersion": "1.0.0"}),
             "index.json": index}
    for digest, content in blobs.items():
        files["blobs/sha256/" + digest.split(":", 1)[1]] = content
    tmp = path + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(d)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
            tar.addfile(info)
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(files[name]), 0o644, epoch
            tar.addfile(info, io.BytesIO(files[name]))
    os.replace(tmp, path)


def inputs_key(entries, repository, tag, epoch):
    """A hash of everything an archive is made from, to skip unchanged ones."""
    h = hashlib.sha256()
    for part in (pathlib.Path(__file__).read_bytes(), repository.encode(), tag.encode(),
                 str(epoch).encode(), subprocess.run(["strip", "--version"], capture_output=True).stdout):
        h.update(hashlib.sha256(part).digest())
    for dest, e in entries.items():
        h.update(canonical_json([dest, e[0]] + [x for x in e[1:] if isinstance(x, int)]))
        if e[0] in ("file", "strip"):
            with open(e[1], "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        elif e[0] == "link":
            h.update(e[1].encode())
    return h.hexdigest()


def read_names(path):
    names = {}
    for line in pathlib.Path(path).read_text().splitlines():
        if line.strip():
            image, repository = line.split()
            names[image] = repository
    if set(names) != set(IMAGES):
        raise Error(f"{path} names {sorted(names)}, want {sorted(IMAGES)}")
    return names


def human(n):
    return f"{n / (1 << 20):.1f} MiB"


def cmd_build(a, epoch):
    names = read_names(a.names)
    os.makedirs(a.out, exist_ok=True)
    for name in IMAGES:
        entries = contents(name, a.build_dir, a.linux_kernel, a.initramfs)
        path = os.path.join(a.out, f"{name}-{a.tag}.oci.tar")
        key = inputs_key(entries, names[name], a.tag, epoch)
        stamp = path + ".inputs"
        if os.path.exists(path) and os.path.exists(stamp) and pathlib.Path(stamp).read_text() == key:
            state = "unchanged"
        else:
            with tempfile.TemporaryDirectory() as work:
                index, blobs, _ = oci_layout(name, entries, stage(entries, work), names[name],
                                             a.tag, epoch)
            write_archive(path, index, blobs, epoch)
            pathlib.Path(stamp).write_text(key)
            state = "built"
        report(path, name, state)


def report(path, name, state):
    """One line per image: name, manifest digest, sizes (docs/helm.md)."""
    with tarfile.open(path) as tar:
        index = json.load(tar.extractfile("index.json"))
        desc = index["manifests"][0]
        manifest = json.load(tar.extractfile("blobs/sha256/" + desc["digest"].split(":")[1]))
        layer = manifest["layers"][0]["size"]
        with gzip.open(tar.extractfile("blobs/sha256/" + manifest["layers"][0]["digest"].split(":")[1])) as g:
            unpacked = sum(m.size for m in tarfile.open(fileobj=g, mode="r|"))
    print(f"{name}: {desc['annotations']['io.containerd.image.name']} {desc['digest']} "
          f"compressed {human(layer)}, unpacked {human(unpacked)} ({state}) -> {path}")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=["list", "rootfs", "build"])
    p.add_argument("--build-dir", required=True)
    p.add_argument("--out")
    p.add_argument("--tag")
    p.add_argument("--names")
    p.add_argument("--linux-kernel")
    p.add_argument("--initramfs")
    a = p.parse_args(argv[1:])
    if bool(a.linux_kernel) != bool(a.initramfs):
        p.error("--linux-kernel and --initramfs go together")
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    try:
        if a.command == "list":
            for name in IMAGES:
                for dest, e in contents(name, a.build_dir, a.linux_kernel, a.initramfs).items():
                    print(name, dest, e[1] if e[0] in ("file", "strip", "link") else "-")
        elif a.command == "rootfs":
            if not a.out:
                p.error("rootfs needs --out")
            for name in IMAGES:
                entries = contents(name, a.build_dir, a.linux_kernel, a.initramfs)
                with tempfile.TemporaryDirectory() as work:
                    write_rootfs(entries, stage(entries, work), os.path.join(a.out, name))
        else:
            if not (a.out and a.tag and a.names):
                p.error("build needs --out, --tag and --names")
            cmd_build(a, epoch)
    except (Error, subprocess.CalledProcessError) as e:
        print(f"oci_image.py: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
