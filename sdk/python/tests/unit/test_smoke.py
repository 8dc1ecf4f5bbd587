import kubicle


def test_kube_create_exec_delete(kube, cluster, node):
    sb = kube.sandboxes.create("tg", metadata={"run": "r1", "agent": "a0"}, env={"A": "1"})
    assert sb.info.phase == "Running"
    assert sb.metadata["run"] == "r1"
    r = sb.exec(["echo", "hi"])
    assert r.exit_code == 0 and r.stdout == "hi\n"
    assert sb.exec(["printenv", "A"]).stdout == "1\n"
    sb.delete()
    assert not cluster.list("sandboxes", "team-a")


def test_node_create_exec(standalone, node):
    sb = standalone.sandboxes.create("tg", metadata={"run": "r1"}, env={"A": "2"})
    assert sb.exec(["printenv", "A"]).stdout == "2\n"
    sb.delete()
    assert not node.sandboxes
