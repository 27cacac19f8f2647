"""InMemoryFilesystem's test API: crash() keeps exactly what was fsynced, arm_crash, reader lag, owners."""

from __future__ import annotations

import shutil

import pytest

from httk.workflow.testing import FakeClock, InMemoryFilesystem, SimulatedCrash

ROOT = "/ws"


@pytest.fixture
def fs():
    fs = InMemoryFilesystem()
    fs.makedirs(ROOT)
    fs.sync_tree("/")  # the set-up tree is durable; what the test does next is not
    return fs


def test_fake_clock():
    clock = FakeClock()
    assert clock.now() == 1_800_000_000.0
    start = clock.monotonic()
    clock.sleep(1.5)
    clock.advance(0.5)
    assert clock.now() == 1_800_000_002.0
    assert clock.monotonic() == start + 2.0
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_unsynced_append_is_lost_synced_survives(fs):
    appender = fs.open_appender(f"{ROOT}/journal/w/0.seg")
    appender.append(b"durable;")
    appender.sync()  # also makes the new file's name (and its new directories) durable
    appender.append(b"lost")
    assert fs.read_bytes(f"{ROOT}/journal/w/0.seg") == b"durable;lost"
    fs.crash()
    assert fs.read_bytes(f"{ROOT}/journal/w/0.seg") == b"durable;"
    reopened = fs.open_appender(f"{ROOT}/journal/w/0.seg", create=False)
    assert reopened.append(b"next") == 8


def test_appender_from_before_a_crash_is_dead(fs):
    appender = fs.open_appender(f"{ROOT}/seg")
    appender.sync()
    fs.crash()
    with pytest.raises(OSError):
        appender.append(b"x")


def test_never_synced_file_vanishes(fs):
    appender = fs.open_appender(f"{ROOT}/seg")
    appender.append(b"x")
    fs.write_atomic(f"{ROOT}/doc", b"x", durable=False)
    fs.create_empty(f"{ROOT}/marker", durable=False)
    fs.crash()
    assert [entry.name for entry in fs.scandir(ROOT)] == []


def test_name_synced_but_content_not_comes_back_empty(fs):
    appender = fs.open_appender(f"{ROOT}/seg")
    appender.append(b"never synced")
    fs.fsync_dir(ROOT)
    fs.crash()
    assert fs.read_bytes(f"{ROOT}/seg") == b""


def test_unsynced_rename_is_undone(fs):
    fs.create_empty(f"{ROOT}/state/queued/job", durable=True)
    fs.rename(f"{ROOT}/state/queued/job", f"{ROOT}/state/running/job", durable=False)
    fs.crash()
    assert fs.exists(f"{ROOT}/state/queued/job")
    assert not fs.exists(f"{ROOT}/state/running/job")


def test_durable_rename_survives(fs):
    fs.create_empty(f"{ROOT}/state/queued/job", durable=True)
    fs.rename(f"{ROOT}/state/queued/job", f"{ROOT}/state/running/deep/job", durable=True)
    fs.crash()
    assert not fs.exists(f"{ROOT}/state/queued/job")
    assert fs.exists(f"{ROOT}/state/running/deep/job")


@pytest.mark.parametrize("durable", [False, True])
def test_an_exchange_survives_a_crash_only_once_synced(fs, durable):
    fs.write_atomic(f"{ROOT}/out/report.json", b"old", durable=True)
    fs.write_atomic(f"{ROOT}/.out.new/report.json", b"new", durable=True)
    fs.exchange(f"{ROOT}/.out.new", f"{ROOT}/out", durable=durable)
    fs.crash()
    assert fs.read_bytes(f"{ROOT}/out/report.json") == (b"new" if durable else b"old")
    assert fs.read_bytes(f"{ROOT}/.out.new/report.json") == (b"old" if durable else b"new")


def test_syncing_either_directory_makes_a_whole_exchange_durable(fs):
    for synced in ("a", "b"):
        fs.write_atomic(f"{ROOT}/{synced}-case/a/x", b"from a", durable=True)
        fs.write_atomic(f"{ROOT}/{synced}-case/b/x", b"from b", durable=True)
        fs.exchange(f"{ROOT}/{synced}-case/a/x", f"{ROOT}/{synced}-case/b/x", durable=False)
        fs.fsync_dir(f"{ROOT}/{synced}-case/{synced}")
    fs.crash()
    for synced in ("a", "b"):
        assert fs.read_bytes(f"{ROOT}/{synced}-case/a/x") == b"from b"
        assert fs.read_bytes(f"{ROOT}/{synced}-case/b/x") == b"from a"


def test_durable_write_atomic_survives_including_new_parents(fs):
    fs.write_atomic(f"{ROOT}/a/b/c/doc.json", b"v1", durable=True)
    fs.crash()
    assert fs.read_bytes(f"{ROOT}/a/b/c/doc.json") == b"v1"


def test_non_durable_replacement_falls_back_to_the_synced_version(fs):
    fs.write_atomic(f"{ROOT}/doc", b"old", durable=True)
    fs.write_atomic(f"{ROOT}/doc", b"new", durable=False)
    fs.crash()
    assert fs.read_bytes(f"{ROOT}/doc") == b"old"


def test_durable_copy_tree_survives(fs):
    fs.write_atomic(f"{ROOT}/src/sub/f", b"payload", durable=True)
    fs.copy_tree(f"{ROOT}/src", f"{ROOT}/dst", durable=True)
    fs.crash()
    assert fs.read_bytes(f"{ROOT}/dst/sub/f") == b"payload"


def test_operation_count_and_arm_crash_raise_before_effect(fs):
    before = fs.operation_count
    fs.create_empty(f"{ROOT}/one", durable=False)
    assert fs.operation_count == before + 1
    fs.arm_crash(after=0)
    with pytest.raises(SimulatedCrash):
        fs.create_empty(f"{ROOT}/two", durable=False)
    assert not fs.exists(f"{ROOT}/two")  # the crashing primitive took no effect
    assert fs.crashed
    with pytest.raises(SimulatedCrash):  # a crashed machine does nothing more
        fs.create_empty(f"{ROOT}/three", durable=False)
    fs.crash()
    assert not fs.crashed
    assert not fs.exists(f"{ROOT}/one")  # never synced
    fs.create_empty(f"{ROOT}/two", durable=False)  # disarmed


def test_arm_crash_after_n_lets_n_primitives_through(fs):
    fs.arm_crash(after=2)
    fs.create_empty(f"{ROOT}/a", durable=False)
    fs.create_empty(f"{ROOT}/b", durable=False)
    with pytest.raises(SimulatedCrash):
        fs.create_empty(f"{ROOT}/c", durable=False)
    assert fs.exists(f"{ROOT}/b") and not fs.exists(f"{ROOT}/c")


def test_crash_at_every_step_of_a_durable_replacement_reads_before_or_after():
    outcomes = set()
    for after in range(100):
        fs = InMemoryFilesystem()
        fs.write_atomic(f"{ROOT}/doc", b"before", durable=True)
        fs.arm_crash(after)
        try:
            fs.write_atomic(f"{ROOT}/doc", b"after", durable=True)
        except SimulatedCrash:
            fs.crash()
            content = fs.read_bytes(f"{ROOT}/doc")
            assert content in (b"before", b"after")
            assert [entry.name for entry in fs.scandir(ROOT)] == ["doc"]  # no temp survives
            outcomes.add(content)
            continue
        fs.crash()
        assert fs.read_bytes(f"{ROOT}/doc") == b"after"
        break
    else:
        pytest.fail("the write never completed")
    assert outcomes == {b"before"}  # the rename is only durable at the directory fsync, the last step


def test_crash_at_every_step_of_a_fenced_rename():
    for after in range(50):
        fs = InMemoryFilesystem()
        fs.create_empty(f"{ROOT}/state/queued/job", durable=True)
        fs.arm_crash(after)
        try:
            fs.rename(f"{ROOT}/state/queued/job", f"{ROOT}/state/running/job", durable=True)
        except SimulatedCrash:
            fs.crash()
            where = [fs.exists(f"{ROOT}/state/{kind}/job") for kind in ("queued", "running")]
            assert where in ([True, False], [False, True])
            continue
        break


def test_uid_stamping_and_chown():
    fs = InMemoryFilesystem(uid=1234)
    fs.write_atomic("/w/f", b"", durable=False)
    assert fs.lstat("/w/f").uid == 1234
    other = fs.reader(0, uid=42)
    other.create_empty("/w/g", durable=False)
    assert fs.lstat("/w/g").uid == 42
    fs.chown("/w/f", 7)
    assert fs.lstat("/w/f").uid == 7
    fs.chmod("/w/f", 0o755)
    assert fs.lstat("/w/f").mode == 0o755
    fs.copy_tree("/w/f", "/w/copy", durable=False)
    assert fs.lstat("/w/copy").mode == 0o755
    assert fs.lstat("/w/copy").uid == 1234


def _lagging(lag_seconds: float) -> tuple[FakeClock, InMemoryFilesystem, InMemoryFilesystem]:
    """A fake clock, a filesystem on it, and a reader of that filesystem seeing names ``lag_seconds`` late."""
    clock = FakeClock()
    writer = InMemoryFilesystem(clock=clock)
    return clock, writer, writer.reader(lag_seconds=lag_seconds)


def test_reader_lag_hides_new_names_until_waited_out():
    clock, writer, reader = _lagging(2.0)
    writer.write_atomic("/w/old", b"o", durable=False)
    clock.advance(5)
    writer.write_atomic("/w/new", b"n", durable=False)
    assert not reader.exists("/w/new")
    assert reader.lstat("/w/new") is None
    assert [entry.name for entry in reader.scandir("/w")] == ["old"]
    with pytest.raises(FileNotFoundError):
        reader.read_bytes("/w/new")
    assert writer.exists("/w/new")  # the writer sees its own name at once
    assert reader.retry_until(lambda: reader.lstat("/w/new"), 0.5) is None  # shorter than the lag
    start = clock.monotonic()
    found = reader.retry_until(lambda: reader.lstat("/w/new"), 10.0)
    assert found is not None and found.is_file
    assert clock.monotonic() - start <= 2.0
    assert reader.read_bytes("/w/new") == b"n"


def test_reader_lag_applies_to_renamed_names_and_their_contents():
    clock, writer, reader = _lagging(1.0)
    writer.write_atomic("/w/dir/inside", b"x", durable=False)
    clock.advance(5)
    writer.rename("/w/dir", "/w/moved", durable=False)
    assert reader.lstat("/w/moved/inside") is None
    clock.advance(1)
    assert reader.read_bytes("/w/moved/inside") == b"x"


def test_reader_mutations_act_on_the_true_tree():
    clock, writer, reader = _lagging(5.0)
    writer.create_empty("/w/marker", durable=False)
    with pytest.raises(FileExistsError):
        reader.create_empty("/w/marker", durable=False)
    reader.rename("/w/marker", "/w/taken", durable=False)
    assert writer.exists("/w/taken")


def test_sleep_advances_the_shared_clock():
    clock = FakeClock()
    fs = InMemoryFilesystem(clock=clock)
    fs.sleep(3)
    assert clock.now() == 1_800_000_003.0
    assert fs.clock is clock


def test_intermediate_symlinks_are_followed():
    fs = InMemoryFilesystem()
    fs.write_atomic("/w/real/f", b"x", durable=False)
    fs.symlink("real", "/w/alias")
    assert fs.read_bytes("/w/alias/f") == b"x"
    assert [entry.name for entry in fs.scandir("/w/alias")] == ["f"]
    fs.symlink("loop", "/w/loop")
    with pytest.raises(OSError):
        fs.read_bytes("/w/loop")
    with pytest.raises(ValueError):
        fs.exists("relative/path")


def test_syncing_either_directory_makes_a_whole_rename_durable(fs):
    for synced in ("queued", "running"):
        fs.create_empty(f"{ROOT}/{synced}-case/queued/job", durable=True)
        fs.makedirs(f"{ROOT}/{synced}-case/running")
        fs.fsync_dir(f"{ROOT}/{synced}-case")
        fs.rename(f"{ROOT}/{synced}-case/queued/job", f"{ROOT}/{synced}-case/running/job", durable=False)
        fs.fsync_dir(f"{ROOT}/{synced}-case/{synced}")
    fs.crash()
    for synced in ("queued", "running"):
        assert not fs.exists(f"{ROOT}/{synced}-case/queued/job")
        assert fs.exists(f"{ROOT}/{synced}-case/running/job")


def test_a_blocking_read_of_a_fifo_is_a_simulated_hang():
    from httk.workflow.ports import NotRegularFile
    from httk.workflow.testing import SimulatedHang

    fs = InMemoryFilesystem()
    fs.makedirs("/w")
    fs.mkfifo("/w/fifo")
    info = fs.lstat("/w/fifo")
    assert not (info.is_file or info.is_dir or info.is_symlink)
    [entry] = fs.scandir("/w")
    assert not (entry.is_file or entry.is_dir or entry.is_symlink)
    # Not an Exception: no handler that contains ordinary errors can hide a reader that would hang.
    with pytest.raises(SimulatedHang):
        fs.read_bytes("/w/fifo")
    assert not isinstance(SimulatedHang("x"), Exception)
    with pytest.raises(NotRegularFile):
        fs.read_document("/w/fifo")
    # Like the POSIX adapter (shutil.copytree), a FIFO in a tree is refused rather than copied.
    with pytest.raises(shutil.Error):
        fs.copy_tree("/w", "/copy", durable=False)
    fs.remove("/w/fifo")
    assert fs.lstat("/w/fifo") is None
