#!/usr/bin/env python3
"""Best of N: warm one base sandbox, fork it once per candidate (each fork
is a copy-on-write copy of the warm VM: its files, its memory), run every
candidate, keep the winners, delete the rest.

    python3 examples/python/best_of_n.py --template demo -n 8 --keep 2
    python3 examples/python/best_of_n.py --template py -n 8 -- python3 /work/solve.py

Each candidate gets its own /work/candidate.txt, then runs the command
(default ``sha256sum /work/candidate.txt``, which every guest has) with a
timeout. The score is taken from the command's output (its first token read
as hex, else the output's SHA-256), so any command that prints a score
works. The winners are shown, used once more, and deleted at the end with
the sweep by run id (``--leave-winners`` keeps them).
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List

from _connect import add_options, client, kubicle


def score(output: str) -> int:
    token = (output.split() or [""])[0]
    try:
        return int(token[:12], 16) if token else 0
    except ValueError:
        return int(hashlib.sha256(output.encode()).hexdigest()[:12], 16)


def run_candidate(sb: "kubicle.Sandbox", i: int, args: argparse.Namespace) -> Dict[str, Any]:
    row: Dict[str, Any] = {"candidate": i, "sandbox": sb.name, "score": -1, "ok": False}
    try:
        # Every fork starts from the base's warm state ...
        row["warm"] = sb.filesystem.read("/work/warm.txt") == "warmed once\n"
        # ... and goes its own way from there.
        sb.filesystem.write("/work/candidate.txt", f"candidate {i} seed {args.seed}\n")
        r = sb.exec(args.command, timeout_seconds=args.exec_timeout)
        row.update(exit=r.exit_code, output=r.stdout.strip()[:60])
        row["ok"] = r.exit_code == 0 and row["warm"]
        if row["ok"]:
            row["score"] = score(r.stdout)
    except kubicle.ExecTimeoutError:
        row["error"] = f"timed out after {args.exec_timeout} s"
    except kubicle.KubicleError as e:
        row["error"] = f"{type(e).__name__}: {e}"
    return row


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--template", default="demo", help="SandboxTemplate name (default demo)")
    p.add_argument("-n", "--candidates", type=int, default=4, help="forks (default 4)")
    p.add_argument("--keep", type=int, default=1, help="winners kept (default 1)")
    p.add_argument("--run", help="run id (default: random)")
    p.add_argument("--seed", default="0", help="goes into every candidate's file")
    p.add_argument("--exec-timeout", type=int, default=30)
    p.add_argument("--leave-winners", action="store_true",
                   help="do not delete the winners at the end")
    add_options(p)
    p.add_argument("command", nargs="*", help="argv run in each candidate "
                                              "(default: sha256sum /work/candidate.txt)")
    args = p.parse_args(argv)
    args.command = args.command or ["sha256sum", "/work/candidate.txt"]
    run = args.run or f"bon-{uuid.uuid4().hex[:8]}"
    k = client(args)
    t0 = time.monotonic()
    winners: List[kubicle.Sandbox] = []
    try:
        base = k.sandboxes.create(args.template, metadata={"run": run, "agent": "base"},
                                  ttl_seconds=600)
        base.filesystem.write("/work/warm.txt", "warmed once\n")  # the expensive setup, once
        base.exec(["echo", "warming"], timeout_seconds=args.exec_timeout).check()
        t_fork = time.monotonic()
        forks = base.fork(args.candidates, metadata={"role": "candidate"})
        fork_ms = (time.monotonic() - t_fork) * 1000
        base.delete()  # the forks outlive it
        with ThreadPoolExecutor(max_workers=min(len(forks), 32)) as pool:
            rows = list(pool.map(lambda a: run_candidate(a[1], a[0], args), enumerate(forks)))
        ranked = sorted(range(len(rows)), key=lambda i: rows[i]["score"], reverse=True)
        keep = [i for i in ranked[:args.keep] if rows[i]["ok"]]
        for i in ranked[args.keep:]:
            forks[i].delete()
        winners = [forks[i] for i in keep]
        print(f"{'cand':>4} {'sandbox':<30} {'score':>16} {'exit':>4}  kept")
        for i in ranked:
            r = rows[i]
            print(f"{i:>4} {r['sandbox'][:30]:<30} {r['score']:>16} {str(r.get('exit', '-')):>4}  "
                  f"{'yes' if i in keep else r.get('error', '')}")
        for w in winners:  # the winners keep going from where they are
            line = w.exec(["cat", "/work/candidate.txt"]).stdout.strip()
            print(f"winner {w.name}: {line}")
        left = k.sandboxes.list(metadata={"run": run})
        print(f"run {run}: {len(forks)} forks in {fork_ms:.0f} ms, {len(winners)} kept, "
              f"{len(left)} sandboxes left, wall {time.monotonic() - t0:.2f} s")
        ok = len(winners) == min(args.keep, len(forks)) and \
            sorted(s.name for s in left) == sorted(w.name for w in winners)
    finally:
        if not args.leave_winners:
            k.sandboxes.delete(metadata={"run": run})
        k.close()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
