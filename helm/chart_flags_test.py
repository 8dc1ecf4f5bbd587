#!/usr/bin/env python3
"""Fails when the Helm chart runs kubicle-node or kubicle-operator with flags
the built binaries reject.

Usage: chart_flags_test.py KUBICLE_OPERATOR KUBICLE_NODE CHART_DIR

For several values combinations it renders the chart with `helm template`,
takes each container's command and args from the node DaemonSet and the
operator Deployment, expands the `$(VAR)` references the way the kubelet does
(with plausible values for the env vars the container declares), replaces
`/usr/bin/kubicle-*` with the built binary, appends `--check-flags` and runs
it: it must exit 0 and print "<binary>: flags ok". It also checks the shape
the values ask for (`--capacity-mem` only when set, one `--image-root` and one
read-only hostPath mount per image root, node.images' flags and mounts (the
registry credentials from their Secret as a file), no separate node metrics port, the
data plane on TLS with an HTTPS liveness probe, and what the sandbox network
needs when `node.network.enabled`: its flags, the host's network, NET_ADMIN
and SYS_ADMIN, and Bidirectional propagation on <stateDir>/netns only;
none of these with it off but `--sandbox-network=off`).

Before the chart it checks that a bad flag makes `--check-flags` fail, so the
test cannot pass because the binaries accept anything.

helm comes from the cached control plane: $KUBICLE_CONTROL_PLANE_BIN, else
what `e2e/control-plane/build.sh --print-bin-dir` prints. Without it the test
exits 77 (CTest: skipped) saying how to build it.
Exit status: 0 pass, 1 fail, 77 skipped. Run by CTest as chart_flags
(helm/CMakeLists.txt, label e2e).
"""

import os
import pathlib
import re
import subprocess
import sys
import tempfile

import yaml

SKIP = 77
REPO = pathlib.Path(__file__).resolve().parent.parent

# What the kubelet would put in the env vars the chart's containers declare.
ENV_VALUES = {
    "NODE_NAME": "kvm-node-1",
    "NODE_IP": "10.0.0.7",
    "POD_NAMESPACE": "kubicle-system",
    "POD_NAME": "kubicle-operator-7d9f8c6b5-x2k4q",
}

# Values combinations, each with a name for the messages.
CASES = [
    ("defaults", {}),
    ("memoryMiB set", {"node": {"capacity": {"memoryMiB": 1048576}}}),
    ("two image roots", {"node": {"imageRoots": ["/var/lib/kubicle/images", "/mnt/images"]}}),
    ("leader election off", {"operator": {"leaderElection": {"enabled": False}}}),
    ("text logs, long TTL", {
        "operator": {"logFormat": "text", "logLevel": "debug", "defaultTTLSeconds": 2592000},
        "node": {"logFormat": "text", "logLevel": "warn", "capacity": {"sandboxes": 100000},
                 "leaseDurationSeconds": 3600, "dataPlanePort": 17443, "vmmSeccomp": "log"},
    }),
    ("sandbox network off", {"node": {"network": {"enabled": False}}}),
    ("sandbox network, own CIDR", {"node": {"stateDir": "/srv/kubicle", "network": {
        "cidr": "10.77.0.0/20", "nameservers": ["9.9.9.9", "149.112.112.112"], "pool": 0}}}),
    ("long uninstall", {"uninstall": {"timeoutSeconds": 1200}}),
    ("private registries", {"node": {"images": {
        "store": "/mnt/image-store", "registryConfigSecret": "regcred",
        "insecureRegistries": ["127.0.0.1:5000", "registry.lab"], "registryCAConfigMap": "lab-ca",
        "maxImageBytes": 1073741824, "defaultKernel": "/opt/guest/vmlinux", "defaultInitrd": ""}}}),
]

# The chart's node.images defaults (values.yaml).
IMAGES_DEFAULTS = {"store": "", "registryConfigSecret": "", "insecureRegistries": [],
                   "registryCAConfigMap": "", "maxImageBytes": 8589934592,
                   "defaultKernel": "/usr/share/kubicle/guest/vmlinux",
                   "defaultInitrd": "/usr/share/kubicle/guest/initramfs.cpio"}

# The chart's network defaults (values.yaml), to compare the rendered flags with.
NETWORK_DEFAULTS = {"enabled": True, "cidr": "10.200.0.0/16",
                    "nameservers": ["1.1.1.1", "8.8.8.8"], "pool": 4}


class Failure(Exception):
    pass


def find_helm():
    """The helm binary, or None when the control plane is not built."""
    bin_dir = os.environ.get("KUBICLE_CONTROL_PLANE_BIN")
    if not bin_dir:
        r = subprocess.run([str(REPO / "e2e/control-plane/build.sh"), "--print-bin-dir"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None
        bin_dir = r.stdout.strip()
    helm = pathlib.Path(bin_dir) / "helm"
    return str(helm) if os.access(helm, os.X_OK) else None


def kube_version():
    """The control plane's Kubernetes version (build.sh's KUBE_VERSION).

    helm built from source assumes v1.20 for `helm template`, which the
    chart's kubeVersion constraint refuses.
    """
    text = (REPO / "e2e/control-plane/build.sh").read_text()
    m = re.search(r"^KUBE_VERSION=(v[0-9.]+)", text, re.M)
    if not m:
        raise Failure("no KUBE_VERSION= in e2e/control-plane/build.sh")
    return m.group(1)


def render(helm, chart, values):
    """The documents `helm template` renders for `values`."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(values, f)
        f.flush()
        r = subprocess.run([helm, "template", "kubicle", chart, "-n", "kubicle-system",
                            "--kube-version", kube_version(), "-f", f.name],
                           capture_output=True, text=True)
    if r.returncode != 0:
        raise Failure(f"helm template failed:\n{r.stderr}")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def workload(docs, kind, component):
    matches = [d for d in docs if d.get("kind") == kind and
               d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == component]
    if len(matches) != 1:
        raise Failure(f"expected one {kind} for {component}, rendered {len(matches)}")
    return matches[0]


def expand(arg, container):
    """`arg` with $(VAR) expanded as the kubelet does, for the container's env."""
    declared = {e["name"] for e in container.get("env", [])}

    def one(m):
        name = m.group(1)
        if name not in declared:
            raise Failure(f"{container['name']}: {arg} references $({name}), "
                          "which the container does not declare")
        if name not in ENV_VALUES:
            raise Failure(f"{container['name']}: no test value for $({name}); add one")
        return ENV_VALUES[name]

    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", one, arg)


def command_line(container, binaries):
    """The container's command + args, expanded, with the built binary."""
    argv = [expand(a, container) for a in container.get("command", []) + container.get("args", [])]
    if not argv or argv[0] not in binaries:
        raise Failure(f"{container['name']}: runs {argv[:1]}, not one of {sorted(binaries)}")
    return [binaries[argv[0]]] + argv[1:]


def check_flags(argv):
    """(exit status, whether stdout has the "flags ok" line, output) of argv
    with --check-flags appended."""
    r = subprocess.run(argv + ["--check-flags"], capture_output=True, text=True, timeout=30)
    program = pathlib.Path(argv[0]).name
    ok_line = f"{program}: flags ok" in r.stdout.splitlines()
    return r.returncode, ok_line, r.stdout + r.stderr


def expect_ok(argv):
    rc, ok_line, out = check_flags(argv)
    if rc != 0 or not ok_line:
        raise Failure(f"{pathlib.Path(argv[0]).name} refused the chart's flags (exit {rc}):\n  "
                      + " ".join(argv[1:]) + "\n" + out)


def check_node_shape(container, values, argv):
    node = values.get("node", {})
    memory = node.get("capacity", {}).get("memoryMiB", 0)
    roots = node.get("imageRoots", ["/var/lib/kubicle/images"])
    if argv[1] != "serve":
        raise Failure(f"node runs {argv[:2]}, not kubicle-node serve")
    mem_flags = [a for a in argv if a.startswith("--capacity-mem")]
    want = [f"--capacity-mem={memory}"] if memory > 0 else []
    if mem_flags != want:
        raise Failure(f"memoryMiB {memory}: --capacity-mem flags {mem_flags}, want {want}")
    if [a for a in argv if a.startswith("--image-root")] != [f"--image-root={r}" for r in roots]:
        raise Failure(f"--image-root flags do not match imageRoots {roots}: {argv}")
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    for root in roots:
        if not mounts.get(root, {}).get("readOnly"):
            raise Failure(f"image root {root} is not mounted read-only")
    ports = [p["name"] for p in container.get("ports", [])]
    if ports != ["data-plane"]:
        raise Failure(f"node ports {ports}: want only data-plane (it serves /metrics)")
    # The data plane is TLS in a cluster (the binary's default there too).
    if "--tls=on" not in argv or "--insecure-http" in argv or "--tls=off" in argv:
        raise Failure(f"the node must serve its data plane with --tls=on: {argv}")
    want_probe = {"path": "/healthz", "port": "data-plane", "scheme": "HTTPS"}
    if container["livenessProbe"]["httpGet"] != want_probe:
        raise Failure(f"node liveness probe {container['livenessProbe']}, want httpGet {want_probe}")


def check_network_shape(pod_spec, container, values, argv):
    """The sandbox network's flags and privileges: all of them when it is on,
    none when it is off (least privilege)."""
    node = values.get("node", {})
    net = {**NETWORK_DEFAULTS, **node.get("network", {})}
    state_dir = node.get("stateDir", "/var/lib/kubicle")
    flags = [a for a in argv if a.startswith("--sandbox-")]
    security = container.get("securityContext", {})
    caps = set(security.get("capabilities", {}).get("add", []))
    bidirectional = [m for m in container.get("volumeMounts", [])
                     if m.get("mountPropagation") == "Bidirectional"]
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    if not net["enabled"]:
        if flags != ["--sandbox-network=off"]:
            raise Failure(f"network off: sandbox flags {flags}, want only --sandbox-network=off")
        if pod_spec.get("hostNetwork") or bidirectional or caps & {"NET_ADMIN", "SYS_ADMIN"}:
            raise Failure("network off: no hostNetwork, Bidirectional mount or NET_ADMIN/SYS_ADMIN "
                          f"(least privilege): {pod_spec}")
        return
    want = ["--sandbox-network=on", f"--sandbox-network-cidr={net['cidr']}",
            f"--sandbox-nameservers={','.join(net['nameservers'])}",
            f"--sandbox-network-pool={net['pool']}"]
    if flags != want:
        raise Failure(f"network on: sandbox flags {flags}, want {want}")
    # Veths, routes and the host table belong on the host's network.
    if pod_spec.get("hostNetwork") is not True or pod_spec.get("dnsPolicy") != "ClusterFirstWithHostNet":
        raise Failure("network on: the node needs hostNetwork with dnsPolicy ClusterFirstWithHostNet")
    if not {"NET_ADMIN", "SYS_ADMIN"} <= caps:
        raise Failure(f"network on: capabilities {sorted(caps)} lack NET_ADMIN and SYS_ADMIN")
    # Kubernetes refuses Bidirectional propagation outside privileged containers.
    if security.get("privileged") is not True:
        raise Failure("network on: Bidirectional propagation needs a privileged container")
    netns = f"{state_dir}/netns"
    if [m["mountPath"] for m in bidirectional] != [netns]:
        raise Failure(f"network on: Bidirectional mounts {bidirectional}, want exactly {netns}")
    if volumes[bidirectional[0]["name"]].get("hostPath", {}).get("path") != netns:
        raise Failure(f"{netns} is not the same host path")


def check_vmm_placement(pod_spec, container, argv):
    """VMMs outlive the node's container (a rollout keeps every VM): the
    host's PID namespace and the host's cgroup hierarchy as --cgroup-root,
    and the node refuses to start when that does not hold."""
    if pod_spec.get("hostPID") is not True:
        raise Failure("the node needs hostPID: its own PID namespace would die with it, VMMs too")
    if "--vmms-outlive-container" not in argv or "--no-cgroups" in argv:
        raise Failure(f"the node must run with --vmms-outlive-container and cgroups: {argv}")
    roots = [a.split("=", 1)[1] for a in argv if a.startswith("--cgroup-root=")]
    if len(roots) != 1:
        raise Failure(f"want one --cgroup-root=: {argv}")
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    mount = mounts.get(roots[0])
    if mount is None or volumes[mount["name"]].get("hostPath", {}).get("path") != "/sys/fs/cgroup":
        raise Failure(f"--cgroup-root {roots[0]} is not the host's /sys/fs/cgroup mounted there")


def check_uninstall_hook(docs, values, binaries):
    """The pre-delete hook: a Job running `kubicle-node uninstall` under a
    ServiceAccount that may list and delete Sandboxes and SandboxForks and
    nothing else, its RBAC made before it (lower hook weight)."""
    hooks = {(d["kind"], d["metadata"]["name"]): d for d in docs
             if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "pre-delete"}
    kinds = sorted(k for k, _ in hooks)
    if kinds != ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]:
        raise Failure(f"pre-delete hooks {kinds}: want the uninstall Job and its RBAC")
    by_kind = {k: d for (k, _), d in hooks.items()}
    job, role, binding, sa = (by_kind[k] for k in ("Job", "ClusterRole", "ClusterRoleBinding", "ServiceAccount"))
    want_rules = [{"apiGroups": ["kubicle.dev"], "resources": ["sandboxes", "sandboxforks"],
                   "verbs": ["list", "delete"]}]
    if role["rules"] != want_rules:
        raise Failure(f"uninstall ClusterRole {role['rules']}: want exactly {want_rules}")
    if binding["roleRef"]["name"] != role["metadata"]["name"] or \
            binding["subjects"] != [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                     "namespace": sa["metadata"]["namespace"]}]:
        raise Failure(f"uninstall ClusterRoleBinding does not bind its role to its account: {binding}")
    weight = lambda d: int(d["metadata"]["annotations"].get("helm.sh/hook-weight", "0"))
    if not all(weight(d) < weight(job) for d in (role, binding, sa)):
        raise Failure("the uninstall Job's RBAC must come first (lower helm.sh/hook-weight)")
    pod = job["spec"]["template"]["spec"]
    if pod["serviceAccountName"] != sa["metadata"]["name"] or pod["restartPolicy"] != "Never":
        raise Failure(f"uninstall pod: account {pod['serviceAccountName']}, restart {pod['restartPolicy']}")
    (c,) = pod["containers"]
    sc = c.get("securityContext", {})
    if sc.get("privileged") or sc.get("allowPrivilegeEscalation") is not False or \
            sc.get("runAsNonRoot") is not True or sc.get("capabilities", {}).get("drop") != ["ALL"]:
        raise Failure(f"uninstall container is not least privilege: {sc}")
    argv = command_line(c, binaries)
    if argv[1] != "uninstall":
        raise Failure(f"uninstall Job runs {argv}")
    timeout = values.get("uninstall", {}).get("timeoutSeconds", 240)
    if f"--timeout-seconds={timeout}" not in argv or \
            job["spec"].get("activeDeadlineSeconds", 0) <= timeout:
        raise Failure(f"uninstall Job: {argv}, deadline {job['spec'].get('activeDeadlineSeconds')}: "
                      f"want --timeout-seconds={timeout} and the Job's deadline after it")
    expect_ok(argv)


def check_host_paths(pod_spec, container):
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    for m in container.get("volumeMounts", []):
        if m["name"] not in volumes:
            raise Failure(f"mount {m['mountPath']} uses undeclared volume {m['name']}")
        host = volumes[m["name"]].get("hostPath")
        if m.get("readOnly") and host is not None and host.get("path") != m["mountPath"]:
            raise Failure(f"image root {m['mountPath']} is not the same host path")


def check_images_shape(pod_spec, container, values, argv):
    """node.images: its flags, the image store's hostPath when it is not
    under the state directory, and the registry credentials and CA as files
    from their Secret and ConfigMap (the node never reads Secrets through the
    API); none of those mounts when not asked for."""
    img = {**IMAGES_DEFAULTS, **values.get("node", {}).get("images", {})}
    want = ([f"--image-store={img['store']}"] if img["store"] else []) + \
        (["--registry-config=/etc/kubicle/registry/config.json"] if img["registryConfigSecret"] else []) + \
        [f"--insecure-registry={r}" for r in img["insecureRegistries"]] + \
        (["--registry-ca=/etc/kubicle/registry-ca/ca.crt"] if img["registryCAConfigMap"] else []) + \
        [f"--max-image-bytes={img['maxImageBytes']}", f"--default-kernel={img['defaultKernel']}"] + \
        ([f"--default-initrd={img['defaultInitrd']}"] if img["defaultInitrd"] else [])
    names = ("--image-store", "--registry-", "--insecure-registry", "--max-image-bytes", "--default-")
    flags = [a for a in argv if a.startswith(names)]
    if flags != want:
        raise Failure(f"node.images {img}: flags {flags}, want {want}")
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    source = lambda path: volumes[mounts[path]["name"]] if path in mounts else None
    if img["store"] and (source(img["store"]) or {}).get("hostPath", {}).get("path") != img["store"]:
        raise Failure(f"image store {img['store']} is not its hostPath mounted there")
    secret = source("/etc/kubicle/registry")
    if bool(secret) != bool(img["registryConfigSecret"]):
        raise Failure(f"registry config mount {secret} for registryConfigSecret {img['registryConfigSecret']!r}")
    if secret and (secret.get("secret", {}).get("secretName") != img["registryConfigSecret"] or
                   secret["secret"].get("items") != [{"key": ".dockerconfigjson", "path": "config.json"}] or
                   not mounts["/etc/kubicle/registry"].get("readOnly")):
        raise Failure(f"registry config is not the Secret's .dockerconfigjson, read-only: {secret}")
    ca = source("/etc/kubicle/registry-ca")
    if bool(ca) != bool(img["registryCAConfigMap"]) or \
            (ca and ca.get("configMap", {}).get("name") != img["registryCAConfigMap"]):
        raise Failure(f"registry CA mount {ca} for registryCAConfigMap {img['registryCAConfigMap']!r}")


def check_case(helm, chart, binaries, name, values):
    docs = render(helm, chart, values)
    ds = workload(docs, "DaemonSet", "node")["spec"]["template"]["spec"]
    (node,) = ds["containers"]
    node_argv = command_line(node, binaries)
    check_node_shape(node, values, node_argv)
    check_network_shape(ds, node, values, node_argv)
    check_host_paths(ds, node)
    check_images_shape(ds, node, values, node_argv)
    check_vmm_placement(ds, node, node_argv)
    check_uninstall_hook(docs, values, binaries)
    expect_ok(node_argv)
    dep = workload(docs, "Deployment", "operator")["spec"]["template"]["spec"]
    (op,) = dep["containers"]
    op_argv = command_line(op, binaries)
    enabled = values.get("operator", {}).get("leaderElection", {}).get("enabled", True)
    if f"--leader-elect={str(enabled).lower()}" not in op_argv:
        raise Failure(f"operator args lack --leader-elect={str(enabled).lower()}: {op_argv}")
    expect_ok(op_argv)
    for doc in docs:
        if doc.get("kind") == "Service":
            for p in doc["spec"]["ports"]:
                pod = ds if doc["metadata"]["labels"]["app.kubernetes.io/component"] == "node" else dep
                names = {cp["name"] for c in pod["containers"] for cp in c.get("ports", [])}
                if p["targetPort"] not in names:
                    raise Failure(f"Service {doc['metadata']['name']} targets missing port "
                                  f"{p['targetPort']}")
    print(f"ok   {name}: {' '.join(node_argv[1:])}")


def self_check(operator, node):
    """A bad flag or value must make --check-flags fail."""
    bad = [
        [node, "serve", "--state-dir=/s", "--no-such-flag=1"],
        [node, "serve", "--state-dir=/s", "--data-plane-port=7443"],  # the chart's old flag
        [node, "serve", "--state-dir=/s", "--node-name=n", "--lease-duration-seconds=5"],
        [node, "--state-dir=/s"],  # no serve
        [node, "serve", "--state-dir=/s", "--sandbox-network=off", "--sandbox-network-cidr=10.77.0.0/16"],
        [node, "serve", "--state-dir=/s", "--sandbox-network=maybe"],
        [node, "serve", "--state-dir=/s", "--node-name=n", "--insecure-registry=http://reg:5000"],
        [node, "uninstall", "--timeout-seconds=0"],
        [operator, "--no-such-flag=1"],
        [operator, "--workers=many"],
    ]
    for argv in bad:
        rc, ok_line, _ = check_flags(argv)
        if rc == 0 or ok_line:
            raise Failure(f"--check-flags accepted a bad command line: {' '.join(argv)}")
    expect_ok([node, "serve", "--state-dir=/s"])
    expect_ok([operator])


def main(argv):
    if len(argv) != 4:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    operator, node, chart = argv[1:]
    binaries = {"/usr/bin/kubicle-operator": operator, "/usr/bin/kubicle-node": node}
    helm = find_helm()
    try:
        self_check(operator, node)
        if helm is None:
            print("SKIP: no helm: build the control plane with e2e/control-plane/build.sh "
                  "(or set KUBICLE_CONTROL_PLANE_BIN)")
            return SKIP
        for name, values in CASES:
            check_case(helm, chart, binaries, name, values)
    except Failure as e:
        print(f"FAIL: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
