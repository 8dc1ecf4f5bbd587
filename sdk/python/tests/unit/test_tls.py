"""The data plane over TLS: the SDK verifies each node against the CA its
Lease publishes (kubicle.dev/serving-ca), never by turning verification
off, and never falls back to plain http for a node that publishes one."""

import pytest

import kubicle
from kubicle import errors

from fake_kube import publish_ca
from tls_certs import make_ca


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
