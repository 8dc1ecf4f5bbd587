#!/usr/bin/env python3
"""SDK fan-out benchmark: examples/python/swarm.py's pattern (create a
sandbox per agent, write its task file, run a command, delete) through the
Python SDK, 20 and 100 agents at once, with the sync client (one thread per
agent) and AsyncKubicle (one task per agent), on a real stack started here:
the local control plane, kubicle-operator and one kubicle-node with the test
guest (sdk/python/tests/e2e/stack.py), with kubicle-bench-kube's settings.

Prints, per fan-out: create-to-first-exec p50/p90/max (create() called ->
the first exec's answer), create() p50 (apply -> Ready, token checked), the
first exec's p50, wall time (first create -> last delete done) and the
client's own CPU time per sandbox (this process: SDK, HTTP, JSON).

    python3 bench/sdk/fanout.py [--sizes 20,100] [--runs 2] [--modes sync,async]

Exit status 77 without /dev/kvm or the binaries (build, e2e/control-plane/build.sh).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, List

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "sdk", "python", "src"))
sys.path.insert(0, os.path.join(REPO, "sdk", "python", "tests", "e2e"))

import kubicle  # noqa: E402
from stack import Missing, Stack  # noqa: E402


def pct(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def agent_sync(k: kubicle.Kubicle, run: str, i: int) -> Dict[str, float]:
    t0 = time.monotonic()
    sb = k.sandboxes.create("tg", metadata={"run": run, "agent": f"a{i}"}, ttl_seconds=600,
                            timeout=600)
    t1 = time.monotonic()
    try:
        sb.filesystem.write("/work/task.txt", f"task {i}\n")
        t2 = time.monotonic()
        r = sb.exec(["echo", f"agent-{i}"], timeout_seconds=30)
        t3 = time.monotonic()
        assert r.stdout == f"agent-{i}\n", r
    finally:
        sb.delete()
    return {"create": t1 - t0, "first_exec": t3 - t2, "to_exec": t3 - t0}


async def agent_async(k: kubicle.AsyncKubicle, run: str, i: int) -> Dict[str, float]:
    t0 = time.monotonic()
    sb = await k.sandboxes.create("tg", metadata={"run": run, "agent": f"a{i}"},
                                  ttl_seconds=600, timeout=600)
    t1 = time.monotonic()
    try:
        await sb.filesystem.write("/work/task.txt", f"task {i}\n")
        t2 = time.monotonic()
        r = await sb.exec(["echo", f"agent-{i}"], timeout_seconds=30)
        t3 = time.monotonic()
        assert r.stdout == f"agent-{i}\n", r
    finally:
        await sb.delete()
    return {"create": t1 - t0, "first_exec": t3 - t2, "to_exec": t3 - t0}


def fan_out_sync(stack: Stack, n: int) -> tuple:
    run = f"bench-{uuid.uuid4().hex[:6]}"
    with kubicle.Kubicle(kubeconfig=stack.kubeconfig) as k:
        t0, c0 = time.monotonic(), time.process_time()
        with ThreadPoolExecutor(max_workers=n) as pool:
            rows = list(pool.map(lambda i: agent_sync(k, run, i), range(n)))
        return rows, time.monotonic() - t0, time.process_time() - c0


def fan_out_async(stack: Stack, n: int) -> tuple:
    async def go() -> tuple:
        run = f"bench-{uuid.uuid4().hex[:6]}"
        async with kubicle.AsyncKubicle(kubeconfig=stack.kubeconfig) as k:
            t0, c0 = time.monotonic(), time.process_time()
            rows = await asyncio.gather(*(agent_async(k, run, i) for i in range(n)))
            return list(rows), time.monotonic() - t0, time.process_time() - c0
    return asyncio.run(go())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="20,100")
    p.add_argument("--runs", type=int, default=2)
    p.add_argument("--modes", default="sync,async")
    args = p.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    modes = args.modes.split(",")
    # The settings of kubicle-bench-kube (bench/kube), whose apply -> Ready
    # figures are what the SDK adds to: room for 100 (the node admits 16
    # vCPUs per host CPU by default, 64 here), a warm pool of 16, 8 workers.
    stack = Stack(node_args=["--capacity-vcpus=1000", "--capacity-sandboxes=1000",
                             "--pool-size=16", "--log-level=warn"],
                  operator_args=["--workers=8", "--log-level=warn"])
    try:
        t = time.monotonic()
        stack.start()
        print(f"stack up in {time.monotonic() - t:.1f} s (control plane, operator, node n1, "
              f"template tg baked); load average {os.getloadavg()[0]:.1f}", flush=True)
        fan_out_sync(stack, 4)  # warm-up: connections, the node's pool
        print(f"{'mode':<6} {'agents':>6} {'run':>3}  {'to-exec p50':>11} {'p90':>7} {'max':>7}"
              f"  {'create p50':>10} {'exec p50':>8}  {'wall':>7}  {'client CPU/sandbox':>18}")
        for n in sizes:
            for mode in modes:
                for r in range(args.runs):
                    rows, wall, cpu = (fan_out_sync if mode == "sync" else fan_out_async)(stack, n)
                    te = [x["to_exec"] * 1000 for x in rows]
                    print(f"{mode:<6} {n:>6} {r + 1:>3}  {statistics.median(te):9.0f}ms "
                          f"{pct(te, 90):5.0f}ms {max(te):5.0f}ms  "
                          f"{statistics.median(x['create'] * 1000 for x in rows):8.0f}ms "
                          f"{statistics.median(x['first_exec'] * 1000 for x in rows):6.1f}ms  "
                          f"{wall:6.2f}s  {cpu / n * 1000:15.1f}ms", flush=True)
    except Missing as e:
        print(f"fanout: skipped: {e}")
        return 77
    finally:
        left = stack.stop()
        if left:
            print(f"fanout: VMs outlived the node: {left}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
