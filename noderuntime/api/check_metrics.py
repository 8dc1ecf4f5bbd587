#!/usr/bin/env python3
"""Checks a Prometheus text exposition with prometheus_client's parser (the
reference implementation).

usage: check_metrics.py FILE HISTOGRAM[{label=value,...}]...
Each argument names a histogram family that must parse as a histogram whose
_count (summed over series matching the labels) is > 0, with cumulative
buckets ending in +Inf equal to _count. Exit 0 ok, 1 check failed, 77
prometheus_client is not installed (scripts/install-deps.sh installs it)."""
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("prometheus_client missing: pip install prometheus_client", file=sys.stderr)
    sys.exit(77)


def parse_arg(arg):
    if "{" not in arg:
        return arg, {}
    name, rest = arg.split("{", 1)
    labels = dict(kv.split("=", 1) for kv in rest.rstrip("}").split(",") if kv)
    return name, labels


def main():
    text = open(sys.argv[1]).read()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for arg in sys.argv[2:]:
        name, want = parse_arg(arg)
        fam = fams.get(name)
        if fam is None or fam.type != "histogram":
            print(f"FAIL: no histogram {name}", file=sys.stderr)
            return 1
        count = 0.0
        series = {}
        for s in fam.samples:
            if any(s.labels.get(k) != v for k, v in want.items()):
                continue
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            if s.name.endswith("_count"):
                count += s.value
                series.setdefault(key, {})["count"] = s.value
            elif s.name.endswith("_bucket") and s.labels.get("le") == "+Inf":
                series.setdefault(key, {})["inf"] = s.value
        for key, v in series.items():
            if v.get("count") != v.get("inf"):
                print(f"FAIL: {name}{key}: +Inf bucket != _count: {v}", file=sys.stderr)
                return 1
        if count <= 0:
            print(f"FAIL: {arg}: _count is {count}", file=sys.stderr)
            return 1
        print(f"ok: {arg} count={count:g} series={len(series)}")
    return 0


sys.exit(main())
