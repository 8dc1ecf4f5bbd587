"""Command-line options the SDK examples share: where Kubicle is."""

from __future__ import annotations

import argparse
import os
import sys

# In a checkout the examples use the checkout's SDK; elsewhere the installed
# one (pip install ./sdk/python).
_TREE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk", "python", "src")
if os.path.isdir(os.path.join(_TREE, "kubicle")):
    sys.path.insert(0, _TREE)
import kubicle  # noqa: E402


def add_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("where Kubicle is (default: Kubernetes from the kubeconfig)")
    g.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, $KUBECONFIG, "
                                        "~/.kube/config)")
    g.add_argument("--context", help="kubeconfig context")
    g.add_argument("--namespace", help="namespace (default: the context's)")
    g.add_argument("--node-url", help="a standalone kubicle-node instead of Kubernetes")
    g.add_argument("--token", help="the node's admin token (default $KUBICLE_NODE_TOKEN)")
    g.add_argument("--ca-file", help="the CA a standalone https node is verified against "
                                     "(default $KUBICLE_NODE_CA_FILE; with Kubernetes each "
                                     "node's CA comes from its Lease)")


def client(args: argparse.Namespace) -> "kubicle.Kubicle":
    if args.node_url:
        return kubicle.Kubicle(node_url=args.node_url, token=args.token,
                               verify=args.ca_file or True)
    return kubicle.Kubicle(kubeconfig=args.kubeconfig, context=args.context,
                           namespace=args.namespace)
