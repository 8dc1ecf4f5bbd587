#!/usr/bin/env python3
"""Checks of the rendered chart that need only `helm template` (no cluster,
no built binaries).

  chart_render_test.py schema CHART_DIR
      values.schema.json accepts the default values and every values
      combination helm/chart_flags_test.py renders, covers every key of
      values.yaml, and makes `helm template` refuse, with Helm's own
      message naming the value: an unknown key (top level and nested), a
      CIDR that is not one, a negative capacity, a wrong enum value, a
      relative image root.
  chart_render_test.py kubernetes-validate CHART_DIR
      every resource rendered (CRDs included) for each of those values
      combinations passes `kubernetes-validate -k 1.36.0 --strict`; and a
      resource with a misspelt field fails it, so the check cannot pass by
      accepting anything.
  chart_render_test.py images CHART_DIR
      the image tag follows the chart's appVersion: values.yaml leaves
      image.tag empty, and `helm template` renders the node and operator
      images as <values repository>:<appVersion>, the names
      scripts/build-images.sh gives its archives; a tag set in values wins.

helm comes from the cached control plane as in chart_flags_test.py; without
it the test exits 77 (CTest: skipped). Exit status: 0 pass, 1 fail, 77
skipped. Run by CTest as chart_values_schema, chart_kubernetes_validate and
chart_image_tag (helm/CMakeLists.txt, label e2e: helm comes with the
control plane, which scripts/test.sh builds for that tier).
"""

import copy
import json
import pathlib
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from chart_flags_test import CASES, SKIP, find_helm, kube_version  # noqa: E402

KUBERNETES_VERSION = "1.36.0"
# Helm's first line when values break the schema.
HELM_SCHEMA_ERROR = "values don't meet the specifications of the schema(s)"


class Failure(Exception):
    pass


def helm_template(helm, chart, values, *extra):
    """(exit status, stdout, stderr) of `helm template` with `values`."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(values, f)
        f.flush()
        r = subprocess.run([helm, "template", "kubicle", chart, "-n", "kubicle-system",
                            "--kube-version", kube_version(), "-f", f.name, *extra],
                           capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def render(helm, chart, values, *extra):
    rc, out, err = helm_template(helm, chart, values, *extra)
    if rc != 0:
        raise Failure(f"helm template refused {values}:\n{err}")
    return out


# ---- schema -----------------------------------------------------------------

def schema_keys(schema, prefix=""):
    """Every dotted key path the schema declares under objects."""
    keys = set()
    for k, sub in schema.get("properties", {}).items():
        keys.add(prefix + k)
        keys |= schema_keys(sub, prefix + k + ".")
    return keys


def value_keys(values, prefix=""):
    """Every dotted key path of values.yaml, into nested maps (not into the
    maps that are free-form by design: nodeSelector, resources' quantities)."""
    keys = set()
    for k, v in values.items():
        keys.add(prefix + k)
        if isinstance(v, dict) and k not in ("nodeSelector", "requests", "limits"):
            keys |= value_keys(v, prefix + k + ".")
    return keys


# Values that must be refused, and what Helm's message must name.
BAD = [
    ("unknown top-level key", {"imagePullSecret": []}, ["imagePullSecret"]),
    ("typo'd nested key", {"node": {"capacity": {"sandboxs": 10}}}, ["sandboxs", "/node/capacity"]),
    ("typo'd deep key", {"node": {"network": {"cdir": "10.1.0.0/16"}}}, ["cdir", "/node/network"]),
    ("CIDR without a prefix", {"node": {"network": {"cidr": "10.200.0.0"}}}, ["/node/network/cidr"]),
    ("CIDR with a bad address", {"node": {"network": {"cidr": "10.300.0.0/16"}}}, ["/node/network/cidr"]),
    ("CIDR prefix out of 8..28", {"node": {"network": {"cidr": "10.200.0.0/30"}}}, ["/node/network/cidr"]),
    ("negative sandbox capacity", {"node": {"capacity": {"sandboxes": -1}}}, ["/node/capacity/sandboxes"]),
    ("negative memory capacity", {"node": {"capacity": {"memoryMiB": -512}}}, ["/node/capacity/memoryMiB"]),
    ("nameserver not an address", {"node": {"network": {"nameservers": ["dns.google"]}}},
     ["/node/network/nameservers"]),
    ("four nameservers", {"node": {"network": {"nameservers": ["1.1.1.1"] * 4}}},
     ["/node/network/nameservers"]),
    ("unknown seccomp mode", {"node": {"vmmSeccomp": "strict"}}, ["/node/vmmSeccomp"]),
    ("relative image root", {"node": {"imageRoots": ["images"]}}, ["/node/imageRoots"]),
    ("port out of range", {"node": {"dataPlanePort": 70000}}, ["/node/dataPlanePort"]),
    ("string for a number", {"operator": {"workers": "four"}}, ["/operator/workers"]),
    ("unknown log level", {"operator": {"logLevel": "verbose"}}, ["/operator/logLevel"]),
    ("uninstall that cannot wait", {"uninstall": {"timeoutSeconds": 0}}, ["/uninstall/timeoutSeconds"]),
    ("the old single image", {"image": {"repository": "ghcr.io/kubicle/kubicle"}}, ["repository"]),
]


def check_schema(helm, chart):
    schema = json.loads((pathlib.Path(chart) / "values.schema.json").read_text())
    values = yaml.safe_load((pathlib.Path(chart) / "values.yaml").read_text())
    missing = value_keys(values) - schema_keys(schema)
    if missing:
        raise Failure(f"values.schema.json does not declare {sorted(missing)}")
    for name, case in CASES:
        render(helm, chart, case)
        print(f"ok   accepted: {name}")
    for name, case, words in BAD:
        rc, _, err = helm_template(helm, chart, case)
        if rc == 0:
            raise Failure(f"helm template accepted {name}: {case}")
        if HELM_SCHEMA_ERROR not in err or not all(w in err for w in words):
            raise Failure(f"{name}: helm refused {case} but not with the schema's message "
                          f"naming {words}:\n{err}")
        print(f"ok   refused: {name}: {err.strip().splitlines()[-1].strip()}")


# ---- kubernetes-validate ----------------------------------------------------

def run_kubernetes_validate(manifest_text):
    """(exit status, output) of kubernetes-validate --strict on the text."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(manifest_text)
        f.flush()
        r = subprocess.run([sys.executable, "-m", "kubernetes_validate", "-k", KUBERNETES_VERSION,
                            "--strict", f.name], capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def check_kubernetes_validate(helm, chart):
    try:
        import kubernetes_validate  # noqa: F401
    except ImportError:
        raise Failure("kubernetes-validate is not installed: run scripts/install-deps.sh")
    for name, case in CASES:
        text = render(helm, chart, case, "--include-crds")
        docs = [d for d in yaml.safe_load_all(text) if d]
        rc, out = run_kubernetes_validate(text)
        if rc != 0:
            raise Failure(f"{name}: kubernetes-validate -k {KUBERNETES_VERSION} --strict failed:\n{out}")
        # Every resource validated, none passed over (an unknown kind is).
        passed = [l for l in out.splitlines() if " passed for resource " in l]
        if len(passed) != len(docs):
            raise Failure(f"{name}: {len(docs)} resources rendered, {len(passed)} validated:\n{out}")
        print(f"ok   {name}: {len(docs)} resources pass kubernetes-validate -k "
              f"{KUBERNETES_VERSION} --strict")
    # A misspelt field in the DaemonSet's pod, among all the others, must
    # fail the strict check.
    docs = [d for d in yaml.safe_load_all(render(helm, chart, {}, "--include-crds")) if d]
    bad = copy.deepcopy(docs)
    next(d for d in bad if d["kind"] == "DaemonSet")["spec"]["template"]["spec"]["hostNetwrok"] = True
    rc, out = run_kubernetes_validate(yaml.safe_dump_all(bad))
    if rc == 0 or "hostNetwrok" not in out:
        raise Failure(f"kubernetes-validate --strict accepted a DaemonSet with hostNetwrok:\n{out}")
    print("ok   the chart with a misspelt field in the DaemonSet fails it")


# ---- images -----------------------------------------------------------------

def rendered_images(helm, chart, values):
    docs = [d for d in yaml.safe_load_all(render(helm, chart, values)) if d]
    images = {}
    for d in docs:
        if d.get("kind") in ("DaemonSet", "Deployment"):
            component = d["metadata"]["labels"]["app.kubernetes.io/component"]
            images[component] = [c["image"] for c in d["spec"]["template"]["spec"]["containers"]]
    return images


def check_images(helm, chart):
    chart_yaml = yaml.safe_load((pathlib.Path(chart) / "Chart.yaml").read_text())
    app = chart_yaml["appVersion"]
    image = yaml.safe_load((pathlib.Path(chart) / "values.yaml").read_text())["image"]
    if image.get("tag") not in ("", None):
        raise Failure(f"values.yaml sets image.tag {image['tag']!r}: leave it empty so the "
                      f"images follow appVersion {app!r} (scripts/build-images.sh tags them so)")
    want = {c: [f"{image[c]['repository']}:{app}"] for c in ("node", "operator")}
    got = rendered_images(helm, chart, {})
    if got != want:
        raise Failure(f"the chart pulls {got}; scripts/build-images.sh builds {want}")
    print(f"ok   the chart pulls {want['node'][0]} and {want['operator'][0]} (appVersion {app})")
    # The tag value does reach both containers (and the check above can fail).
    pinned = rendered_images(helm, chart, {"image": {"tag": "9.9.9"}})
    if pinned != {c: [f"{image[c]['repository']}:9.9.9"] for c in ("node", "operator")}:
        raise Failure(f"image.tag 9.9.9 rendered {pinned}")
    print("ok   image.tag 9.9.9 renders both images with 9.9.9")


def main(argv):
    checks = {"schema": check_schema, "kubernetes-validate": check_kubernetes_validate,
              "images": check_images}
    if len(argv) != 3 or argv[1] not in checks:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    helm = find_helm()
    if helm is None:
        print("SKIP: no helm: build the control plane with e2e/control-plane/build.sh "
              "(or set KUBICLE_CONTROL_PLANE_BIN)")
        return SKIP
    try:
        checks[argv[1]](helm, argv[2])
    except Failure as e:
        print(f"FAIL: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
