#!/usr/bin/env python3
"""Tests of Kubicle's images (docs/helm.md, "Images").

  images_test.py containerfile
      images/Containerfile agrees with images/oci_image.py: the build
      stage builds every target whose output an image holds and installs
      the Debian packages of the tools it copies, runs `oci_image.py rootfs`;
      one runtime stage per image copies that image's tree and sets the
      same entrypoint, user, PATH and labels as the OCI archives, and the
      VERSION default is the chart's appVersion, which values.yaml does not
      override with a tag of its own.
  images_test.py containerd BUILD_DIR
      the archives scripts/build-images.sh writes, imported into a containerd of the test's own with `ctr images import`, are
      listed under the chart's names, and each image's programs run in it
      as containers (ctr run: the image's config, runc).
  images_test.py build BUILD_DIR
      scripts/build-images.sh run twice into two directories gives the same
      manifest digests and the same archive bytes; a third run into the
      first is a no-op ("unchanged"); each archive is a valid OCI image
      layout (every blob's digest and size, the config's diff_id is the
      uncompressed layer's digest) named <values.yaml repository>:<appVersion>
      for containerd and OCI; and each image's programs run from the image's
      own tree (its ldd closure is complete), which a tree missing a library
      must fail; a Linux guest kernel and initramfs given go into the node
      image only.

Exit status: 0 pass, 1 fail, 77 skipped (no user namespaces for the run
check; not root or no containerd for the containerd check). Run by CTest as
images_containerfile and images_reproducible (label unit) and
images_containerd (label e2e), images/CMakeLists.txt.
"""

import gzip
import hashlib
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile

import yaml

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "images"))
import oci_image  # noqa: E402

SKIP = 77


class Failure(Exception):
    pass


def chart():
    app = yaml.safe_load((REPO / "helm/kubicle/Chart.yaml").read_text())["appVersion"]
    image = yaml.safe_load((REPO / "helm/kubicle/values.yaml").read_text())["image"]
    names = {f"kubicle-{c}": f"{image[c]['repository']}:{app}" for c in ("operator", "node")}
    return app, names


# ---- containerfile ----------------------------------------------------------

def stages(text):
    """{stage name: [instruction lines, continuations joined]}."""
    text = re.sub(r"\\\n", " ", text)
    out, current = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"FROM\s+\S+\s+AS\s+(\S+)$", line, re.I)
        if m:
            current = m.group(1)
            out[current] = []
        elif current:
            out[current].append(line)
    return out


def instruction(lines, word):
    return [l[len(word):].strip() for l in lines if l.split()[0].upper() == word]


def package_of(path):
    """The Debian package that ships `path` (dpkg -S, following merged /usr)."""
    for candidate in (path, os.path.realpath(path), path.replace("/usr/", "/", 1)):
        r = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.split(":")[0].strip()
    raise Failure(f"no Debian package ships {path}")


def check_containerfile():
    text = (REPO / "images/Containerfile").read_text()
    st = stages(text)
    app, _ = chart()
    # The chart pulls the tag the images get: appVersion, with no tag pinned
    # in values (chart_image_tag renders it with helm).
    tag = yaml.safe_load((REPO / "helm/kubicle/values.yaml").read_text())["image"]["tag"]
    if tag not in ("", None):
        raise Failure(f"helm/kubicle/values.yaml pins image.tag {tag!r}; the images are tagged "
                      f"with appVersion {app!r}: leave it empty")
    want_stages = ["build"] + list(oci_image.IMAGES)
    if list(st) != want_stages:
        raise Failure(f"Containerfile stages {list(st)}, want {want_stages}")
    build = " ".join(st["build"])
    # Targets: every build output an image holds, by its target name.
    targets = set()
    for line in st["build"]:
        m = re.search(r"ninja -C /build ([\w\s-]+)", line)
        if m:
            targets |= set(m.group(1).split())
    outputs = set()
    for spec in oci_image.IMAGES.values():
        outputs |= {pathlib.Path(rel).name for rel in spec["build"].values()}
        outputs |= {pathlib.Path(rel).name for rel in spec["guest"].values()}
    if targets != outputs:
        raise Failure(f"the build stage builds {sorted(targets)}; the images hold {sorted(outputs)}")
    # Packages: those of the copied tools, strip, python3 and the CAs.
    apt = set(re.search(r"apt-get install[^&]*", build).group(0).split())
    tools = {package_of(oci_image.find_tool(t)) for s in oci_image.IMAGES.values() for t in s["tools"]}
    needed = tools | {"binutils", "python3", "python3-yaml", "ca-certificates",
                      package_of("/etc/mke2fs.conf")}
    if not needed <= apt:
        raise Failure(f"the build stage does not install {sorted(needed - apt)}")
    if "python3 images/oci_image.py rootfs --build-dir /build --out /rootfs" not in build:
        raise Failure("the build stage does not run `oci_image.py rootfs` into /rootfs")
    for name, spec in oci_image.IMAGES.items():
        lines = st[name]
        if instruction(lines, "COPY") != [f"--from=build /rootfs/{name}/ /"]:
            raise Failure(f"stage {name} copies {instruction(lines, 'COPY')}, "
                          f"want only /rootfs/{name}/")
        cfg = spec["config"]
        entry = instruction(lines, "ENTRYPOINT")
        if [json.loads(e) for e in entry] != [cfg["Entrypoint"]]:
            raise Failure(f"stage {name} ENTRYPOINT {entry}, want {cfg['Entrypoint']}")
        if instruction(lines, "USER") != [cfg["User"]]:
            raise Failure(f"stage {name} USER {instruction(lines, 'USER')}, want {cfg['User']}")
        if instruction(lines, "ENV") != cfg["Env"]:
            raise Failure(f"stage {name} ENV {instruction(lines, 'ENV')}, want {cfg['Env']}")
        if instruction(lines, "ARG") != [f"VERSION={app}"]:
            raise Failure(f"stage {name}: ARG {instruction(lines, 'ARG')}, want VERSION={app} "
                          "(the chart's appVersion)")
        labels = dict(re.findall(r'(\S+)="([^"]*)"', " ".join(instruction(lines, "LABEL"))))
        want = {"org.opencontainers.image.title": name,
                "org.opencontainers.image.description": spec["description"],
                "org.opencontainers.image.version": "${VERSION}"}
        if labels != want:
            raise Failure(f"stage {name} labels {labels}, want {want}")
    print(f"ok   Containerfile: stages {want_stages}, targets {sorted(targets)}, "
          f"tool packages {sorted(tools)}")


# ---- build ------------------------------------------------------------------

def build_images(build_dir, out):
    env = {**os.environ, "SOURCE_DATE_EPOCH": "0"}
    # The Linux guest is whatever the machine has cached; the same both times.
    r = subprocess.run([str(REPO / "scripts/build-images.sh"), build_dir, out],
                       capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise Failure(f"scripts/build-images.sh failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def read_layout(path):
    """(index, manifest, config, layer bytes) of an archive, every blob checked."""
    with tarfile.open(path) as tar:
        names = set(tar.getnames())
        if json.load(tar.extractfile("oci-layout")) != {"imageLayoutVersion": "1.0.0"}:
            raise Failure(f"{path}: bad oci-layout")
        blobs = {}
        for n in names:
            if n.startswith("blobs/sha256/") and tar.getmember(n).isfile():
                data = tar.extractfile(n).read()
                if hashlib.sha256(data).hexdigest() != n.rsplit("/", 1)[1]:
                    raise Failure(f"{path}: blob {n} does not match its digest")
                blobs["sha256:" + n.rsplit("/", 1)[1]] = data
        index = json.load(tar.extractfile("index.json"))

    def get(desc):
        data = blobs.get(desc["digest"])
        if data is None or len(data) != desc["size"]:
            raise Failure(f"{path}: blob {desc['digest']} missing or of the wrong size")
        return data

    (mdesc,) = index["manifests"]
    manifest = json.loads(get(mdesc))
    config = json.loads(get(manifest["config"]))
    (ldesc,) = manifest["layers"]
    layer = gzip.decompress(get(ldesc))
    if config["rootfs"]["diff_ids"] != ["sha256:" + hashlib.sha256(layer).hexdigest()]:
        raise Failure(f"{path}: the config's diff_id is not the uncompressed layer's digest")
    return index, manifest, config, layer


def unpack(layer, root):
    with tarfile.open(fileobj=__import__("io").BytesIO(layer)) as tar:
        for m in tar.getmembers():
            if m.uid != 0 or m.gid != 0 or m.mtime != 0:
                raise Failure(f"layer entry {m.name}: owner {m.uid}:{m.gid} mtime {m.mtime}")
        tar.extractall(root)


# What runs in each image, from its own root, and what it must print.
RUNS = {
    "kubicle-operator": [(["/usr/bin/kubicle-operator", "--check-flags"], "kubicle-operator: flags ok")],
    "kubicle-node": [
        # --vmm and --advertise-address given: no /proc or hostname needed.
        (["/usr/bin/kubicle-node", "serve", "--state-dir=/s", "--vmm=/usr/bin/kubicle-vmm",
          "--advertise-address=10.0.0.7", "--check-flags"], "kubicle-node: flags ok"),
        (["/usr/bin/kubicle-vmm", "--help"], "kubicle-vmm"),
        (["/usr/bin/kubicle-nodectl", "--help"], "kubicle-nodectl"),
        (["/usr/sbin/ip", "-V"], "iproute2"),
        (["/usr/sbin/nft", "--version"], "nftables"),
        (["/usr/sbin/mke2fs", "-V"], "mke2fs"),
        (["/usr/sbin/e2fsck", "-V"], "e2fsck"),
    ],
}


def run_in(root, argv):
    return subprocess.run(["unshare", "--user", "--map-root-user", "--root", root] + argv,
                          capture_output=True, text=True, timeout=60)


def check_runs(name, root):
    for argv, want in RUNS[name]:
        r = run_in(root, argv)
        out = r.stdout + r.stderr
        if want not in out or "error while loading shared libraries" in out:
            raise Failure(f"{name}: {' '.join(argv)} in the image's tree (exit {r.returncode}) "
                          f"does not print {want!r}:\n{out}")
    for path in ("/usr/share/kubicle/guest/kubicle-testguest", "/usr/share/kubicle/guest/kubicle-agent"):
        if name == "kubicle-node" and not os.path.isfile(root + path):
            raise Failure(f"kubicle-node lacks {path}")


def check_linux_guest(build_dir, tmp):
    """The Linux guest files given go into the node image only, and change
    its inputs (so a kernel cached later rebuilds the image)."""
    kernel, initramfs = os.path.join(tmp, "vmlinux"), os.path.join(tmp, "initramfs.cpio")
    pathlib.Path(kernel).write_bytes(b"\x7fELF kernel")
    pathlib.Path(initramfs).write_bytes(b"070701 cpio")
    plain = oci_image.contents("kubicle-node", build_dir)
    linux = oci_image.contents("kubicle-node", build_dir, kernel, initramfs)
    added = {d: e for d, e in linux.items() if d not in plain}
    want = {f"{oci_image.GUEST_DIR}/vmlinux": ("file", kernel, 0o644),
            f"{oci_image.GUEST_DIR}/initramfs.cpio": ("file", initramfs, 0o644)}
    if added != want:
        raise Failure(f"with the Linux guest the node image adds {added}, want {want}")
    if oci_image.contents("kubicle-operator", build_dir, kernel, initramfs) != \
            oci_image.contents("kubicle-operator", build_dir):
        raise Failure("the Linux guest went into the operator's image")
    if oci_image.inputs_key(plain, "r", "t", 0) == oci_image.inputs_key(linux, "r", "t", 0):
        raise Failure("the node image's inputs do not change with the Linux guest")
    print(f"ok   the Linux guest goes to {oci_image.GUEST_DIR} in the node image only")


def check_build(build_dir):
    if subprocess.run(["unshare", "--user", "--map-root-user", "true"]).returncode != 0:
        print("SKIP: no user namespaces here (unshare --user): cannot run the images' programs")
        return SKIP
    app, names = chart()
    with tempfile.TemporaryDirectory() as tmp:
        a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
        print(build_images(build_dir, a), end="")
        build_images(build_dir, b)
        again = build_images(build_dir, a)
        if again.count("(unchanged)") != len(oci_image.IMAGES):
            raise Failure(f"a second build of unchanged inputs rebuilt:\n{again}")
        for name in oci_image.IMAGES:
            file = f"{name}-{app}.oci.tar"
            pa, pb = os.path.join(a, file), os.path.join(b, file)
            index, manifest, config, layer = read_layout(pa)
            index_b = read_layout(pb)[0]
            if index["manifests"][0]["digest"] != index_b["manifests"][0]["digest"]:
                raise Failure(f"{name}: two builds of the same inputs gave different manifests")
            if pathlib.Path(pa).read_bytes() != pathlib.Path(pb).read_bytes():
                raise Failure(f"{name}: two builds of the same inputs gave different archives")
            ann = index["manifests"][0]["annotations"]
            want = {"io.containerd.image.name": names[name], "org.opencontainers.image.ref.name": app}
            if ann != want:
                raise Failure(f"{name}: index annotations {ann}, want {want}")
            if config["config"]["Entrypoint"] != oci_image.IMAGES[name]["config"]["Entrypoint"]:
                raise Failure(f"{name}: entrypoint {config['config']['Entrypoint']}")
            root = os.path.join(tmp, "root-" + name)
            unpack(layer, root)
            check_runs(name, root)
            print(f"ok   {name}: {names[name]} {index['manifests'][0]['digest']} twice, "
                  "valid layout, programs run from the image's tree")
        check_linux_guest(build_dir, tmp)
        # The run check can fail: without libc the node cannot start.
        root = os.path.join(tmp, "root-kubicle-node")
        os.remove(os.path.join(root, "usr/lib/x86_64-linux-gnu/libc.so.6"))
        try:
            check_runs("kubicle-node", root)
        except Failure:
            print("ok   a tree without libc.so.6 fails the run check")
        else:
            raise Failure("the run check passed on a tree without libc.so.6")
    return 0


# ---- containerd --------------------------------------------------------------

def check_containerd(build_dir):
    """The archives scripts/build-images.sh writes, in a containerd of the
    test's own: imported under the chart's names, their
    programs run as containers with the images' own entrypoint and user."""
    if os.geteuid() != 0 or not shutil.which("containerd") or not shutil.which("ctr"):
        print("SKIP: needs root and containerd (Debian's containerd: scripts/install-deps.sh)")
        return SKIP
    app, names = chart()
    with tempfile.TemporaryDirectory(prefix="kubicle-ctd-") as tmp:
        sock = os.path.join(tmp, "containerd.sock")
        config = os.path.join(tmp, "config.toml")
        # CRI off: no kubelet talks to it; containers run through ctr.
        pathlib.Path(config).write_text(
            f'version = 2\nroot = "{tmp}/root"\nstate = "{tmp}/state"\n'
            'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
            f'[grpc]\n  address = "{sock}"\n')
        log = open(os.path.join(tmp, "containerd.log"), "w")
        daemon = subprocess.Popen(["containerd", "-c", config], stdout=log, stderr=log)
        ctr = ["ctr", "-a", sock, "-n", "k8s.io"]
        try:
            build_images(build_dir, os.path.join(tmp, "images"))
            for _ in range(100):
                if subprocess.run(ctr + ["version"], capture_output=True).returncode == 0:
                    break
                __import__("time").sleep(0.1)
            for name in oci_image.IMAGES:
                archive = os.path.join(tmp, "images", f"{name}-{app}.oci.tar")
                r = subprocess.run(ctr + ["images", "import", archive], capture_output=True, text=True)
                if r.returncode != 0:
                    raise Failure(f"ctr images import {archive}: {r.stdout}{r.stderr}")
            listed = subprocess.run(ctr + ["images", "ls", "-q"], capture_output=True,
                                    text=True).stdout.split()
            if sorted(listed) != sorted(names.values()):
                raise Failure(f"containerd imported {listed}, want {sorted(names.values())}")
            for name, runs in RUNS.items():
                for i, (argv, want) in enumerate(runs):
                    cmd = ctr + ["run", "--rm", names[name], f"t-{name}-{i}"] + argv
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                    if r.returncode != 0 or want not in r.stdout + r.stderr:
                        raise Failure(f"{name}: {' '.join(argv)} in containerd (exit {r.returncode}) "
                                      f"does not print {want!r}:\n{r.stdout}{r.stderr}")
            print(f"ok   containerd imported {sorted(listed)}; every program ran in its image")
        finally:
            daemon.terminate()
            daemon.wait(timeout=30)
            log.close()
            subprocess.run(["umount", "-R", os.path.join(tmp, "root")], capture_output=True)
    return 0


def main(argv):
    try:
        if argv[1:] == ["containerfile"]:
            check_containerfile()
            return 0
        if len(argv) == 3 and argv[1] == "build":
            return check_build(argv[2])
        if len(argv) == 3 and argv[1] == "containerd":
            return check_containerd(argv[2])
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    except Failure as e:
        print(f"FAIL: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
