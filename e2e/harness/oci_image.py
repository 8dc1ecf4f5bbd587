#!/usr/bin/env python3
"""Writes a one-layer OCI image archive (an image layout as a tar) for the
e2e harness's kubelet node, daemonless and reproducibly: fixed timestamps,
owners and order, an uncompressed layer, so the same inputs give the same
digest. `ctr -n k8s.io images import` names the image from the index's
io.containerd.image.name annotation.

  oci_image.py --name kubicle.dev/e2e/busybox:1 --out busybox.tar \
      --file /bin/busybox:/bin/busybox --symlink /bin/sh:busybox \
      --entrypoint '["/bin/sleep", "2147483647"]'
"""
import argparse
import hashlib
import io
import json
import tarfile


def tar_bytes(entries):
    """entries: list of TarInfo, bytes-or-None, in order; returns the tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def info(name, kind, size=0, mode=0o755, link=""):
    ti = tarfile.TarInfo(name)
    ti.type, ti.size, ti.mode, ti.linkname = kind, size, mode, link
    ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "", ""
    return ti


def layer(files, symlinks):
    paths = {}
    for src, dest in files:
        with open(src, "rb") as f:
            paths[dest.lstrip("/")] = ("file", f.read())
    for dest, target in symlinks:
        paths[dest.lstrip("/")] = ("link", target)
    dirs = set()
    for p in paths:
        parts = p.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    entries = [(info(d, tarfile.DIRTYPE), None) for d in sorted(dirs)]
    for p in sorted(paths):
        kind, v = paths[p]
        if kind == "file":
            entries.append((info(p, tarfile.REGTYPE, len(v)), v))
        else:
            entries.append((info(p, tarfile.SYMTYPE, link=v, mode=0o777), None))
    return tar_bytes(entries)


def blob(data):
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--file", action="append", default=[], help="SRC:DEST")
    ap.add_argument("--symlink", action="append", default=[], help="DEST:TARGET")
    ap.add_argument("--entrypoint", default="null")
    ap.add_argument("--cmd", default="null")
    a = ap.parse_args()

    layer_digest, layer_data = blob(layer([f.split(":", 1) for f in a.file],
                                          [s.split(":", 1) for s in a.symlink]))
    config = {
        "architecture": "amd64", "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"Env": ["PATH=/bin:/usr/bin:/sbin:/usr/sbin"],
                   "Entrypoint": json.loads(a.entrypoint), "Cmd": json.loads(a.cmd)},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }
    config_digest, config_data = blob(json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config_data)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": len(layer_data)}],
    }
    manifest_digest, manifest_data = blob(json.dumps(manifest, sort_keys=True).encode())
    tag = a.name.rsplit(":", 1)[1] if ":" in a.name.rsplit("/", 1)[-1] else "latest"
    index = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": manifest["mediaType"], "digest": manifest_digest,
                       "size": len(manifest_data),
                       "annotations": {"io.containerd.image.name": a.name,
                                       "org.opencontainers.image.ref.name": tag}}],
    }
    entries = [(info("blobs", tarfile.DIRTYPE), None),
               (info("blobs/sha256", tarfile.DIRTYPE), None)]
    for d, data in sorted([(layer_digest, layer_data), (config_digest, config_data),
                           (manifest_digest, manifest_data)]):
        entries.append((info("blobs/sha256/" + d.split(":")[1], tarfile.REGTYPE,
                             len(data), 0o644), data))
    for name, obj in (("index.json", index), ("oci-layout", {"imageLayoutVersion": "1.0.0"})):
        data = json.dumps(obj, sort_keys=True).encode()
        entries.append((info(name, tarfile.REGTYPE, len(data), 0o644), data))
    with open(a.out, "wb") as f:
        f.write(tar_bytes(entries))


if __name__ == "__main__":
    main()
