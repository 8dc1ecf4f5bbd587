#!/usr/bin/env python3
"""Runs one command inside the nested KVM test host and returns its status.

This machine's own /dev/kvm cannot boot Linux in usable time (see
docs/testing.md). QEMU's software emulator with nested SVM can: this boots
`qemu-system-x86_64 -accel tcg,thread=multi -cpu EPYC,+svm,+npt` with
Debian's kernel and an initramfs that loads kvm-amd (e2e/nested/
build-testhost.sh), shares this machine's root read-only over 9p (so every
binary, library and cached image is there at the same path) plus a scratch
directory read-write, and runs the command chrooted into that view with a
real /dev/kvm.

    e2e/nested/run-in-testhost.py [options] -- COMMAND [ARG...]

The command's output streams to stdout as it runs; the exit status is the
command's, 124 on timeout, 125 when the test host failed. The test host
prints a heartbeat every 30 s; when it falls silent (QEMU's emulated nested
SVM occasionally wedges both of its CPUs) the command is rerun in a fresh
test host, at most --wedge-retries times; a command's own failure is never
rerun. A hard timeout
always tears QEMU down (its own process group, killed with the harness too).
Environment variables named KUBICLE_*, GTEST_*, HOME, PATH, LANG and those
given with --env are passed to the command; it starts in the current
directory (or --cwd).
"""

import argparse
import ctypes
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PASS_ENV_PREFIXES = ("KUBICLE_", "GTEST_")
PASS_ENV_NAMES = ("HOME", "PATH", "LANG", "TERM")
# The test host kernel itself failing (QEMU's emulated nested SVM has corrupted
# it): as good as wedged.
HOST_KERNEL_FAULT = re.compile(r"^\[\s*\d+\.\d+\] (.*BUG: |Oops|Kernel panic|.*double fault)")


def log(msg):
    print(f"[nested] {msg}", file=sys.stderr, flush=True)


def build_testhost():
    out = subprocess.run([os.path.join(HERE, "build-testhost.sh")], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return out.strip().splitlines()[-1]


def write_command(scratch, command, cwd, extra_env):
    env = {k: v for k, v in os.environ.items()
           if k.startswith(PASS_ENV_PREFIXES) or k in PASS_ENV_NAMES}
    for item in extra_env:
        key, _, value = item.partition("=")
        env[key] = value if _ else os.environ.get(key, "")
    lines = ["set -e", f"cd {shlex.quote(cwd)}"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines.append("set +e")
    lines.append("exec " + " ".join(shlex.quote(a) for a in command))
    with open(os.path.join(scratch, "cmd.sh"), "w") as f:
        f.write("\n".join(lines) + "\n")


def tmp_shares(args):
    """Top-level /tmp directories the command needs (its cwd, its binary,
    --share): the test host puts a fresh tmpfs on /tmp, so anything of the
    host's /tmp must be shared explicitly (a CI clone may live there)."""
    wanted = list(args.share) + [args.cwd]
    if os.path.isabs(args.command[0]) or os.sep in args.command[0]:
        wanted.append(os.path.dirname(os.path.abspath(args.command[0])))
    shares = set()
    for path in wanted:
        parts = os.path.realpath(path).split(os.sep)
        if len(parts) > 2 and parts[1] == "tmp" and os.path.isdir(os.sep.join(parts[:3])):
            shares.add(os.sep.join(parts[:3]))
    return sorted(shares)


def qemu_command(testhost, scratch, shares, args):
    # loglevel 5 keeps boot quiet but shows warnings with their backtraces
    # (a soft lockup report is useless without its stack).
    append = (f"console=ttyS0 quiet loglevel={args.loglevel} panic=-1 mitigations=off "
              f"kubicle.scratch={scratch}")
    if shares:
        append += " kubicle.shares=" + ":".join(shares)
    # The PVH vmlinux when build-testhost.sh could extract it (no
    # decompression under TCG), else the bzImage.
    kernel = os.path.join(testhost, "vmlinux")
    if not os.path.exists(kernel):
        kernel = os.path.join(testhost, "vmlinuz")
    extra = []
    for i, path in enumerate(shares):
        extra += ["-virtfs",
                  f"local,path={path},mount_tag=share{i},security_model=none,multidevs=remap"]
    return [
        "qemu-system-x86_64", "-nodefaults", "-no-reboot", "-display", "none",
        "-accel", f"tcg,thread={args.tcg_threads}", "-cpu", "EPYC,+svm,+npt",
        "-smp", str(args.smp), "-m", args.mem,
        "-serial", "stdio", "-monitor", "none",
        "-kernel", kernel,
        "-initrd", os.path.join(testhost, "initramfs.cpio.gz"),
        "-append", append,
        "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        "-virtfs", f"local,path={scratch},mount_tag=scratch,security_model=none,multidevs=remap",
    ] + extra


def die_with_parent():
    # QEMU must not outlive the harness, whatever kills the harness.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def stream(proc, started, state):
    for raw in proc.stdout:
        state["last_output"] = time.monotonic()
        # The serial console ends lines with CRLF.
        line = raw.decode(errors="replace").replace("\r\n", "\n")
        if "TCG doesn't support requested feature" in line:
            continue  # QEMU's note about host features it only pretends to have
        if "kubicle-testhost: alive" in line:
            continue  # the heartbeat: counted above, not worth showing
        if HOST_KERNEL_FAULT.match(line) and "host_fault" not in state:
            state["host_fault"] = line.strip()
        if "kubicle-testhost: ready" in line and state.get("ready") is None:
            state["ready"] = time.monotonic() - started
            log(f"test host up in {state['ready']:.1f} s; running the command")
        sys.stdout.write(line)
        sys.stdout.flush()


def kill_group(proc):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            pass


def wait_for_qemu(proc, state, started, args):
    """Returns "exited", "timeout" or "wedged" (no console line, not even the
    test host's 30 s heartbeat, for --wedge-after seconds)."""
    while True:
        try:
            proc.wait(timeout=1)
            return "exited"
        except subprocess.TimeoutExpired:
            pass
        now = time.monotonic()
        if now - started > args.timeout:
            return "timeout"
        if "host_fault" in state:
            time.sleep(2)  # let the report reach the log
            return "wedged"
        last = state.get("last_output", started)
        if state.get("ready") is not None and now - last > args.wedge_after:
            return "wedged"


def run_once(testhost, args, attempt):
    # Under /tmp: the test host mounts a tmpfs there and the scratch share at
    # the same path, so paths inside and outside agree.
    scratch = tempfile.mkdtemp(prefix="kubicle-nested-", dir="/tmp")
    os.chmod(scratch, 0o755)
    write_command(scratch, args.command, args.cwd, args.env)
    cmd = qemu_command(testhost, scratch, tmp_shares(args), args)
    log(f"booting the test host (QEMU TCG, {args.smp} vCPUs, {args.mem}, "
        f"timeout {args.timeout:.0f} s, scratch {scratch}, attempt {attempt}): "
        f"{' '.join(shlex.quote(a) for a in args.command)}")
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=die_with_parent)
    state = {}
    reader = threading.Thread(target=stream, args=(proc, started, state), daemon=True)
    reader.start()

    def on_signal(signum, _frame):
        log(f"signal {signum}: tearing the test host down")
        kill_group(proc)
        sys.exit(125)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    outcome = wait_for_qemu(proc, state, started, args)
    if outcome == "timeout":
        log(f"timeout after {args.timeout:.0f} s: killing QEMU")
        kill_group(proc)
    elif outcome == "wedged" and "host_fault" in state:
        log(f"the test host kernel failed ({state['host_fault']}): QEMU's emulated nested "
            "SVM, see docs/testing.md; killing QEMU")
        kill_group(proc)
    elif outcome == "wedged":
        log(f"the test host printed nothing for {args.wedge_after:.0f} s, not even its "
            "heartbeat: it is wedged (QEMU's emulated nested SVM, see docs/testing.md); "
            "killing QEMU")
        kill_group(proc)
    reader.join(timeout=5)
    elapsed = time.monotonic() - started

    status_file = os.path.join(scratch, "exit-status")
    status = {"timeout": 124, "wedged": 125}.get(outcome, 125)
    if outcome == "exited" and os.path.exists(status_file):
        with open(status_file) as f:
            status = int(f.read().strip() or 125)
    elif outcome == "exited" and "host_fault" in state:
        # panic=-1 and -no-reboot: a test host kernel that faults exits QEMU
        # before the watcher sees the fault; as retryable as a wedge.
        log(f"the test host kernel failed ({state['host_fault']}) and stopped: QEMU's "
            "emulated nested SVM, see docs/testing.md")
        outcome = "wedged"
    elif outcome == "exited":
        log(f"the test host stopped without a command status (QEMU exit {proc.returncode})")
    log(f"command status {status} after {elapsed:.1f} s "
        f"(test host boot {state.get('ready', float('nan')):.1f} s)")
    if args.keep:
        log(f"scratch kept: {scratch}")
    else:
        shutil.rmtree(scratch, ignore_errors=True)
    return status, outcome == "wedged"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeout", type=float, default=1200, help="hard limit in seconds")
    p.add_argument("--mem", default="4G", help="test host memory (default 4G)")
    p.add_argument("--smp", type=int, default=2, help="test host vCPUs (default 2)")
    p.add_argument("--tcg-threads", choices=("single", "multi"), default="multi",
                   help="QEMU TCG threading: one host thread per vCPU (multi) or one for all")
    p.add_argument("--wedge-after", type=float, default=150,
                   help="seconds of console silence after which the test host counts as "
                        "wedged (it prints a heartbeat every 30 s; default 150)")
    p.add_argument("--wedge-retries", type=int, default=2,
                   help="times to rerun the command in a fresh test host after a wedge "
                        "(never after a command failure; default 2)")
    p.add_argument("--cwd", default=os.getcwd())
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE or KEY to pass")
    p.add_argument("--loglevel", type=int, default=5,
                   help="test host kernel console loglevel (default 5: warnings and worse)")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory")
    p.add_argument("--share", action="append", default=[],
                   help="a directory under /tmp to share read-write (others are visible read-only)")
    p.add_argument("command", nargs="+")
    args = p.parse_args()
    if shutil.which("qemu-system-x86_64") is None:
        log("qemu-system-x86_64 is missing (apt-get install qemu-system-x86)")
        return 125

    testhost = build_testhost()
    for attempt in range(1, args.wedge_retries + 2):
        status, wedged = run_once(testhost, args, attempt)
        if not wedged:
            return status
        if attempt <= args.wedge_retries:
            log(f"rerunning the command in a fresh test host "
                f"(wedge {attempt} of at most {args.wedge_retries + 1})")
    log("the test host wedged on every attempt")
    return status


if __name__ == "__main__":
    sys.exit(main())
