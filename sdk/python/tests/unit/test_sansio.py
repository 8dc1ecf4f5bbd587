"""The core without I/O: the drivers (_sansio.py) and the operations both
clients share, driven on scripted transports. The same operation object
runs on the blocking driver and the asyncio one and must do the same."""

import asyncio
import base64
import types

import httpx
import pytest

from kubicle import _http, _kobj, _kube, _sansio, errors
from kubicle._sansio import call, shielded


class Script:
    """A transport whose steps answer from a table: a value, or an
    exception to raise. Every step is recorded; async=True makes each step
    a coroutine, as the asyncio transport's are."""

    def __init__(self, answers, asynchronous=False):
        self.answers, self.asynchronous, self.calls = answers, asynchronous, []

    def __getattr__(self, name):
        def step(*args, **kw):
            self.calls.append((name, args, kw))
            answer = self.answers[name]
            out = answer(*args, **kw) if callable(answer) else answer
            if isinstance(out, BaseException):
                raise out
            return out

        async def astep(*args, **kw):
            await asyncio.sleep(0)
            return step(*args, **kw)
        return astep if self.asynchronous else step


def drive(op, io):
    """Runs ``op`` on the driver that matches the transport."""
    if io.asynchronous:
        return asyncio.run(_sansio.run_async(op, io))
    return _sansio.run(op, io)


def counting():
    """An operation that adds what two steps answer; a failed step is
    retried once, and the failure recorded in the result."""
    total, seen = 0, []
    for key in ("a", "b"):
        try:
            total += yield call("get", key)
        except KeyError as e:
            seen.append(str(e))
            total += yield call("get", key + "-again")
    return total, seen


@pytest.mark.parametrize("asynchronous", [False, True])
def test_both_drivers_send_results_and_throw_errors_into_the_operation(asynchronous):
    table = {"a": 1, "b": KeyError("b gone"), "b-again": 40}
    io = Script({"get": lambda k: table[k]}, asynchronous)
    assert drive(counting(), io) == (41, ["'b gone'"])
    assert [c[1][0] for c in io.calls] == ["a", "b", "b-again"]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_an_error_the_operation_does_not_catch_reaches_the_caller(asynchronous):
    io = Script({"get": ValueError("no")}, asynchronous)
    with pytest.raises(ValueError, match="no"):
        drive(counting(), io)


def test_a_shielded_cleanup_finishes_although_the_task_is_cancelled():
    done = []

    class IO:
        async def slow(self):
            await asyncio.sleep(30)

        async def cleanup(self):
            await asyncio.sleep(0.05)   # cancelled again meanwhile: still finishes
            done.append("cleaned")

    def op():
        try:
            yield call("slow")
        except BaseException:
            yield shielded("cleanup")
            raise

    async def main():
        task = asyncio.ensure_future(_sansio.run_async(op(), IO()))
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.1)

    asyncio.run(main())
    assert done == ["cleaned"]


def streaming(log):
    """Emits three chunks from an opened stream, closing it however it ends."""
    handle = yield call("open")
    try:
        for i in range(3):
            yield _sansio.Emit(f"chunk{i}")
    finally:
        yield call("close", handle)
        log.append("closed")


def test_iterate_hands_out_what_an_operation_emits_and_closes_on_an_early_stop():
    log = []
    io = Script({"open": "h", "close": None})
    assert list(_sansio.iterate(streaming(log), io)) == ["chunk0", "chunk1", "chunk2"]
    assert log == ["closed"]
    it = _sansio.iterate(streaming(log), io)
    assert next(it) == "chunk0"
    it.close()                            # the caller stopped reading
    assert log == ["closed", "closed"] and io.calls[-1] == ("close", ("h",), {})


def test_aiterate_closes_on_an_early_stop_too():
    log = []
    io = Script({"open": "h", "close": None}, asynchronous=True)

    async def main():
        got = [c async for c in _sansio.aiterate(streaming(log), io)]
        it = _sansio.aiterate(streaming(log), io)
        first = await it.__anext__()
        await it.aclose()
        return got, first

    assert asyncio.run(main()) == (["chunk0", "chunk1", "chunk2"], "chunk0")
    assert log == ["closed", "closed"]


def test_each_runs_a_stream_inside_an_operation():
    log, got = [], []

    def outer():
        yield from _sansio.each(streaming(log), got.append)
        return len(got)

    assert _sansio.run(outer(), Script({"open": "h", "close": None})) == 3
    assert got == ["chunk0", "chunk1", "chunk2"] and log == ["closed"]


# --- KubeBackend's state machines on a scripted apiserver -------------------

def _backend():
    b = _kube.KubeBackend(namespace="ns", kubeconfig=None, context=None, pool_size=4,
                          transport=_http.TransportConfig(), make_client=lambda cfg: None,
                          client="Kubicle")
    b.started = True
    return b


def _sbx(name, rv, ready=False):
    o = {"metadata": {"name": name, "uid": f"u-{name}", "resourceVersion": str(rv),
                      "labels": {"kubicle.dev/node": "n1"}}, "spec": {}, "status": {}}
    if ready:
        o["status"] = {"tokenSecretName": f"{name}-token", "vm": {"endpoint": "h:1"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
    return o


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_watch_relists_after_410_and_watches_again_after_a_broken_stream(asynchronous):
    """_watch (the wait of a resourceVersion that is not a number, and of
    Workspaces): list, watch, 410 -> list again, a broken stream -> watch
    again from the last resourceVersion, until the step is satisfied."""
    lists = iter([{"items": [_sbx("a", 5)], "metadata": {"resourceVersion": "5"}},
                  {"items": [_sbx("a", 5)], "metadata": {"resourceVersion": "9"}}])
    streams = iter([
        [errors.ApiError("too old", status_code=410)],
        [{"type": "ADDED", "object": _sbx("a", 10)}, _kobj.StreamBroken("reset")],
        [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "11"}}},
         {"type": "MODIFIED", "object": _sbx("a", 12, ready=True)}],
    ])
    watched = []

    def watch(args, kw, what):
        watched.append(kw["resource_version"])
        return iter(next(streams))

    def step_next(events):
        ev = next(events, None)
        if isinstance(ev, BaseException):
            raise ev
        return ev

    io = Script({"kube": lambda *a, **kw: next(lists), "watch": watch, "next": step_next,
                 "close_watch": None, "sleep": None}, asynchronous)
    step = _kobj.ReadyStep("a", False)
    r, objs = drive(_backend()._watch(_kobj.SANDBOXES, 30, step,
                                      field_selector="metadata.name=a"), io)
    assert r["metadata"]["resourceVersion"] == "12" and set(objs) == {"a"}
    assert watched == ["5", "9", "10"]              # 410: relisted; broken: from rv 10
    assert [c[0] for c in io.calls].count("sleep") == 1
    assert [c[0] for c in io.calls].count("close_watch") == 3


class Resp:
    def __init__(self, status, body=b"{}"):
        self.status_code, self.content = status, body


@pytest.mark.parametrize("asynchronous", [False, True])
def test_create_replaces_a_sandbox_whose_vm_refuses_its_token(asynchronous):
    """The token check and its retries: the first Sandbox's VM answers 401,
    so it is deleted (as a cleanup step) and another made, whose VM
    answers 200."""
    made = iter([_sbx("tg-1", 20), _sbx("tg-2", 30)])
    answers = iter([Resp(401, b'{"error": {"code": "Unauthenticated", "message": "no"}}'),
                    Resp(200)])

    def kube(api, method, *args, **kw):
        if method == "create_namespaced_custom_object":
            return next(made)
        if method == "delete_namespaced_custom_object":
            return None
        if method == "read_namespaced_secret":
            return types.SimpleNamespace(data={"token": base64.b64encode(b"t").decode()})
        if method == "read_namespaced_lease":
            return errors.SandboxNotFoundError("no lease", status_code=404)
        raise AssertionError(method)

    def wait(namespace, step, select, min_rv, timeout):
        return _sbx(step.name, min_rv + 1, ready=True), {}

    io = Script({"kube": kube, "wait": wait, "request": lambda *a, **kw: next(answers)},
                asynchronous)
    ref = drive(_backend().create(template="tg", name=None, labels={}, ttl_seconds=None,
                                  env=None, resources=None, timeout=30, wait_pending=False), io)
    assert ref.info.name == "tg-2" and ref.token == "t"
    assert ref.base == "http://h:1/v1/sandboxes/k-u-tg-2"
    deletes = [c for c in io.calls if c[0] == "kube" and c[1][1].startswith("delete")]
    assert [d[1][6] for d in deletes] == ["tg-1"]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_create_with_its_own_token_reads_no_secret_and_is_not_replaced(asynchronous):
    """The client's own token: the create carries its hash, the Ready
    object echoes it (spec and status), no Secret is read and the token is
    checked at the node; a VM refusing it is no Secret race, so the
    Sandbox is deleted and the AuthError raised, not another made."""
    made = []

    def kube(api, method, *args, **kw):
        if method == "create_namespaced_custom_object":
            body = args[4]
            obj = _sbx(f"tg-{len(made) + 1}", 20 + len(made))
            obj["spec"] = dict(body["spec"])
            made.append(obj)
            return obj
        if method == "delete_namespaced_custom_object":
            return None
        if method == "read_namespaced_lease":
            return errors.SandboxNotFoundError("no lease", status_code=404)
        raise AssertionError(method)   # never read_namespaced_secret

    def wait(namespace, step, select, min_rv, timeout):
        obj = _sbx(step.name, min_rv + 1, ready=True)
        obj["spec"] = made[-1]["spec"]
        del obj["status"]["tokenSecretName"]
        obj["status"]["tokenSha256"] = obj["spec"]["tokenSha256"]
        return obj, {}

    answers = iter([Resp(200), Resp(401, b'{"error": {"code": "Unauthenticated", "message": "no"}}')])
    io = Script({"kube": kube, "wait": wait, "request": lambda *a, **kw: next(answers)},
                asynchronous)
    b = _backend()
    kw = dict(template="tg", name=None, labels={}, ttl_seconds=None, env=None, resources=None,
              timeout=30, wait_pending=False)
    ref = drive(b.create(**kw), io)
    assert _kobj.token_sha256(ref.token) == made[0]["spec"]["tokenSha256"]
    assert ref.base == "http://h:1/v1/sandboxes/k-u-tg-1"
    assert b._own_tokens == {"u-tg-1": ("tg-1", ref.token)}
    with pytest.raises(errors.AuthError):
        drive(b.create(**kw), io)
    assert len(made) == 2   # not replaced
    deletes = [c for c in io.calls if c[0] == "kube" and c[1][1].startswith("delete")]
    assert [d[1][6] for d in deletes] == ["tg-2"]
    assert list(b._own_tokens) == ["u-tg-1"]


def test_a_closed_backend_refuses_new_calls():
    b = _backend()
    io = Script({"close_kube": None, "close_http": None})
    _sansio.run(b.close(), io)
    with pytest.raises(errors.KubicleError, match="client is closed") as e:
        _sansio.run(b.get("x"), io)
    assert e.value.reason == "Closed"


def test_a_node_call_maps_transport_failures_and_error_answers():
    def failing(*a, **kw):
        return httpx.ConnectError("refused")

    with pytest.raises(errors.ApiError) as e:
        _sansio.run(_http.send(None, "GET", "http://n/x", op="get", sandbox="s"),
                    Script({"request": failing}))
    assert e.value.reason == "Unreachable"
    with pytest.raises(errors.SandboxNotFoundError):
        _sansio.run(_http.send(None, "GET", "http://n/x", op="get", sandbox="s"),
                    Script({"request": Resp(404, b'{"error": {"code": "NotFound", '
                                                 b'"message": "no sandbox s"}}')}))
