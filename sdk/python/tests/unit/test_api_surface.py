"""The public API as docs/sdk.md describes it: every exported class, each
public method's signature and whether it is a coroutine, each property,
and each error's bases, held to a golden file (api_surface.txt). A change
here is a change of the SDK's contract: make it on purpose, in the docs
too, and regenerate with ``python3 tests/unit/test_api_surface.py``."""

import inspect
import os
import sys

GOLDEN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "api_surface.txt")
_DUNDERS = ("__init__", "__enter__", "__exit__", "__aenter__", "__aexit__")


def surface() -> str:
    import kubicle

    out = [f"version {kubicle.__version__}"]
    for name in sorted(kubicle.__all__):
        obj = getattr(kubicle, name)
        if issubclass(obj, BaseException):
            out.append(f"{name} bases={[b.__name__ for b in obj.__mro__[1:]]}")
            continue
        members = sorted({m for k in obj.__mro__[:-1] for m in vars(k)})
        for m in members:
            if m.startswith("_") and m not in _DUNDERS:
                continue
            static = inspect.getattr_static(obj, m)
            if isinstance(static, property):
                out.append(f"{name}.{m} property")
            elif callable(static) or isinstance(static, (staticmethod, classmethod)):
                v = getattr(obj, m)
                kind = "async " if inspect.iscoroutinefunction(v) else ""
                out.append(f"{name}.{m} {kind}{inspect.signature(v)}")
            else:
                out.append(f"{name}.{m} = {static!r}")
    return "\n".join(out) + "\n"


def test_the_public_api_is_the_documented_one():
    with open(GOLDEN) as f:
        assert surface() == f.read()


def test_the_sync_and_async_clients_offer_the_same_calls():
    import kubicle

    for sync, aio in (("Kubicle", "AsyncKubicle"), ("Sandboxes", "AsyncSandboxes"),
                      ("Sandbox", "AsyncSandbox"), ("Filesystem", "AsyncFilesystem"),
                      ("Workspaces", "AsyncWorkspaces")):
        s, a = getattr(kubicle, sync), getattr(kubicle, aio)
        names = {m for m in dir(s) if not m.startswith("_")} - {"close"}
        assert names <= {m for m in dir(a) if not m.startswith("_")}, (sync, aio)
        for m in names:
            if callable(getattr(s, m)) and not isinstance(inspect.getattr_static(s, m), property):
                assert inspect.signature(getattr(s, m)).parameters.keys() == \
                    inspect.signature(getattr(a, m)).parameters.keys(), (sync, m)


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(GOLDEN), "..", "..", "src"))
    with open(GOLDEN, "w") as f:
        f.write(surface())
    print(f"wrote {GOLDEN}")
