"""The data plane over TLS: the SDK verifies each node against the CA its
Lease publishes (kubicle.dev/serving-ca), never by turning verification
off, and never falls back to plain http for a node that publishes one."""

import pytest

import kubicle
from kubicle import errors

from fake_kube import FakeCluster
from fake_node import FakeNode
from tls_certs import make_ca, serving_pair


@pytest.fixture
def tls_node(tmp_path):
    ca = make_ca()
    n = FakeNode(tls=serving_pair(str(tmp_path), ca))
    n.ca_pem = ca.pem
    yield n
    n.close()


@pytest.fixture
def tls_cluster(tls_node):
    c = FakeCluster(tls_node)
    yield c
    c.close()


@pytest.fixture
def tls_kubeconfig(tls_cluster, tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return tls_cluster.kubeconfig(str(tmp_path / "kubeconfig"))


def publish_ca(cluster, pem):
    # The node's heartbeat Lease, as kubicle-node writes it.
    cluster.create("leases", "kubicle-node-lease", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "kubicle-node-n1", "labels": {"kubicle.dev/node": "n1"},
                     "annotations": {"kubicle.dev/serving-ca": pem}},
        "spec": {"holderIdentity": "n1", "leaseDurationSeconds": 40}})


def test_exec_verifies_the_node_against_the_ca_on_its_lease(tls_kubeconfig, tls_cluster, tls_node):
    publish_ca(tls_cluster, tls_node.ca_pem)
    with kubicle.Kubicle(kubeconfig=tls_kubeconfig) as k:
        sb = k.sandboxes.create("tg")
        assert sb.exec(["echo", "over", "tls"]).stdout == "over tls\n"
        sb.files.write("/tmp/f", b"x")
        assert sb.files.read("/tmp/f") == "x"
        assert any(m == "POST" and p.endswith("/exec") for m, p, _ in tls_node.requests)
        sb.delete()


def test_a_node_with_another_ca_is_refused_not_trusted(tls_kubeconfig, tls_cluster, tls_node):
    publish_ca(tls_cluster, make_ca("someone else's CA").pem)
    with kubicle.Kubicle(kubeconfig=tls_kubeconfig) as k:
        with pytest.raises(errors.KubicleError) as e:
            k.sandboxes.create("tg")
        assert "certificate" in str(e.value).lower() or e.value.reason == "Unreachable", e.value
    assert not any(p.endswith("/exec") for _, p, _ in tls_node.requests)


def test_a_lease_without_a_ca_means_plain_http(kube, node):
    # The fake cluster's node publishes no CA: the protocol's plain http.
    sb = kube.sandboxes.create("tg")
    assert sb.exec(["echo", "plain"]).stdout == "plain\n"


async def test_async_client_verifies_against_the_lease_ca_too(tls_kubeconfig, tls_cluster, tls_node):
    publish_ca(tls_cluster, tls_node.ca_pem)
    async with kubicle.AsyncKubicle(kubeconfig=tls_kubeconfig) as k:
        sb = await k.sandboxes.create("tg")
        assert (await sb.exec(["echo", "async"])).stdout == "async\n"
        await sb.delete()
