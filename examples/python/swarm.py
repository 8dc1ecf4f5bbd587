#!/usr/bin/env python3
"""The seed pattern of an agent swarm: N agents, one sandbox each, a task
file written into every sandbox, code run there with a timeout, the results
gathered, and every sandbox deleted in ``finally`` (then a sweep by run id
as the backstop).

    python3 examples/python/swarm.py --template demo --count 20
    python3 examples/python/swarm.py --template py -- python3 -c 'print(6*7)'

The command (default ``echo``, which every guest has) gets the agent's name
as its last argument. ``cat`` of the task file proves the file round trip.
Exit status: 0 when every agent succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

from _connect import add_options, client, kubicle


def run_agent(k: "kubicle.Kubicle", args: argparse.Namespace, run: str, i: int) -> Dict[str, Any]:
    agent = f"agent-{i:02d}"
    row: Dict[str, Any] = {"agent": agent, "sandbox": "", "ok": False}
    t0 = time.monotonic()
    sb = None
    try:
        sb = k.sandboxes.create(args.template, metadata={"run": run, "agent": agent},
                                ttl_seconds=args.ttl, env={"AGENT": agent},
                                timeout=args.create_timeout)
        row["sandbox"] = sb.name
        row["create_ms"] = (time.monotonic() - t0) * 1000
        task = f"task for {agent} in run {run}\n"
        sb.filesystem.write("/work/task.txt", task)
        t1 = time.monotonic()
        r = sb.exec(list(args.command) + [agent], timeout_seconds=args.exec_timeout)
        row["exec_ms"] = (time.monotonic() - t1) * 1000
        row["exit"] = r.exit_code
        row["output"] = r.stdout.strip()
        echoed = sb.exec(["cat", "/work/task.txt"], timeout_seconds=args.exec_timeout).stdout
        row["file_ok"] = echoed == task
        row["ok"] = r.exit_code == 0 and row["file_ok"]
        if not row["ok"]:
            row["error"] = r.stderr.strip()[-200:] or "file content differs"
    except kubicle.ExecTimeoutError as e:
        row["error"] = f"timed out after {args.exec_timeout} s"
        row["output"] = e.result.stdout.strip() if e.result else ""
    except kubicle.KubicleError as e:
        row["error"] = f"{type(e).__name__}: {e}"
    finally:
        if sb is not None:
            try:
                sb.delete()
            except kubicle.KubicleError as e:
                row["error"] = row.get("error") or f"delete: {e}"
    return row


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--template", default="demo", help="SandboxTemplate name (default demo)")
    p.add_argument("--count", type=int, default=5, help="agents (default 5)")
    p.add_argument("--run", help="run id, the kubicle.dev/run label (default: random)")
    p.add_argument("--ttl", type=int, default=600, help="backstop TTL in seconds (default 600)")
    p.add_argument("--create-timeout", type=float, default=120)
    p.add_argument("--exec-timeout", type=int, default=30)
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    add_options(p)
    p.add_argument("command", nargs="*", default=["echo"], help="argv run in each sandbox")
    args = p.parse_args(argv)
    args.command = args.command or ["echo"]
    run = args.run or f"swarm-{uuid.uuid4().hex[:8]}"

    k = client(args)
    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=min(args.count, 64)) as pool:
            rows = list(pool.map(lambda i: run_agent(k, args, run, i), range(args.count)))
    finally:
        swept = k.sandboxes.delete(metadata={"run": run})  # nothing may outlive the run
        k.close()
    wall = time.monotonic() - t0
    ok = sum(1 for r in rows if r["ok"])
    if args.json:
        print(json.dumps({"run": run, "ok": ok, "count": args.count, "wall_s": wall,
                          "swept": swept, "agents": rows}))
    else:
        print(f"{'agent':<10} {'sandbox':<24} {'create ms':>9} {'exec ms':>8} {'exit':>4}  output")
        for r in rows:
            print(f"{r['agent']:<10} {r['sandbox'][:24]:<24} {r.get('create_ms', 0):9.1f} "
                  f"{r.get('exec_ms', 0):8.1f} {str(r.get('exit', '-')):>4}  "
                  f"{r.get('output', '') if r['ok'] else r.get('error', '')}")
        print(f"run {run}: {ok} of {args.count} agents ok, wall {wall:.2f} s, "
              f"{len(swept)} left for the sweep")
    return 0 if ok == args.count else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
