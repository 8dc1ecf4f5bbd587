"""AsyncKubicle against the same fakes, both modes."""

import asyncio

import pytest

from kubicle import errors


async def test_kube_fan_out(akube, cluster):
    async def agent(i):
        async with await akube.sandboxes.create("tg", metadata={"run": "af", "agent": f"a{i}"},
                                                env={"I": str(i)}) as sb:
            await sb.filesystem.write("/task", f"t{i}")
            cat = await sb.exec(["cat", "/task"])
            env = await sb.exec(["printenv", "I"])
            return cat.stdout + env.stdout

    got = await asyncio.gather(*(agent(i) for i in range(20)))
    assert got == [f"t{i}{i}\n" for i in range(20)]
    assert not cluster.list("sandboxes", "team-a")
    assert akube.namespace == "team-a"


async def test_kube_errors(akube, cluster):
    with pytest.raises(errors.TemplateNotFoundError):
        await akube.sandboxes.create("nope", timeout=10)
    cluster.templates["broken"] = "vmfail"
    with pytest.raises(errors.SandboxFailedError) as e:
        await akube.sandboxes.create("broken", timeout=10)
    assert e.value.message == "kubicle-vmm exited: restore failed"
    cluster.templates["baking"] = "notready"
    with pytest.raises(errors.TemplateNotReadyError):
        await akube.sandboxes.create("baking", timeout=0.3, wait_pending=True)
    assert not cluster.list("sandboxes", "team-a")


async def test_kube_fork_and_sweep(akube, cluster):
    base = await akube.sandboxes.create("tg", metadata={"run": "ab"})
    await base.filesystem.write("/s", b"state")
    kids = await base.fork(4)
    assert [await k.filesystem.read("/s", format="bytes") for k in kids] == [b"state"] * 4
    await kids[0].delete()
    assert cluster.get("sandboxes", "team-a", kids[0].name) is None
    names = await akube.sandboxes.delete({"run": "ab"})
    assert sorted(names) == sorted([base.name] + [k.name for k in kids[1:]])
    assert [s.name for s in await akube.sandboxes.list({"run": "ab"})] == []


async def test_cancelled_create_leaves_nothing(akube, cluster):
    cluster.delay = 2
    task = asyncio.ensure_future(akube.sandboxes.create("tg"))
    # Cancelled once its Sandbox exists (the fake operator holds it 2 s before
    # placing it), so there is something to leave behind.
    for _ in range(400):
        if cluster.list("sandboxes", "team-a"):
            break
        await asyncio.sleep(0.025)
    made = cluster.list("sandboxes", "team-a")
    assert len(made) == 1, made
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cluster.delay = 0.01

    def left():
        o = cluster.get("sandboxes", "team-a", made[0]["metadata"]["name"])
        return o is not None and not o["metadata"].get("deletionTimestamp")
    for _ in range(400):
        if not left():
            break
        await asyncio.sleep(0.025)
    assert not left(), "the cancelled create left its Sandbox undeleted"


async def test_standalone_exec_stream_files(astandalone, node):
    sb = await astandalone.sandboxes.create("tg", env={"K": "v"})
    seen = []

    async def on_out(text):
        await asyncio.sleep(0)
        seen.append(text)

    r = await sb.exec(["chunks", "a", "b"], on_stdout=on_out, on_stderr=seen.append)
    assert r.stdout == "ab" and seen == ["a", "A", "b", "B"]
    assert (await sb.exec("echo hi")).stdout == "hi\n"
    assert (await sb.exec(["printenv", "K"])).stdout == "v\n"
    with pytest.raises(errors.ExecTimeoutError):
        await sb.exec(["sleep", "3"], timeout_seconds=1)

    async def gen():
        for i in range(3):
            yield b"%d" % i
    assert await sb.filesystem.write("/g", gen()) == 3
    assert await sb.filesystem.write("/s", "x" * 100000) == 100000
    chunks = [c async for c in await sb.filesystem.read("/s", format="stream")]
    assert b"".join(chunks) == b"x" * 100000
    assert await sb.filesystem.read("/g") == "012"
    assert await sb.filesystem.exists("/g") and not await sb.filesystem.exists("/none")
    with pytest.raises(errors.PathNotFoundError):
        await sb.filesystem.read("/none")
    kids = await sb.fork(2)
    assert [(await k.exec(["cat", "/g"])).stdout for k in kids] == ["012", "012"]
    assert len(await astandalone.sandboxes.delete({"fork-of": sb.id})) == 2
    await sb.delete()
    assert not node.sandboxes


async def test_standalone_list_stat_remove(astandalone, node):
    sb = await astandalone.sandboxes.create("tg")
    fs = sb.filesystem
    for p in ("/d/a", "/d/sub/b"):
        await fs.write(p, "xy")
    assert [(e.name, e.is_dir) for e in await fs.list("/d")] == [("a", False), ("sub", True)]
    st = await fs.stat("/d/a")
    assert st.is_file and st.size == 2 and st.mode == 0o644
    assert await fs.exists("/d/sub") and not await fs.exists("/d/none")
    with pytest.raises(errors.ConflictError):
        await fs.remove("/d")
    with pytest.raises(errors.ConflictError):
        await fs.list("/d/a")
    await fs.remove("/d/a")
    await fs.remove("/d", recursive=True)
    assert not await fs.exists("/d")
    with pytest.raises(errors.PathNotFoundError):
        await fs.stat("/d")
    with pytest.raises(errors.PathNotFoundError):
        await fs.remove("/d", recursive=True)
    await sb.delete()


async def test_async_own_token_needs_no_secret(akube, cluster, node):
    """AsyncKubicle's create sends only its token's hash, as Kubicle's."""
    import hashlib

    sb = await akube.sandboxes.create("tg", metadata={"run": "aown"})
    obj = cluster.get("sandboxes", "team-a", sb.name)
    assert obj["spec"]["tokenSha256"] == hashlib.sha256(sb._ref.token.encode()).hexdigest()
    assert "tokenSecretName" not in obj["status"] and cluster.list("secrets", "team-a") == []
    assert not any("/secrets/" in p for _, p in cluster.requests)
    got = await akube.sandboxes.get(sb.name)
    assert (await got.exec(["echo", "aown"])).stdout == "aown\n"
    await akube.sandboxes.delete({"run": "aown"})


async def test_async_vm_refusing_its_token_is_replaced(akube, cluster):
    cluster.wrong_vm_tokens = 1
    cluster.prunes_token_sha256 = True   # the replacement race needs a Secret
    sb = await akube.sandboxes.create("tg", metadata={"run": "atok"})
    assert (await sb.exec(["echo", "ok"])).stdout == "ok\n"
    cluster.wrong_vm_tokens = 2
    kids = await sb.fork(2)
    assert [(await k.exec(["echo", "k"])).stdout for k in kids] == ["k\n", "k\n"]
    await akube.sandboxes.delete({"run": "atok"})


async def test_closed_client_opens_nothing_new(kubeconfig):
    import kubicle

    k = kubicle.AsyncKubicle(kubeconfig=kubeconfig)
    await k.connect()
    await k.aclose()
    with pytest.raises(errors.KubicleError, match="closed"):
        await k.sandboxes.create("tg")


async def test_standalone_suspend_and_resume(astandalone, node):
    sb = await astandalone.sandboxes.create("tg", name="apark")
    await sb.files.write("/kept", "before")
    assert (await sb.suspend()).phase == "Suspended"
    assert node.requests[-1][:2] == ("POST", "/v1/sandboxes/apark/suspend")
    with pytest.raises(errors.ConflictError):
        await sb.files.read("/kept")
    assert (await sb.resume()).phase == "Running"
    assert await sb.files.read("/kept") == "before"
    await sb.delete()


async def test_kube_suspend_and_resume(akube, cluster):
    sb = await akube.sandboxes.create("tg")
    await sb.files.write("/kept", "before")
    info = await sb.suspend()
    assert info.phase == "Suspended"
    obj = cluster.get("sandboxes", "team-a", sb.name)
    assert obj["spec"]["suspend"] is True and obj["status"]["phase"] == "Suspended"
    assert (await sb.resume()).phase == "Running"
    assert cluster.get("sandboxes", "team-a", sb.name)["spec"]["suspend"] is False
    assert await sb.files.read("/kept") == "before"
    await sb.delete()
