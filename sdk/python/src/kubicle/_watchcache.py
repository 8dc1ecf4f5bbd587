"""One watch of a namespace's Sandboxes per client, shared by every wait.

A wait per call (list, then watch from its resourceVersion) costs two
requests and, since a watch left before its end cannot give its connection
back, a TLS handshake each time: most of a fan-out's client CPU. Here one
informer-style loop (list, watch, relist on 410) keeps a cache, and each
wait is a ``Waiter``: a step (``_kobj.ReadyStep`` and friends) over the
objects it selects, evaluated when the cache changes and only once the
cache has caught up with ``min_rv`` (the resourceVersion of the write the
caller made), so "absent" means gone, not "not seen yet".

The state (``Cache``, ``Waiter``) is plain and the loop (``informer``) an
operation of the core (``_sansio.py``); ``SyncWatcher`` runs it in a
thread, ``AsyncWatcher`` as a task, each giving its steps."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Set, Tuple

from . import _kobj, _sansio, errors
from ._sansio import call

Objs = Dict[str, Dict[str, Any]]
Select = Callable[[Objs], Objs]
# How long one watch request lasts before the loop makes the next.
WATCH_SECONDS = 60
# A wait not done after this long makes the loop relist (once per period,
# however many wait): a watch that went silent, or an event lost on the
# way, costs a few seconds instead of the rest of the timeout.
RESYNC_SECONDS = 10.0


def int_rv(rv: Optional[str]) -> Optional[int]:
    """resourceVersions are opaque; the apiserver's are etcd revisions,
    which the cache compares. None when one is not a number."""
    try:
        return int(rv) if rv else None
    except ValueError:
        return None


def by_name(name: str) -> Select:
    def select(objs: Objs) -> Objs:
        o = objs.get(name)
        return {name: o} if o is not None else {}
    select.name = name  # type: ignore[attr-defined]
    return select


def by_labels(selector: str) -> Select:
    terms = [t.split("=", 1) for t in selector.split(",") if t]

    def select(objs: Objs) -> Objs:
        out = {}
        for n, o in objs.items():
            labels = (o.get("metadata") or {}).get("labels") or {}
            if all(labels.get(k) == v for k, v in terms):
                out[n] = o
        return out
    return select


def apply_event(objs: Objs, kind: str, obj: Dict[str, Any]) -> Optional[str]:
    """Applies one watch event to ``objs``; the object's name, None for a
    bookmark."""
    if kind == "BOOKMARK":
        return None
    name = _kobj.name_of(obj)
    if kind == "DELETED":
        objs.pop(name, None)
    elif kind in ("ADDED", "MODIFIED"):
        objs[name] = obj
    return name


class Cache:
    def __init__(self) -> None:
        self.objs: Objs = {}
        self.rv = 0
        self.synced = False
        self.error: Optional[errors.KubicleError] = None

    def replace(self, items: Iterable[Dict[str, Any]], rv: int) -> None:
        self.objs = {_kobj.name_of(o): o for o in items}
        self.rv, self.synced = rv, True

    def apply(self, kind: str, obj: Dict[str, Any]) -> Optional[str]:
        """Applies one watch event; returns the object's name."""
        rv = int_rv((obj.get("metadata") or {}).get("resourceVersion"))
        if rv is not None:
            self.rv = max(self.rv, rv)
        return apply_event(self.objs, kind, obj)

    def relisted(self, items: Iterable[Dict[str, Any]], rv: str) -> None:
        """A fresh list: the cache is that, and no longer failed."""
        self.error = None
        self.replace(items, int_rv(rv) or 0)


class Waiter:
    def __init__(self, step: Callable[[Objs], Any], select: Select, min_rv: int) -> None:
        self.step, self.select, self.min_rv = step, select, min_rv
        self.name: Optional[str] = getattr(select, "name", None)
        self.done = False
        self.value: Any = None
        self.error: Optional[BaseException] = None
        self.seen: Objs = {}

    def check(self, cache: Cache) -> bool:
        if self.done:
            return True
        if cache.error is not None:
            self.error, self.done = cache.error, True
            return True
        if not cache.synced or cache.rv < self.min_rv:
            return False
        self.seen = self.select(cache.objs)
        try:
            v = self.step(self.seen)
        except errors.KubicleError as e:
            self.error, self.done = e, True
            return True
        if v is not None:
            self.value, self.done = v, True
        return self.done

    def outcome(self) -> Tuple[Any, Objs]:
        """(value, objects) once done, (None, the objects last seen) when
        the time ran out; raises what the step raised."""
        if self.error is not None:
            raise self.error
        return (self.value if self.done else None), self.seen


class _Waiters:
    """Waiters indexed by the one name they select (most of them), so an
    event wakes only those it can concern."""

    def __init__(self) -> None:
        self.named: Dict[str, Set[Waiter]] = {}
        self.other: Set[Waiter] = set()

    def add(self, w: Waiter) -> None:
        (self.named.setdefault(w.name, set()) if w.name else self.other).add(w)

    def discard(self, w: Waiter) -> None:
        if w.name:
            s = self.named.get(w.name)
            if s is not None:
                s.discard(w)
                if not s:
                    del self.named[w.name]
        else:
            self.other.discard(w)

    def concerned(self, name: Optional[str]) -> List[Waiter]:
        out = list(self.other)
        if name is None:
            for s in self.named.values():
                out.extend(s)
        else:
            out.extend(self.named.get(name, ()))
        return out

    def all(self) -> List[Waiter]:
        return self.concerned(None)


def _fatal(e: errors.KubicleError) -> bool:
    # Errors that no retry fixes: the waits fail with them.
    return isinstance(e, errors.AuthError) or e.status_code in (400, 404, 422)


def next_event(events: Any, rv: str) -> _sansio.Op[Optional[Tuple[str, Dict[str, Any], str]]]:
    """The next event of a watch: its type, its object and the
    resourceVersion to watch again from; None once the watch ended."""
    ev = yield call("next", events)
    if ev is None:
        return None
    obj = _kobj.event_object(ev)
    return ev.get("type", ""), obj, (obj.get("metadata") or {}).get("resourceVersion") or rv


def waiting(w: "Waiter", deadline: float) -> _sansio.Op[None]:
    """A wait until ``w`` is done or ``deadline`` passes. The watcher it
    runs on is woken by the loop (``woken``: False when the time ran out);
    a wait not done after RESYNC_SECONDS makes it relist (``resync``)."""
    while not w.done:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        if not (yield call("woken", w, min(left, RESYNC_SECONDS))) and not w.done:
            yield call("resync")


def informer() -> _sansio.Op[None]:
    """The loop both watchers run: list, watch from that resourceVersion,
    apply each event, relist on 410 (at once) or after any other failure
    (half a second later); an error no retry fixes fails the waiters. The
    watcher it runs on says when to stop or relist."""
    while not (yield call("stopped")):
        try:
            items, rv = yield call("list_now")
            yield call("relisted", items, rv)
            while not (yield call("relisting")):
                events = yield call("watch_from", rv, WATCH_SECONDS)
                while True:
                    got = yield from next_event(events, rv)
                    if got is None:
                        break
                    kind, obj, rv = got
                    yield call("applied", kind, obj)
                    if (yield call("relisting")):
                        break
        except errors.KubicleError as e:
            if e.status_code == 410:
                continue  # too old: relist
            if _fatal(e):
                yield call("failed", e)
            yield call("sleep", 0.5)
        except Exception:  # a broken connection: relist and go on
            yield call("sleep", 0.5)


class _Resyncs:
    """At most one relist per RESYNC_SECONDS, however many waits ask."""

    def __init__(self) -> None:
        self._last = time.monotonic()

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last < RESYNC_SECONDS:
            return False
        self._last = now
        return True


class SyncWatcher:
    """The loop in a daemon thread. ``lister()`` returns (items, rv);
    ``watcher(rv, seconds, stop)`` yields events until the request ends."""

    def __init__(self, lister: Callable[[], Tuple[List[Dict[str, Any]], str]],
                 watcher: Callable[[str, int, Any], Iterable[Dict[str, Any]]]) -> None:
        self._lister, self._watcher = lister, watcher
        self._cond = threading.Condition()
        self._cache = Cache()
        self._waiters = _Waiters()
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._relist = False
        self._resyncs = _Resyncs()
        self.stopper: Any = None  # what watcher() was given, to stop a stream

    def close(self) -> None:
        self._stop.set()
        self._end_stream()

    def _end_stream(self) -> None:
        if self.stopper is not None:
            try:
                self.stopper.stop()
            except Exception:
                pass

    def wait(self, step: Callable[[Objs], Any], select: Select, min_rv: int,
             timeout: float) -> Tuple[Any, Objs]:
        """(value, objects) once ``step`` returns a value, (None, last seen)
        after ``timeout``; raises what ``step`` raised."""
        self._start()
        w = Waiter(step, select, min_rv)
        deadline = time.monotonic() + timeout
        with self._cond:
            if not w.check(self._cache):
                self._waiters.add(w)
                try:
                    _sansio.run(waiting(w, deadline), self)
                finally:
                    self._waiters.discard(w)
        return w.outcome()

    def woken(self, w: Waiter, seconds: float) -> bool:
        return self._cond.wait(seconds)

    def resync(self) -> None:
        """Ends the current watch so that the loop relists (called with the
        lock held; at most once per RESYNC_SECONDS)."""
        if self._resyncs.due():
            self._relist = True
            self._end_stream()

    def _start(self) -> None:
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kubicle-watch",
                                                daemon=True)
                self._thread.start()

    def _run(self) -> None:
        _sansio.run(informer(), self)

    # --- the steps informer() yields ------------------------------------
    def stopped(self) -> bool:
        return self._stop.is_set()

    def relisting(self) -> bool:
        return self._stop.is_set() or self._relist

    def list_now(self) -> Tuple[List[Dict[str, Any]], str]:
        return self._lister()

    def relisted(self, items: List[Dict[str, Any]], rv: str) -> None:
        with self._cond:
            self._cache.relisted(items, rv)
            self._wake(None)
        self._relist = False

    def watch_from(self, rv: str, seconds: int) -> Iterator[Dict[str, Any]]:
        return iter(self._watcher(rv, seconds, self))

    def next(self, events: Iterator[Dict[str, Any]]) -> Any:
        return next(events, None)

    def applied(self, kind: str, obj: Dict[str, Any]) -> None:
        with self._cond:
            self._wake(self._cache.apply(kind, obj))

    def failed(self, e: errors.KubicleError) -> None:
        with self._cond:
            self._cache.error = e
            self._wake(None)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def _wake(self, name: Optional[str]) -> None:
        if any(w.check(self._cache) for w in self._waiters.concerned(name)):
            self._cond.notify_all()


class AsyncWatcher:
    """The loop as a task; ``lister()`` and ``watcher(rv, seconds)`` are the
    async counterparts (the latter an async iterator of events)."""

    def __init__(self, lister: Callable[[], Any], watcher: Callable[[str, int], Any]) -> None:
        self._lister, self._watcher = lister, watcher
        self._cache = Cache()
        self._waiters = _Waiters()
        self._events: Dict[Waiter, asyncio.Event] = {}
        self._task: Optional["asyncio.Task[None]"] = None
        self._resyncs = _Resyncs()

    def resync(self) -> None:
        """Restarts the loop (a relist), at most once per RESYNC_SECONDS."""
        if self._resyncs.due():
            if self._task is not None:
                self._task.cancel()
            self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None

    async def wait(self, step: Callable[[Objs], Any], select: Select, min_rv: int,
                   timeout: float) -> Tuple[Any, Objs]:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())
        w = Waiter(step, select, min_rv)
        if not w.check(self._cache):
            self._events[w] = asyncio.Event()
            self._waiters.add(w)
            try:
                await _sansio.run_async(waiting(w, time.monotonic() + timeout), self)
            finally:
                self._waiters.discard(w)
                self._events.pop(w, None)
        return w.outcome()

    async def woken(self, w: Waiter, seconds: float) -> bool:
        try:
            await asyncio.wait_for(self._events[w].wait(), seconds)
            return True
        except asyncio.TimeoutError:
            return False

    async def _run(self) -> None:
        await _sansio.run_async(informer(), self)  # until cancelled

    # --- the steps informer() yields (a resync cancels the task instead
    # of asking it to stop) ------------------------------------------------
    def stopped(self) -> bool:
        return False

    def relisting(self) -> bool:
        return False

    def list_now(self) -> Any:
        return self._lister()

    def relisted(self, items: List[Dict[str, Any]], rv: str) -> None:
        self._cache.relisted(items, rv)
        self._wake(None)

    def watch_from(self, rv: str, seconds: int) -> Any:
        return self._watcher(rv, seconds)

    async def next(self, events: Any) -> Any:
        try:
            return await events.__anext__()
        except StopAsyncIteration:
            return None

    def applied(self, kind: str, obj: Dict[str, Any]) -> None:
        self._wake(self._cache.apply(kind, obj))

    def failed(self, e: errors.KubicleError) -> None:
        self._cache.error = e
        self._wake(None)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def _wake(self, name: Optional[str]) -> None:
        for w in self._waiters.concerned(name):
            if w.check(self._cache):
                ev = self._events.get(w)
                if ev is not None:
                    ev.set()


def min_rv_of(obj: Optional[Mapping[str, Any]]) -> Optional[int]:
    return int_rv(((obj or {}).get("metadata") or {}).get("resourceVersion"))


def min_rv_of_items(objs: Mapping[str, Mapping[str, Any]]) -> Optional[int]:
    """What a cache must have seen to know about every listed object: their
    own newest resourceVersion, not the list's, which is the store's
    revision and moves with every write of any kind (a Lease renewal), so
    a Sandbox watch reaches it only at its next bookmark."""
    rvs = [min_rv_of(o) for o in objs.values()]
    if any(rv is None for rv in rvs):
        return None
    return max((rv for rv in rvs if rv is not None), default=0)
