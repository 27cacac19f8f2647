"""PosixFilesystem beyond the shared contract: rename fallbacks, races it must lose cleanly, fsync paths."""

from __future__ import annotations

import os
import sys

import pytest

from httk.workflow.adapters import fs_posix, renames
from httk.workflow.adapters.clock import SystemClock
from httk.workflow.adapters.fs_posix import PosixFilesystem


@pytest.fixture
def fallback():
    return PosixFilesystem(use_renameat2=False)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux-only")
def test_renameat2_is_found_on_linux():
    assert renames.renameat2() is not None
    assert PosixFilesystem()._renameat2 is renames.renameat2()


def test_fallback_file_rename_keeps_the_inode(fallback, tmp_path):
    source, destination = tmp_path / "a", tmp_path / "sub" / "b"
    source.write_bytes(b"x")
    inode = source.stat().st_ino
    fallback.rename(str(source), str(destination), durable=True)
    assert not source.exists()
    assert destination.stat().st_ino == inode
    assert destination.stat().st_nlink == 1  # the temporary second link is gone


def test_fallback_refuses_overwrite_and_keeps_both(fallback, tmp_path):
    (tmp_path / "a").write_bytes(b"a")
    (tmp_path / "b").write_bytes(b"b")
    with pytest.raises(FileExistsError):
        fallback.rename(str(tmp_path / "a"), str(tmp_path / "b"), durable=False)
    assert (tmp_path / "a").read_bytes() == b"a"
    assert (tmp_path / "b").read_bytes() == b"b"
    assert (tmp_path / "a").stat().st_nlink == 1


def test_fallback_moves_a_dangling_symlink_itself(fallback, tmp_path):
    os.symlink("nowhere", tmp_path / "link")
    fallback.rename(str(tmp_path / "link"), str(tmp_path / "moved"), durable=False)
    assert os.readlink(tmp_path / "moved") == "nowhere"
    assert not os.path.lexists(tmp_path / "link")


def test_fallback_directory_rename(fallback, tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"1")
    (tmp_path / "taken").write_bytes(b"")
    with pytest.raises(FileExistsError):
        fallback.rename(str(tmp_path / "d"), str(tmp_path / "taken"), durable=False)
    fallback.rename(str(tmp_path / "d"), str(tmp_path / "x" / "d2"), durable=True)
    assert (tmp_path / "x" / "d2" / "f").read_bytes() == b"1"


def test_fallback_loses_cleanly_when_the_source_goes_between_link_and_unlink(fallback, tmp_path, monkeypatch):
    """Another actor renames the source after our link(): we must withdraw our name and report the loss."""
    source, ours, theirs = str(tmp_path / "marker"), str(tmp_path / "ours"), str(tmp_path / "theirs")
    (tmp_path / "marker").write_bytes(b"")
    real_unlink = os.unlink
    raced = []

    def racing_unlink(path, *args, **kwargs):
        if path == source and not raced:
            raced.append(path)
            os.rename(source, theirs)  # the competitor wins the fence right now
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", racing_unlink)
    with pytest.raises(FileNotFoundError):
        fallback.rename(source, ours, durable=False)
    assert raced
    assert not os.path.lexists(ours)
    assert os.path.exists(theirs)


@pytest.mark.parametrize("use_renameat2", [True, False])
def test_write_new_loses_to_a_concurrent_creator_and_cleans_up(tmp_path, monkeypatch, use_renameat2):
    fs = PosixFilesystem(use_renameat2=use_renameat2)
    target = tmp_path / "doc"
    target.write_bytes(b"theirs")
    # The competitor's file appears just after write_new's early existence check.
    monkeypatch.setattr(os.path, "lexists", lambda path: False)
    with pytest.raises(FileExistsError):
        fs.write_new(str(target), b"mine", durable=True)
    assert target.read_bytes() == b"theirs"
    assert sorted(os.listdir(tmp_path)) == ["doc"]


def test_copy_tree_loses_to_a_concurrent_creator_and_cleans_up(tmp_path, fallback):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f").write_bytes(b"1")
    (tmp_path / "dst").mkdir()
    with pytest.raises(FileExistsError):
        fallback.copy_tree(str(tmp_path / "src"), str(tmp_path / "dst"), durable=True)
    assert sorted(os.listdir(tmp_path)) == ["dst", "src"]


def test_appender_syncs_new_directories(tmp_path):
    fs = PosixFilesystem()
    appender = fs.open_appender(str(tmp_path / "j" / "w" / "0.seg"))
    assert appender.append(b"a" * 100_000) == 0
    appender.sync()
    appender.sync()
    appender.close()
    appender.close()
    with pytest.raises(ValueError):
        appender.append(b"x")
    assert (tmp_path / "j" / "w" / "0.seg").stat().st_size == 100_000


def test_scandir_survives_a_directory_vanishing_mid_walk(tmp_path):
    fs = PosixFilesystem()
    for index in range(500):
        (tmp_path / "d").mkdir(exist_ok=True)
        (tmp_path / "d" / f"f{index}").write_bytes(b"")
    iterator = fs.scandir(str(tmp_path / "d"))
    next(iterator)
    fs.rmtree(str(tmp_path / "d"))
    list(iterator)  # whatever is left, no exception
    assert list(fs.scandir(str(tmp_path / "d"))) == []


def test_rmtree_of_a_symlink_removes_only_the_link(tmp_path):
    fs = PosixFilesystem()
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_bytes(b"")
    os.symlink("real", tmp_path / "link")
    fs.rmtree(str(tmp_path / "link"))
    assert not os.path.lexists(tmp_path / "link")
    assert (tmp_path / "real" / "f").exists()


def test_durable_operations_run(tmp_path):
    fs = PosixFilesystem()
    fs.write_atomic(str(tmp_path / "a" / "b" / "f"), b"x", durable=True)
    fs.create_empty(str(tmp_path / "c" / "m"), durable=True)
    fs.copy_tree(str(tmp_path / "a"), str(tmp_path / "a2"), durable=True)
    fs.sync_tree(str(tmp_path))
    assert (tmp_path / "a2" / "b" / "f").read_bytes() == b"x"


def test_retry_until_waits_on_the_real_clock(tmp_path):
    fs = PosixFilesystem()
    clock = SystemClock()
    start = clock.monotonic()
    assert fs.retry_until(lambda: None, 0.1) is None
    assert clock.monotonic() - start >= 0.1


def test_system_clock():
    clock = SystemClock()
    assert clock.now() > 1_600_000_000
    first = clock.monotonic()
    clock.sleep(0.001)
    assert clock.monotonic() > first


def test_read_document_refuses_a_socket_and_a_device(tmp_path):
    import socket
    import tempfile

    from httk.workflow.ports import NotRegularFile

    fs = PosixFilesystem()
    with tempfile.TemporaryDirectory(dir="/tmp") as short:  # a socket path must be short
        path = os.path.join(short, "s.json")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(path)
            with pytest.raises(NotRegularFile, match="a socket"):
                fs.read_document(path)
        finally:
            server.close()
    with pytest.raises(NotRegularFile, match="a character device"):
        fs.read_document("/dev/zero")
    with pytest.raises(NotRegularFile, match="a character device"):
        fs.read_range("/dev/zero", 0, 1 << 30)


def test_read_document_of_a_fifo_with_a_writer_does_not_block(tmp_path):
    from httk.workflow.ports import NotRegularFile

    path = tmp_path / "outcome.json"
    os.mkfifo(path)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer's open succeed
    writer = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.write(writer, b"{}")
        with pytest.raises(NotRegularFile, match="a FIFO"):
            PosixFilesystem().read_document(str(path))
    finally:
        os.close(writer)
        os.close(reader)


def test_group_syncs_start_threads_only_for_many_paths(tmp_path, monkeypatch):
    """A couple of paths (every first attempt syncs two) are synced in order, with no thread pool."""
    import concurrent.futures

    pools = []
    real = concurrent.futures.ThreadPoolExecutor

    def counting(*args, **kwargs):
        pools.append(kwargs.get("max_workers"))
        return real(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", counting)
    fs = PosixFilesystem()
    directories = []
    for index in range(fs_posix._OVERLAP_FROM):
        (tmp_path / f"d{index}").mkdir()
        (tmp_path / f"d{index}" / "f").write_bytes(b"x")
        directories.append(str(tmp_path / f"d{index}"))
    fs.fsync_dirs(directories[:2])
    fs.sync_trees(directories[: fs_posix._OVERLAP_FROM - 1])
    assert pools == []
    fs.fsync_dirs(directories)
    fs.sync_trees(directories)
    assert pools == [fs_posix._OVERLAP_FROM, fs_posix._OVERLAP_FROM]
