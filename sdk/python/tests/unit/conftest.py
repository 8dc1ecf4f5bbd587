"""Fixtures: a fake node, a fake cluster in front of it, and clients of both;
the same with the node serving TLS under a CA of its own."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from fake_kube import FakeCluster  # noqa: E402
from fake_node import FakeNode  # noqa: E402
from tls_certs import make_ca, serving_pair  # noqa: E402

import kubicle  # noqa: E402


@pytest.fixture
def node():
    n = FakeNode()
    yield n
    n.close()


@pytest.fixture
def cluster(node):
    c = FakeCluster(node)
    yield c
    c.close()


@pytest.fixture
def kubeconfig(cluster, tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return cluster.kubeconfig(str(tmp_path / "kubeconfig"))


@pytest.fixture
def kube(kubeconfig):
    k = kubicle.Kubicle(kubeconfig=kubeconfig)
    yield k
    k.close()


@pytest.fixture
def standalone(node):
    k = kubicle.Kubicle(node_url=node.url, token=node.admin_token)
    yield k
    k.close()


@pytest.fixture
async def akube(kubeconfig):
    async with kubicle.AsyncKubicle(kubeconfig=kubeconfig) as k:
        yield k


@pytest.fixture
async def astandalone(node):
    async with kubicle.AsyncKubicle(node_url=node.url, token=node.admin_token) as k:
        yield k


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
