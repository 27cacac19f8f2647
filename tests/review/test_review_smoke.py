from review_support import fake_proc, fsck_problems, kinds, manager, outcome, publisher, workspace


def test_smoke_succeeds():
    ports, handle, _ = workspace(jobs=2)
    proc = fake_proc(ports, publisher(ports.fs, lambda launch: {"outcome.json": outcome()}))
    assert manager(handle, proc).run() == 0
    assert kinds(handle) == {"succeeded": 2}
    assert fsck_problems(handle) == []
