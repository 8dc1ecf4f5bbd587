"""Kubicle() and AsyncKubicle() in a pod: with KUBERNETES_SERVICE_HOST set
and no kubeconfig, the service account's token, CA and namespace, through
each Kubernetes client's own InClusterConfigLoader. The fake apiserver
serves https with its own CA (the loaders know no other scheme) and takes
only the service account's token; the account's directory is a temporary
one (kubicle._kube.SERVICEACCOUNT_DIR, the one override the SDK has)."""

import os

import pytest

import kubicle
from kubicle import _kube, errors

from fake_kube import FakeCluster
from tls_certs import make_ca, serving_pair

SA_TOKEN = "eyJhbGciOiJSUzI1NiJ9.service-account-token.sig"


@pytest.fixture
def pod_cluster(node, tmp_path):
    ca = make_ca("fake kube-apiserver CA")
    c = FakeCluster(node, tls=serving_pair(str(tmp_path), ca), ca_pem=ca.pem)
    c.token = SA_TOKEN   # any other credential is 401, as the apiserver does
    yield c
    c.close()


@pytest.fixture
def pod(pod_cluster, tmp_path, monkeypatch):
    """The pod's environment: the service's address and the mounted account
    (token without a newline, as the kubelet writes it)."""
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(SA_TOKEN)
    (sa / "namespace").write_text("agents")
    (sa / "ca.crt").write_text(pod_cluster.ca_pem)
    monkeypatch.setattr(_kube, "SERVICEACCOUNT_DIR", str(sa))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(pod_cluster.port))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return sa


def test_the_default_directory_is_the_kubelets():
    assert _kube.SERVICEACCOUNT_DIR == "/var/run/secrets/kubernetes.io/serviceaccount"
    assert _kube.incluster_files() == {
        "token_filename": "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "cert_filename": "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"}


def test_incluster_token_namespace_and_create(pod, pod_cluster, node):
    with kubicle.Kubicle() as k:
        assert k.mode == "kubernetes" and k.namespace == "agents"
        sb = k.sandboxes.create("tg", metadata={"run": "pod"})
        assert pod_cluster.get("sandboxes", "agents", sb.name) is not None
        assert sb.exec(["echo", "from", "a", "pod"]).stdout == "from a pod\n"
        # The data plane has the Sandbox's own token, not the account's.
        assert node.sandboxes[sb.id].takes(sb._ref.token) and sb._ref.token != SA_TOKEN
        sb.delete()
        assert pod_cluster.get("sandboxes", "agents", sb.name) is None
    # Every call the apiserver saw carried the account's token, verbatim.
    assert pod_cluster.auth_headers
    assert pod_cluster.bearer_tokens() == [SA_TOKEN] * len(pod_cluster.auth_headers)


def test_incluster_namespace_argument_wins(pod, pod_cluster):
    with kubicle.Kubicle(namespace="other") as k:
        assert k.namespace == "other"
        sb = k.sandboxes.create("tg", name="in-other")
        assert pod_cluster.get("sandboxes", "other", "in-other") is not None
        assert pod_cluster.get("sandboxes", "agents", "in-other") is None
        sb.delete()


def test_incluster_without_a_namespace_file_is_default(pod, pod_cluster):
    os.remove(pod / "namespace")
    with kubicle.Kubicle() as k:
        assert k.namespace == "default"
        k.sandboxes.create("tg", name="d").delete()


def test_incluster_token_refused_is_an_auth_error(pod, pod_cluster):
    (pod / "token").write_text("another-token")
    with kubicle.Kubicle() as k:
        with pytest.raises(errors.AuthError) as e:
            k.sandboxes.create("tg", timeout=10)
    assert e.value.status_code == 401 and e.value.reason == "Unauthorized"
    assert not pod_cluster.list("sandboxes", "agents")


def test_a_kubeconfig_wins_over_the_pods_account(pod, pod_cluster, tmp_path, monkeypatch):
    # KUBERNETES_SERVICE_HOST is set, but a kubeconfig (argument or
    # $KUBECONFIG) is used as it is: its namespace and its credential.
    kc = pod_cluster.kubeconfig(str(tmp_path / "kubeconfig"), namespace="team-a")
    pod_cluster.token = "fake-token"   # the kubeconfig's user
    with kubicle.Kubicle(kubeconfig=kc) as k:
        assert k.namespace == "team-a"
        k.sandboxes.create("tg", name="kc").delete()
    monkeypatch.setenv("KUBECONFIG", kc)
    with kubicle.Kubicle() as k:
        assert k.namespace == "team-a"
    assert set(pod_cluster.bearer_tokens()) == {"fake-token"}


async def test_async_incluster_token_namespace_and_create(pod, pod_cluster, node):
    async with kubicle.AsyncKubicle() as k:
        assert k.namespace == "agents"
        sb = await k.sandboxes.create("tg", metadata={"run": "apod"})
        assert pod_cluster.get("sandboxes", "agents", sb.name) is not None
        assert (await sb.exec(["echo", "async", "pod"])).stdout == "async pod\n"
        assert node.sandboxes[sb.id].takes(sb._ref.token)
        await sb.delete()
        assert pod_cluster.get("sandboxes", "agents", sb.name) is None
    assert pod_cluster.auth_headers
    assert pod_cluster.bearer_tokens() == [SA_TOKEN] * len(pod_cluster.auth_headers)


async def test_async_incluster_namespace_argument_and_refused_token(pod, pod_cluster):
    async with kubicle.AsyncKubicle(namespace="other") as k:
        assert k.namespace == "other"
        sb = await k.sandboxes.create("tg", name="a-other")
        assert pod_cluster.get("sandboxes", "other", "a-other") is not None
        await sb.delete()
    (pod / "token").write_text("another-token")
    async with kubicle.AsyncKubicle() as k:
        with pytest.raises(errors.AuthError) as e:
            await k.sandboxes.create("tg", timeout=10)
    assert e.value.status_code == 401 and e.value.reason == "Unauthorized"


async def test_async_a_kubeconfig_wins_over_the_pods_account(pod, pod_cluster, tmp_path,
                                                              monkeypatch):
    kc = pod_cluster.kubeconfig(str(tmp_path / "kubeconfig"), namespace="team-a")
    pod_cluster.token = "fake-token"
    monkeypatch.setenv("KUBECONFIG", kc)   # after the clients were imported: read now
    async with kubicle.AsyncKubicle() as k:
        assert k.namespace == "team-a"
        await (await k.sandboxes.create("tg", name="akc")).delete()
    assert set(pod_cluster.bearer_tokens()) == {"fake-token"}
