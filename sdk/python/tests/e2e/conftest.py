"""The e2e tier's fixture: one real stack (control plane, operator, node
with the test guest) for the whole session. Missing /dev/kvm or binaries
end the run with status 77, which CTest reports as skipped."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from stack import Missing, Stack  # noqa: E402


@pytest.fixture(scope="session")
def stack():
    s = Stack()
    try:
        s.start()
    except Missing as e:
        pytest.exit(f"skipped: {e}", returncode=77)
    yield s
    left = s.stop()
    print(f"\nstack logs in {s.logs}")
    assert not left, f"kubicle-vmm processes outlived kubicle-node: {left}"


@pytest.fixture
def kube(stack):
    import kubicle

    with kubicle.Kubicle(kubeconfig=stack.kubeconfig) as k:
        yield k


@pytest.fixture
async def akube(stack):
    import kubicle

    async with kubicle.AsyncKubicle(kubeconfig=stack.kubeconfig) as k:
        yield k
