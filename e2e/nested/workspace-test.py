#!/usr/bin/env python3
"""linux tier: a workspace with the python Linux guest, through kubicle-node,
inside the nested test host (docs/workspaces.md).

kubicle-node bakes the python template (its snapshot has the workspace slot),
a 64 MiB workspace is made and a seed file written into it by the host
(through kubicle-ext4, no VM); a sandbox with the workspace runs python,
which reads the seed at /workspace and writes /workspace/out/x.txt; the
sandbox is deleted; the file is read back through the data plane with the
workspace's own token while no VM runs. Then a per-call run with the
workspace appends to the file, and the host reads it again. Last, a
sandbox's VMM is killed right after python fsyncs a file on the mounted
workspace: the host's next read replays the journal and returns it.

    run-in-testhost.py -- e2e/nested/workspace-test.py BUILD_DIR IMAGES_ENV
(IMAGES_ENV: prepare-images.sh's KUBICLE_LINUX_*=PATH lines).
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

build = os.path.realpath(sys.argv[1])
images = {}
for line in open(sys.argv[2]):
    k, _, v = line.strip().partition("=")
    if k.startswith("KUBICLE_LINUX_"):
        images[k] = v.strip("'\"")
state = tempfile.mkdtemp(prefix="kubicle-ws-")


def say(msg):
    print(f"workspace-test: {msg}", flush=True)


def call(method, path, token, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def must(status_body, *ok):
    status, body = status_body
    if status not in ok:
        raise SystemExit(f"workspace-test: FAIL: HTTP {status}: {body[:500]!r}")
    return body


s = socket.socket()
s.bind(("127.0.0.1", 0))
port = s.getsockname()[1]
s.close()
URL = f"http://127.0.0.1:{port}"
token_file = os.path.join(state, "admin.token")
log = open(os.path.join(state, "node.log"), "w")
node = subprocess.Popen([f"{build}/noderuntime/daemon/kubicle-node", "serve",
                         "--state-dir", f"{state}/node", "--listen", f"127.0.0.1:{port}",
                         "--token-file", token_file, "--vmm", f"{build}/vmm/kubicle-vmm",
                         "--stop-vms-on-exit"], stdout=log, stderr=subprocess.STDOUT)
try:
    deadline = time.time() + 60
    while not os.path.exists(token_file) or call("GET", "/v1/templates", "x")[0] != 401:
        if node.poll() is not None or time.time() > deadline:
            raise SystemExit("workspace-test: FAIL: kubicle-node did not start")
        time.sleep(0.1)
    admin = open(token_file).read().strip()
    env = images
    t0 = time.time()
    must(call("PUT", "/v1/templates/py", admin, {
        "kernel": env["KUBICLE_LINUX_KERNEL"], "initrd": env["KUBICLE_LINUX_INITRAMFS"],
        "disks": [env["KUBICLE_LINUX_ROOTFS_PYTHON"] + ",ro"], "memMib": 512, "vcpus": 1,
        "cmdline": "console=ttyS0 quiet reboot=k panic=1 kubicle.overlay=tmpfs",
        "warmup": ["python3 -c 'import json'"]}), 200, 202)
    while True:
        t = json.loads(must(call("GET", "/v1/templates/py", admin), 200))
        if t["state"] != "Baking":
            break
        time.sleep(0.5)
    if t["state"] != "Ready" or not t.get("workspaceSlot"):
        raise SystemExit(f"workspace-test: FAIL: template {t}")
    say(f"template baked in {time.time() - t0:.1f} s")

    ws = json.loads(must(call("PUT", "/v1/workspaces/ws1", admin, {"sizeMiB": 64}), 201))
    wtok = ws["token"]
    must(call("PUT", "/v1/workspaces/ws1/files?path=/seed.txt", wtok, raw=b"seed from the host\n"), 200)
    sb = json.loads(must(call("POST", "/v1/sandboxes", admin,
                              {"template": "py", "workspace": "ws1"}), 201))
    say(f"sandbox {sb['id']} runs with workspace ws1")
    # One writer: the host may not touch it now.
    st, body = call("GET", "/v1/workspaces/ws1/files?path=/seed.txt", wtok)
    if st != 409:
        raise SystemExit(f"workspace-test: FAIL: host read while attached: {st} {body!r}")
    prog = ("import os; print(open('/workspace/seed.txt').read().strip()); "
            "os.makedirs('/workspace/out', exist_ok=True); "
            "open('/workspace/out/x.txt', 'w').write('written by python in the guest\\n')")
    r = json.loads(must(call("POST", f"/v1/sandboxes/{sb['id']}/exec", sb["token"],
                             {"shell": f"python3 -c \"{prog}\"", "timeoutSeconds": 120}), 200))
    if r["exitCode"] != 0 or "seed from the host" not in r["stdout"]:
        raise SystemExit(f"workspace-test: FAIL: python in the guest: {r}")
    r = json.loads(must(call("POST", f"/v1/sandboxes/{sb['id']}/exec", sb["token"],
                             {"shell": "grep ' /workspace ' /proc/mounts"}), 200))
    say(f"guest mount: {r['stdout'].strip()}")
    must(call("DELETE", f"/v1/sandboxes/{sb['id']}", admin), 200)

    # No VM runs: the data plane reads the guest's file through kubicle-ext4.
    got = must(call("GET", "/v1/workspaces/ws1/files?path=/out/x.txt", wtok), 200)
    if got != b"written by python in the guest\n":
        raise SystemExit(f"workspace-test: FAIL: read back {got!r}")
    ls = json.loads(must(call("GET", "/v1/workspaces/ws1/ls?path=/out", wtok), 200))
    say(f"read back through the data plane: {got!r}; /out has {[i['name'] for i in ls['items']]}")

    # A per-call run with the workspace.
    r = json.loads(must(call("POST", "/v1/templates/py/run", admin, {
        "shell": "cat /workspace/out/x.txt && echo appended by a run >> /workspace/out/x.txt",
        "workspace": "ws1", "timeoutSeconds": 120}), 200))
    if r["exitCode"] != 0 or "written by python" not in r["stdout"]:
        raise SystemExit(f"workspace-test: FAIL: run: {r}")
    got = must(call("GET", "/v1/workspaces/ws1/files?path=/out/x.txt", wtok), 200)
    if got != b"written by python in the guest\nappended by a run\n":
        raise SystemExit(f"workspace-test: FAIL: after the run {got!r}")
    say(f"per-call run with the workspace: timings {r['timings']}")

    # A VMM killed with the workspace mounted leaves its journal to replay:
    # the next host read replays it (confined e2fsck) and sees the write.
    sb = json.loads(must(call("POST", "/v1/sandboxes", admin,
                              {"template": "py", "workspace": "ws1"}), 201))
    prog = ("import os; f = open('/workspace/out/crash.txt', 'w'); "
            "f.write('synced before the crash\\n'); f.flush(); os.fsync(f.fileno())")
    r = json.loads(must(call("POST", f"/v1/sandboxes/{sb['id']}/exec", sb["token"],
                             {"shell": f"python3 -c \"{prog}\"", "timeoutSeconds": 120}), 200))
    if r["exitCode"] != 0:
        raise SystemExit(f"workspace-test: FAIL: python before the crash: {r}")
    os.kill(sb["vmmPid"], 9)
    deadline = time.monotonic() + 60
    while json.loads(must(call("GET", "/v1/workspaces/ws1", wtok), 200)).get("attachedTo") and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    got = must(call("GET", "/v1/workspaces/ws1/files?path=/out/crash.txt", wtok), 200)
    if got != b"synced before the crash\n":
        raise SystemExit(f"workspace-test: FAIL: after the VMM was killed {got!r}")
    log.flush()
    if "workspace journal replayed" not in open(os.path.join(state, "node.log")).read():
        raise SystemExit("workspace-test: FAIL: no journal replay logged after the VMM was killed")
    say("after a VMM crash the host replayed the journal and read the guest's synced write")
    must(call("DELETE", f"/v1/sandboxes/{sb['id']}", admin), 200)
    must(call("DELETE", "/v1/workspaces/ws1", admin), 200)
    if os.path.exists(f"{state}/node/workspaces/ws1"):
        raise SystemExit("workspace-test: FAIL: the workspace's files remain")
    say("passed")
except BaseException:
    log.flush()
    sys.stdout.write(open(os.path.join(state, "node.log")).read()[-4000:])
    raise
finally:
    node.terminate()
    try:
        node.wait(30)
    except subprocess.TimeoutExpired:
        node.kill()
    shutil.rmtree(state, ignore_errors=True)
