#!/usr/bin/env python3
"""Counts and names the skipped tests of a CTest run, from its JUnit file
(ctest --output-junit), and fails the run when a test skipped on a host
that has everything the tests need.

usage: ctest-summary.py [--host-lacks WHAT] JUNIT...

A test is skipped when CTest reports it "Not Run" (a GoogleTest skip, which
gtest_discover_tests matches in the output, or SKIP_RETURN_CODE 77), or when
it passed yet skipped some of its cases inside: a binary that runs several
GoogleTests ("[  SKIPPED ] Suite.Name (N ms)") or a pytest suite ("SKIPPED
[n] file:line: reason" with -rs, or "N skipped" in its summary). That needs
the whole output of passed tests in the file (ctest
--test-output-size-passed).

Every test can run on a host with read-write /dev/kvm, /dev/net/tun and
root (docs/testing.md, "Skips"): there, any skip fails. Elsewhere skips are
listed with what the host lacks. --host-lacks overrides the detection
("" for a complete host; tests use it).

Exit status: 0 no disallowed skip, 1 a test skipped that must run here,
2 a JUnit file could not be read.
"""
import argparse
import os
import re
import sys
import xml.etree.ElementTree as ET

# A skipped GoogleTest's own line, and its line in the closing list (the one
# left when a long output lost its middle).
GTEST_SKIPPED = re.compile(r"^\[  SKIPPED \] (\S+)(?: \(\d+ ms\))?$", re.M)
PYTEST_SKIPPED = re.compile(r"^SKIPPED \[\d+\] (.+)$", re.M)
PYTEST_SUMMARY = re.compile(r"\b(\d+) skipped\b.* in [\d.]+s\b")


def host_lacks():
    """What this host lacks of what the tests need (empty when nothing)."""
    lacks = []
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        lacks.append("/dev/kvm")
    if not os.access("/dev/net/tun", os.R_OK | os.W_OK):
        lacks.append("/dev/net/tun")
    if os.geteuid() != 0:
        lacks.append("root")
    return lacks


def skip_reason(out):
    """The reason a skipped test gave, from its output: GoogleTest's message
    after "file:line: Skipped", else the last line saying skip."""
    lines = [l.strip() for l in out.splitlines()]
    for i, l in enumerate(lines):
        if l.endswith(": Skipped") and i + 1 < len(lines) and lines[i + 1]:
            if not lines[i + 1].startswith("[  SKIPPED ]"):
                return lines[i + 1]
    said = [l for l in lines if "skip" in l.lower() and not l.startswith("[  SKIPPED ]")]
    if said:
        return said[-1]
    rest = [l for l in lines if l]
    return rest[-1] if rest else "(no output)"


def inner_skips(out):
    """Cases a passed test skipped inside it: names or reasons."""
    found = list(dict.fromkeys(GTEST_SKIPPED.findall(out))) + PYTEST_SKIPPED.findall(out)
    if not found:
        m = PYTEST_SUMMARY.search(out)
        if m and int(m.group(1)) > 0:
            found = [f"{m.group(1)} pytest cases (run pytest with -rs to name them)"]
    return found


def summarise(paths):
    """(counts, skipped) over the JUnit files: skipped is a list of
    (test, reason)."""
    counts = {"tests": 0, "passed": 0, "failed": 0, "skipped": 0, "disabled": 0}
    skipped = []
    for path in paths:
        root = ET.parse(path).getroot()
        for case in root.iter("testcase"):
            name = case.get("name", "?")
            status = case.get("status", "")
            out = case.findtext("system-out") or ""
            counts["tests"] += 1
            if status == "notrun" or case.find("skipped") is not None and status != "disabled":
                counts["skipped"] += 1
                skipped.append((name, skip_reason(out)))
            elif status == "disabled":
                counts["disabled"] += 1
            elif status == "fail" or case.find("failure") is not None:
                counts["failed"] += 1
            else:
                counts["passed"] += 1
                inner = inner_skips(out)
                if inner:
                    counts["skipped"] += 1
                    skipped.append((name, f"passed, but skipped {len(inner)} case(s) inside: "
                                          + "; ".join(inner)))
    return counts, skipped


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("junit", nargs="+")
    ap.add_argument("--host-lacks", default=None,
                    help='comma-separated, e.g. "/dev/kvm,root"; "" for a complete host')
    args = ap.parse_args(argv)
    lacks = host_lacks() if args.host_lacks is None else [w for w in args.host_lacks.split(",") if w]
    try:
        counts, skipped = summarise(args.junit)
    except (OSError, ET.ParseError) as e:
        print(f"test: cannot read the CTest results: {e}")
        return 2
    print("test: {tests} tests: {passed} passed, {failed} failed, {skipped} skipped".format(**counts)
          + (f", {counts['disabled']} disabled" if counts["disabled"] else ""))
    for name, reason in skipped:
        print(f"test:   skipped {name}: {reason}")
    if not skipped:
        return 0
    if lacks:
        print(f"test: skips allowed: this host lacks {', '.join(lacks)}")
        return 0
    print(f"test: FAILED: {len(skipped)} test(s) skipped on a host with /dev/kvm, /dev/net/tun "
          "and root, where every test must run")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
