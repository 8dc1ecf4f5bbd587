#!/usr/bin/env python3
"""Builds an OCI image and pushes it to a registry with the distribution
API (monolithic blob uploads), for tests: no container engine needed.

Layers come from directories or from explicit tar entries, so a test can
make any layer, hostile ones included ("../" paths, absolute paths, device
nodes, whiteouts, hard links, huge files of zeros that stream from disk):

  push_image.py --registry 127.0.0.1:5000 --repo team/py --tag 1 \\
      [--ca ca.pem] [--user U --password P] [--insecure] \\
      [--layer-tar FILE]... [--layer-dir DIR]... [--layer-entries entries.json]... \\
      [--gzip] \\
      [--env K=V]... [--entrypoint '["/bin/sh"]'] [--cmd '[...]'] \\
      [--workdir /app] [--config-user 1000] \\
      [--index linux/amd64,linux/arm64] [--docker]

Layers are applied in this order: tar files made elsewhere (--layer-tar,
pushed byte for byte; gzip'd ones with --gzip, which applies to every
layer), directories, entry files, each kind in the order given. An entries
file is a JSON list of {"path": "etc/x", "type": "file"|"dir"|"symlink"|"hardlink"|"char"|"block"
 |"fifo", "data": "text" | "size": N (zeros), "mode": 420, "uid": 0,
 "gid": 0, "link": "target", "devmajor": 1, "devminor": 3}; paths are
written exactly as given (nothing is cleaned). A whiteout is a file named
".wh.<name>" (".wh..wh..opq" for an opaque directory).

--index wraps the manifest in an OCI image index with one entry per
platform, all naming the same manifest (a platform list without
linux/amd64 makes an index the node must refuse). --docker uses the Docker
v2 media types instead of OCI's. --insecure: plain http.

Prints one JSON line: {"reference", "manifest_digest", "index_digest",
"config_digest", "layers": [{"digest", "size"}]}.

From Python: `push(registry, repo, tag, layers=[path_of_tar_or_tgz, ...],
...)` and `layer_from_dir` / `layer_from_entries` (see below).
"""
import argparse
import base64
import gzip
import hashlib
import io
import json
import os
import ssl
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"


class _Zeros(io.RawIOBase):
    """n zero bytes, read lazily (a huge file costs no memory)."""

    def __init__(self, n):
        self.left = n

    def readable(self):
        return True

    def readinto(self, b):
        k = min(len(b), self.left)
        b[:k] = bytes(k)
        self.left -= k
        return k


_TYPES = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
          "hardlink": tarfile.LNKTYPE, "char": tarfile.CHRTYPE, "block": tarfile.BLKTYPE,
          "fifo": tarfile.FIFOTYPE}


def _open_layer(out_path, gz):
    raw = open(out_path, "wb")
    return raw, (gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if gz else raw)


def layer_from_entries(entries, out_path, gz=False):
    """Writes a tar (gzip when gz) of the given entries to out_path."""
    raw, f = _open_layer(out_path, gz)
    with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            ti = tarfile.TarInfo(e["path"])
            ti.type = _TYPES[e.get("type", "file")]
            ti.mode = e.get("mode", 0o755 if ti.type == tarfile.DIRTYPE else 0o644)
            ti.uid, ti.gid, ti.mtime = e.get("uid", 0), e.get("gid", 0), 0
            ti.linkname = e.get("link", "")
            ti.devmajor, ti.devminor = e.get("devmajor", 0), e.get("devminor", 0)
            body = None
            if ti.type == tarfile.REGTYPE:
                if "data" in e:
                    data = e["data"].encode()
                    ti.size, body = len(data), io.BytesIO(data)
                else:
                    ti.size = e.get("size", 0)
                    body = io.BufferedReader(_Zeros(ti.size), 1 << 20)
            tar.addfile(ti, body)
    if f is not raw:
        f.close()
    raw.close()


def layer_from_dir(src, out_path, gz=False):
    """A tar of the directory's contents (relative paths, owners 0, mtime 0)."""
    def norm(ti):
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        ti.mtime = 0
        return ti

    raw, f = _open_layer(out_path, gz)
    with tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for root, dirs, files in os.walk(src):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                full = os.path.join(root, name)
                tar.add(full, arcname=os.path.relpath(full, src), recursive=False, filter=norm)
    if f is not raw:
        f.close()
    raw.close()


def _sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest(), os.path.getsize(path)


class Client:
    def __init__(self, registry, insecure=False, ca=None, user=None, password=None):
        self.base = ("http://" if insecure else "https://") + registry
        self.ctx = None if insecure else ssl.create_default_context(cafile=ca)
        self.auth = None
        if user:
            self.auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def request(self, method, url, data=None, headers=None):
        if url.startswith("/"):
            url = self.base + url
        req = urllib.request.Request(url, data=data, method=method, headers=dict(headers or {}))
        if self.auth:
            req.add_header("Authorization", self.auth)
        return urllib.request.urlopen(req, context=self.ctx, timeout=300)

    def push_blob(self, repo, path):
        digest, size = _sha256_file(path)
        try:
            self.request("HEAD", f"/v2/{repo}/blobs/{digest}")
            return digest, size  # already there
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise
        loc = self.request("POST", f"/v2/{repo}/blobs/uploads/").headers["Location"]
        if loc.startswith("/"):
            loc = self.base + loc
        loc += ("&" if "?" in loc else "?") + "digest=" + digest
        with open(path, "rb") as f:
            self.request("PUT", loc, data=f, headers={"Content-Type": "application/octet-stream",
                                                      "Content-Length": str(size)})
        return digest, size

    def push_bytes(self, repo, data):
        with tempfile.NamedTemporaryFile() as t:
            t.write(data)
            t.flush()
            return self.push_blob(repo, t.name)

    def put_manifest(self, repo, ref, body, media_type):
        self.request("PUT", f"/v2/{repo}/manifests/{ref}", data=body,
                     headers={"Content-Type": media_type})
        return "sha256:" + hashlib.sha256(body).hexdigest()


def push(registry, repo, tag, layers, gz=False, env=(), entrypoint=None, cmd=None, workdir="",
         config_user="", index=None, docker=False, insecure=False, ca=None, user=None,
         password=None):
    """layers: paths of tar files (gzip'd when gz). Returns the printed dict."""
    c = Client(registry, insecure, ca, user, password)
    layer_type = (DOCKER_LAYER if docker else OCI_LAYER) + (".gzip" if docker and gz else "+gzip" if gz else "")
    descs, diff_ids = [], []
    for path in layers:
        digest, size = c.push_blob(repo, path)
        descs.append({"mediaType": layer_type, "digest": digest, "size": size})
        opener = gzip.open if gz else open
        h = hashlib.sha256()
        with opener(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        diff_ids.append("sha256:" + h.hexdigest())
    cfg = {"architecture": "amd64", "os": "linux",
           "config": {"Env": list(env), "Entrypoint": entrypoint, "Cmd": cmd,
                      "WorkingDir": workdir, "User": config_user},
           "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    cfg_bytes = json.dumps(cfg, sort_keys=True).encode()
    cfg_digest, cfg_size = c.push_bytes(repo, cfg_bytes)
    mtype = DOCKER_MANIFEST if docker else OCI_MANIFEST
    manifest = {"schemaVersion": 2, "mediaType": mtype,
                "config": {"mediaType": DOCKER_CONFIG if docker else OCI_CONFIG,
                           "digest": cfg_digest, "size": cfg_size},
                "layers": descs}
    body = json.dumps(manifest, sort_keys=True).encode()
    out = {"reference": f"{registry}/{repo}:{tag}", "config_digest": cfg_digest,
           "layers": [{"digest": d["digest"], "size": d["size"]} for d in descs],
           "index_digest": None}
    if not index:
        out["manifest_digest"] = c.put_manifest(repo, tag, body, mtype)
        return out
    out["manifest_digest"] = c.put_manifest(repo, "sha256:" + hashlib.sha256(body).hexdigest(), body, mtype)
    entries = []
    for platform in index:
        os_, arch = platform.split("/", 1)
        entries.append({"mediaType": mtype, "digest": out["manifest_digest"], "size": len(body),
                        "platform": {"os": os_, "architecture": arch}})
    itype = DOCKER_LIST if docker else OCI_INDEX
    ibody = json.dumps({"schemaVersion": 2, "mediaType": itype, "manifests": entries}).encode()
    out["index_digest"] = c.put_manifest(repo, tag, ibody, itype)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--registry", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--tag", default="latest")
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--ca")
    ap.add_argument("--user")
    ap.add_argument("--password")
    ap.add_argument("--layer-tar", action="append", default=[])
    ap.add_argument("--layer-dir", action="append", default=[])
    ap.add_argument("--layer-entries", action="append", default=[])
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--env", action="append", default=[])
    ap.add_argument("--entrypoint")
    ap.add_argument("--cmd")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--config-user", default="")
    ap.add_argument("--index")
    ap.add_argument("--docker", action="store_true")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kubicle-push-") as tmp:
        # Tar files made elsewhere first, then directories, then entry files,
        # each in the order given.
        layers = [os.path.abspath(t) for t in a.layer_tar]
        for i, d in enumerate(a.layer_dir):
            p = os.path.join(tmp, f"dir{i}.tar")
            layer_from_dir(d, p, a.gzip)
            layers.append(p)
        for i, e in enumerate(a.layer_entries):
            p = os.path.join(tmp, f"entries{i}.tar")
            with open(e) as f:
                layer_from_entries(json.load(f), p, a.gzip)
            layers.append(p)
        out = push(a.registry, a.repo, a.tag, layers, gz=a.gzip, env=a.env,
                   entrypoint=json.loads(a.entrypoint) if a.entrypoint else None,
                   cmd=json.loads(a.cmd) if a.cmd else None, workdir=a.workdir,
                   config_user=a.config_user, index=a.index.split(",") if a.index else None,
                   docker=a.docker, insecure=a.insecure, ca=a.ca, user=a.user, password=a.password)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
