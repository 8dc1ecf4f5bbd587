#!/usr/bin/env python3
"""Tests scripts/ctest-summary.py on JUnit files CTest 3.25 wrote
(testdata/ctest-summary: mixed.xml from a scratch project with a GoogleTest
skip, pass and failure, a binary of two GoogleTests of which one skipped, a
SKIP_RETURN_CODE 77 test and a pytest-like suite with a skipped case;
clean.xml with one passed test). Run by CTest as ctest_summary (label unit).
"""
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ctest-summary.py")
DATA = os.path.join(HERE, "testdata", "ctest-summary")

spec = importlib.util.spec_from_file_location("ctest_summary", SCRIPT)
summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summary)


def run(*args):
    p = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)
    return p.returncode, p.stdout


class CtestSummaryTest(unittest.TestCase):
    def test_counts_and_names_every_kind_of_skip(self):
        counts, skipped = summary.summarise([os.path.join(DATA, "mixed.xml")])
        self.assertEqual(counts, {"tests": 6, "passed": 3, "failed": 1, "skipped": 4, "disabled": 0})
        self.assertEqual([n for n, _ in skipped],
                         ["A.Skips", "multi_e2e_test", "e2e_without_cp", "sdk_python_fake"])
        reasons = dict(skipped)
        self.assertEqual(reasons["A.Skips"], "/dev/kvm is absent")
        self.assertIn("NodeE2E.NeedsKvm", reasons["multi_e2e_test"])
        self.assertIn("control plane binaries missing", reasons["e2e_without_cp"])
        self.assertIn("the node offers 400000 MiB", reasons["sdk_python_fake"])

    def test_a_skip_fails_a_complete_host_and_is_listed(self):
        rc, out = run("--host-lacks", "", os.path.join(DATA, "mixed.xml"))
        self.assertEqual(rc, 1, out)
        self.assertIn("6 tests: 3 passed, 1 failed, 4 skipped", out)
        self.assertIn("skipped A.Skips: /dev/kvm is absent", out)
        self.assertIn("FAILED: 4 test(s) skipped", out)

    def test_skips_are_allowed_and_listed_where_the_host_lacks_something(self):
        rc, out = run("--host-lacks", "/dev/kvm,root", os.path.join(DATA, "mixed.xml"))
        self.assertEqual(rc, 0, out)
        self.assertIn("skipped e2e_without_cp", out)
        self.assertIn("this host lacks /dev/kvm, root", out)

    def test_no_skip_passes_a_complete_host(self):
        rc, out = run("--host-lacks", "", os.path.join(DATA, "clean.xml"))
        self.assertEqual(rc, 0, out)
        self.assertIn("1 tests: 1 passed, 0 failed, 0 skipped", out)

    def test_several_files_add_up(self):
        rc, out = run("--host-lacks", "", os.path.join(DATA, "clean.xml"), os.path.join(DATA, "mixed.xml"))
        self.assertEqual(rc, 1, out)
        self.assertIn("7 tests: 4 passed, 1 failed, 4 skipped", out)

    def test_a_missing_or_broken_file_is_an_error_not_a_pass(self):
        rc, out = run("--host-lacks", "", os.path.join(DATA, "no-such.xml"))
        self.assertEqual(rc, 2, out)
        with tempfile.NamedTemporaryFile("w", suffix=".xml") as f:
            f.write("<testsuite><testcase name='cut")
            f.flush()
            rc, out = run("--host-lacks", "", f.name)
        self.assertEqual(rc, 2, out)

    def test_a_pytest_summary_without_reasons_still_counts(self):
        self.assertEqual(summary.inner_skips("..s\n2 passed, 1 skipped in 0.50s\n"),
                         ["1 pytest cases (run pytest with -rs to name them)"])
        self.assertEqual(summary.inner_skips("...\n3 passed in 0.50s\n"), [])
        self.assertEqual(summary.inner_skips("[  SKIPPED ] 1 test, listed below:\n"), [])

    def test_a_gtest_skip_is_named_once_and_from_the_closing_list_alone(self):
        full = "[  SKIPPED ] E.Kvm (0 ms)\n[  SKIPPED ] 1 test, listed below:\n[  SKIPPED ] E.Kvm\n"
        self.assertEqual(summary.inner_skips(full), ["E.Kvm"])
        cut = "...output truncated...\n[  SKIPPED ] 1 test, listed below:\n[  SKIPPED ] E.Kvm\n"
        self.assertEqual(summary.inner_skips(cut), ["E.Kvm"])


if __name__ == "__main__":
    unittest.main()
