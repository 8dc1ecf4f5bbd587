#!/usr/bin/env python3
"""Parses common/metrics' exposition with prometheus_client's parser (the
reference implementation) and checks every value survived the round trip."""
import subprocess
import sys

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("prometheus_client missing: pip install prometheus_client", file=sys.stderr)
    sys.exit(1)

text = subprocess.run([sys.argv[1]], check=True, capture_output=True, text=True).stdout
fams = {f.name: f for f in text_string_to_metric_families(text)}
samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for f in fams.values() for s in f.samples}

assert fams["kubicle_dump_events"].type == "counter", fams
assert samples[("kubicle_dump_events_total", (("kind", 'a"b\\c\nd'),))] == 3
assert fams["kubicle_dump_events"].documentation == 'Events with "quotes" and \\.'
assert samples[("kubicle_dump_depth", ())] == -2.5
h = fams["kubicle_dump_latency_seconds"]
assert h.type == "histogram"
buckets = [(s.labels["le"], s.value) for s in h.samples if s.name.endswith("_bucket")]
assert [v for _, v in buckets] == [1, 1, 2, 3, 4], buckets
assert buckets[-1][0] == "+Inf"
assert samples[("kubicle_dump_latency_seconds_count", (("kind", "Sandbox"),))] == 4
assert abs(samples[("kubicle_dump_latency_seconds_sum", (("kind", "Sandbox"),))] - 3.5205) < 1e-9
assert samples[("kubicle_dump_sandboxes", (("phase", "Running"),))] == 4
print("ok:", len(samples), "samples parsed")
