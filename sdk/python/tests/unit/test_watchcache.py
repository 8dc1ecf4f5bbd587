"""The shared watch: waits gated on resourceVersions, one watch for a
whole fan-out, relist after 410, fatal errors reach the waiters."""

import threading

import pytest

from kubicle import _kobj, _watchcache, errors


def _obj(name, rv, ready=False, labels=None):
    o = {"metadata": {"name": name, "uid": "u", "resourceVersion": str(rv),
                      "labels": labels or {}}, "spec": {}, "status": {}}
    if ready:
        o["status"] = {"tokenSecretName": "t", "vm": {"endpoint": "h:1"},
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Running"}]}
    return o


def test_waiter_waits_for_the_cache_to_catch_up():
    c = _watchcache.Cache()
    w = _watchcache.Waiter(_kobj.ReadyStep("a", False), _watchcache.by_name("a"), min_rv=5)
    assert not w.check(c)                      # not synced
    c.replace([], 4)
    assert not w.check(c)                      # absent, but the cache is older than the create
    c.apply("ADDED", _obj("a", 5))
    assert not w.check(c)                      # there, not Ready
    c.apply("MODIFIED", _obj("a", 6, ready=True))
    assert w.check(c) and w.value["metadata"]["resourceVersion"] == "6"
    gone = _watchcache.Waiter(_kobj.ReadyStep("b", False), _watchcache.by_name("b"), min_rv=6)
    assert gone.check(c) and isinstance(gone.error, errors.SandboxFailedError)  # deleted


def test_label_waiters_and_bookmarks():
    c = _watchcache.Cache()
    c.replace([_obj("a", 1, labels={"kubicle.dev/run": "r"}), _obj("b", 2)], 2)
    w = _watchcache.Waiter(_kobj.none_left, _watchcache.by_labels("kubicle.dev/run=r"), 2)
    assert not w.check(c)
    assert c.apply("BOOKMARK", {"metadata": {"resourceVersion": "9"}}) is None and c.rv == 9
    c.apply("DELETED", _obj("a", 10))
    assert w.check(c) and w.value is True


def test_sync_watcher_relists_after_410_and_fails_waiters_on_fatal_errors():
    lists, streams = [], []
    state = {"n": 0}

    def lister():
        lists.append(1)
        return [], "10"

    def watcher(rv, seconds, holder):
        state["n"] += 1
        if state["n"] == 1:
            raise errors.ApiError("too old", status_code=410)
        streams.append(rv)
        yield {"type": "ADDED", "object": _obj("a", 11, ready=True)}
        threading.Event().wait(0.05)

    sw = _watchcache.SyncWatcher(lister, watcher)
    value, _ = sw.wait(_kobj.ReadyStep("a", False), _watchcache.by_name("a"), 11, 5)
    assert value["metadata"]["name"] == "a" and len(lists) >= 2 and streams[0] == "10"
    sw.close()

    def forbidden(rv, seconds, holder):
        raise errors.AuthError("no watch for you", status_code=403)
        yield  # pragma: no cover

    sw = _watchcache.SyncWatcher(lister, forbidden)
    with pytest.raises(errors.AuthError):
        sw.wait(_kobj.ReadyStep("a", False), _watchcache.by_name("a"), 11, 5)
    sw.close()


def test_one_watch_for_a_fan_out(kube, cluster):
    def agent(i):
        with kube.sandboxes.create("tg", metadata={"run": "one", "agent": f"a{i}"}) as sb:
            sb.exec(["echo"])

    before = cluster.watches
    ts = [threading.Thread(target=agent, args=(i,)) for i in range(10)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert cluster.watches - before <= 2   # not one per create and one per delete
    assert not cluster.list("sandboxes", "team-a")


async def test_one_watch_for_an_async_fan_out(akube, cluster):
    import asyncio

    async def agent(i):
        sb = await akube.sandboxes.create("tg", metadata={"run": "aone"})
        await sb.delete()

    before = cluster.watches
    await asyncio.gather(*(agent(i) for i in range(10)))
    assert cluster.watches - before <= 2
    assert not cluster.list("sandboxes", "team-a")


def test_sweep_does_not_wait_for_the_stores_revision(kube, cluster):
    import time

    sbs = [kube.sandboxes.create("tg", metadata={"run": "sw"}) for _ in range(2)]
    cluster.bump(50)   # Lease renewals: the list's resourceVersion runs ahead
    t = time.monotonic()
    assert sorted(kube.sandboxes.delete({"run": "sw"})) == sorted(s.name for s in sbs)
    assert kube.sandboxes.delete({"run": "nothing-here"}) == []
    assert time.monotonic() - t < 5


def test_a_silent_watch_is_resynced(monkeypatch):
    """Events lost (a watch that went quiet): the wait relists and ends."""
    monkeypatch.setattr(_watchcache, "RESYNC_SECONDS", 0.2)
    state = {"lists": 0}

    def lister():
        state["lists"] += 1
        ready = state["lists"] > 1   # the object is Ready by the second list
        return [_obj("a", 12, ready=ready)], "12"

    def silent(rv, seconds, holder):
        class Stop:
            def __init__(self):
                self.ev = threading.Event()

            def stop(self):
                self.ev.set()
        holder.stopper = Stop()
        holder.stopper.ev.wait(30)   # nothing, ever, until stopped
        return iter(())

    sw = _watchcache.SyncWatcher(lister, silent)
    value, _ = sw.wait(_kobj.ReadyStep("a", False), _watchcache.by_name("a"), 12, 5)
    assert value is not None and state["lists"] >= 2
    sw.close()


async def test_a_silent_async_watch_is_resynced(monkeypatch):
    import asyncio

    monkeypatch.setattr(_watchcache, "RESYNC_SECONDS", 0.2)
    state = {"lists": 0}

    async def lister():
        state["lists"] += 1
        return [_obj("a", 12, ready=state["lists"] > 1)], "12"

    async def silent(rv, seconds):
        await asyncio.sleep(30)
        yield {}

    aw = _watchcache.AsyncWatcher(lister, silent)
    value, _ = await aw.wait(_kobj.ReadyStep("a", False), _watchcache.by_name("a"), 12, 5)
    assert value is not None and state["lists"] >= 2
    await aw.close()
