"""One contract for every Filesystem: the POSIX adapter (both rename paths) and the in-memory double."""

from __future__ import annotations

import os
import threading

import pytest

from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.ports import DOCUMENT_LIMIT, DocumentTooLarge, Filesystem, NotRegularFile
from httk.workflow.testing import InMemoryFilesystem

MEMORY_ROOT = "/fake/root"


@pytest.fixture(params=["posix", "posix-fallback", "memory"])
def env(request, tmp_path):
    """(filesystem, root directory) for each implementation."""
    if request.param == "memory":
        fs = InMemoryFilesystem()
        fs.makedirs(MEMORY_ROOT)
        return fs, MEMORY_ROOT
    return PosixFilesystem(use_renameat2=request.param == "posix"), str(tmp_path)


def make_symlink(fs, target, path):
    if isinstance(fs, InMemoryFilesystem):
        fs.symlink(target, path)
    else:
        os.symlink(target, path)


def names(fs, directory):
    return sorted(entry.name for entry in fs.scandir(directory))


def test_implements_the_port(env):
    fs, _ = env
    assert isinstance(fs, Filesystem)


@pytest.mark.parametrize("durable", [False, True])
def test_write_atomic_publishes_and_replaces(env, durable):
    fs, root = env
    path = f"{root}/a/b/doc.json"
    fs.write_atomic(path, b"one", durable=durable)
    assert fs.read_bytes(path) == b"one"
    fs.write_atomic(path, b"two", durable=durable)
    assert fs.read_bytes(path) == b"two"
    assert names(fs, f"{root}/a/b") == ["doc.json"]  # no temp file left behind


def test_write_atomic_failure_leaves_nothing(env):
    fs, root = env
    fs.makedirs(f"{root}/d/target")
    with pytest.raises(IsADirectoryError):
        fs.write_atomic(f"{root}/d/target", b"x", durable=True)
    assert names(fs, f"{root}/d") == ["target"]
    assert fs.lstat(f"{root}/d/target").is_dir


def test_write_new_refuses_existing(env):
    fs, root = env
    path = f"{root}/new/doc"
    fs.write_new(path, b"first", durable=True)
    with pytest.raises(FileExistsError):
        fs.write_new(path, b"second", durable=False)
    assert fs.read_bytes(path) == b"first"
    assert names(fs, f"{root}/new") == ["doc"]


@pytest.mark.parametrize("durable", [False, True])
def test_write_staged_creates_in_place(env, durable):
    fs, root = env
    fs.makedirs(f"{root}/staging")
    fs.write_staged(f"{root}/staging/job.json", b"{}", durable=durable)
    assert fs.read_bytes(f"{root}/staging/job.json") == b"{}"
    assert names(fs, f"{root}/staging") == ["job.json"]


def test_write_staged_refuses_an_existing_name_and_a_missing_directory(env):
    """The existing file is left as it was; a missing directory is the caller's to make."""
    fs, root = env
    fs.write_atomic(f"{root}/d/taken", b"theirs", durable=False)
    with pytest.raises(FileExistsError):
        fs.write_staged(f"{root}/d/taken", b"mine", durable=True)
    assert fs.read_bytes(f"{root}/d/taken") == b"theirs"
    with pytest.raises(FileNotFoundError):
        fs.write_staged(f"{root}/missing/file", b"x", durable=False)
    assert names(fs, root) == ["d"]
    assert names(fs, f"{root}/d") == ["taken"]


def test_create_empty(env):
    fs, root = env
    path = f"{root}/m/marker"
    fs.create_empty(path, durable=True)
    assert fs.read_bytes(path) == b""
    assert fs.lstat(path).size == 0
    with pytest.raises(FileExistsError):
        fs.create_empty(path, durable=False)


def test_rename_moves_and_creates_parents(env):
    fs, root = env
    fs.write_atomic(f"{root}/s/src", b"x", durable=False)
    fs.rename(f"{root}/s/src", f"{root}/t/u/dst", durable=True)
    assert not fs.exists(f"{root}/s/src")
    assert fs.read_bytes(f"{root}/t/u/dst") == b"x"


def test_rename_refuses_to_overwrite_a_file(env):
    fs, root = env
    fs.write_atomic(f"{root}/a", b"a", durable=False)
    fs.write_atomic(f"{root}/b", b"b", durable=False)
    with pytest.raises(FileExistsError):
        fs.rename(f"{root}/a", f"{root}/b", durable=False)
    assert fs.read_bytes(f"{root}/a") == b"a"
    assert fs.read_bytes(f"{root}/b") == b"b"


@pytest.mark.parametrize("destination_content", [None, "file"])
def test_rename_refuses_to_overwrite_a_directory(env, destination_content):
    fs, root = env
    fs.write_atomic(f"{root}/src/inside", b"1", durable=False)
    fs.makedirs(f"{root}/dst")  # even an empty directory is not replaced
    if destination_content:
        fs.write_atomic(f"{root}/dst/other", b"2", durable=False)
    with pytest.raises(FileExistsError):
        fs.rename(f"{root}/src", f"{root}/dst", durable=False)
    assert fs.read_bytes(f"{root}/src/inside") == b"1"


def test_rename_directory(env):
    fs, root = env
    fs.write_atomic(f"{root}/src/inside", b"1", durable=False)
    fs.rename(f"{root}/src", f"{root}/moved/here", durable=True)
    assert fs.read_bytes(f"{root}/moved/here/inside") == b"1"
    assert not fs.exists(f"{root}/src")


def test_rename_reports_a_vanished_source(env):
    fs, root = env
    fs.create_empty(f"{root}/marker", durable=False)
    fs.rename(f"{root}/marker", f"{root}/winner", durable=False)
    with pytest.raises(FileNotFoundError):
        fs.rename(f"{root}/marker", f"{root}/loser", durable=False)
    with pytest.raises(FileNotFoundError):
        fs.rename(f"{root}/no/such/dir/marker", f"{root}/x", durable=False)
    assert not fs.exists(f"{root}/loser")
    assert not fs.exists(f"{root}/x")


def test_exchange_swaps_two_directories(env):
    fs, root = env
    fs.write_atomic(f"{root}/old/report.json", b"old", durable=False)
    fs.write_atomic(f"{root}/.new/report.json", b"new", durable=False)
    fs.write_atomic(f"{root}/.new/extra", b"e", durable=False)
    fs.exchange(f"{root}/.new", f"{root}/old", durable=True)
    assert fs.read_bytes(f"{root}/old/report.json") == b"new"
    assert names(fs, f"{root}/old") == ["extra", "report.json"]
    assert names(fs, f"{root}/.new") == ["report.json"]
    assert fs.read_bytes(f"{root}/.new/report.json") == b"old"
    assert names(fs, root) == [".new", "old"]  # nothing parked beside them


def test_exchange_swaps_a_file_and_a_directory_across_directories(env):
    fs, root = env
    fs.write_atomic(f"{root}/a/name", b"file", durable=False)
    fs.write_atomic(f"{root}/b/name/inside", b"dir", durable=False)
    fs.exchange(f"{root}/a/name", f"{root}/b/name", durable=False)
    assert fs.read_bytes(f"{root}/a/name/inside") == b"dir"
    assert fs.read_bytes(f"{root}/b/name") == b"file"


def test_exchange_with_a_missing_name_fails_and_changes_nothing(env):
    fs, root = env
    fs.write_atomic(f"{root}/present/f", b"p", durable=False)
    for first, second in ((f"{root}/present", f"{root}/absent"), (f"{root}/absent", f"{root}/present")):
        with pytest.raises(FileNotFoundError):
            fs.exchange(first, second, durable=False)
        assert names(fs, root) == ["present"]
        assert fs.read_bytes(f"{root}/present/f") == b"p"


def test_rename_moves_a_symlink_not_its_target(env):
    fs, root = env
    fs.write_atomic(f"{root}/target", b"t", durable=False)
    make_symlink(fs, "target", f"{root}/link")
    fs.rename(f"{root}/link", f"{root}/link2", durable=False)
    assert fs.lstat(f"{root}/link2").is_symlink
    assert fs.read_bytes(f"{root}/link2") == b"t"
    assert fs.read_bytes(f"{root}/target") == b"t"


def test_appender_offsets_and_reopen(env):
    fs, root = env
    path = f"{root}/journal/w1/0.seg"
    appender = fs.open_appender(path)
    assert appender.size == 0
    assert appender.append(b"abc") == 0
    assert appender.append(b"defgh") == 3
    assert appender.size == 8
    appender.sync()
    appender.close()
    again = fs.open_appender(path, create=False)
    assert again.size == 8
    assert again.append(b"ij") == 8
    again.sync()
    again.close()
    assert fs.read_bytes(path) == b"abcdefghij"


def test_appender_without_create_needs_the_file(env):
    fs, root = env
    with pytest.raises(FileNotFoundError):
        fs.open_appender(f"{root}/nope", create=False)
    with pytest.raises(FileNotFoundError):
        fs.open_appender(f"{root}/no/dir/nope", create=False)


def test_read_range(env):
    fs, root = env
    path = f"{root}/data"
    fs.write_atomic(path, b"0123456789", durable=False)
    assert fs.read_range(path, 2, 3) == b"234"
    assert fs.read_range(path, 8, 10) == b"89"  # short read at end of file
    assert fs.read_range(path, 10, 4) == b""
    with pytest.raises(FileNotFoundError):
        fs.read_range(f"{root}/missing", 0, 1)


def make_fifo(fs, path):
    if isinstance(fs, InMemoryFilesystem):
        fs.mkfifo(path)
    else:
        os.mkfifo(path)


def test_read_document_reads_a_regular_file(env):
    fs, root = env
    fs.write_atomic(f"{root}/doc.json", b"{}\n", durable=False)
    assert fs.read_document(f"{root}/doc.json") == b"{}\n"
    fs.create_empty(f"{root}/empty", durable=False)
    assert fs.read_document(f"{root}/empty") == b""
    with pytest.raises(FileNotFoundError):
        fs.read_document(f"{root}/missing.json")


def test_read_document_refuses_a_directory_a_symlink_and_a_fifo(env):
    fs, root = env
    fs.makedirs(f"{root}/dir.json")
    fs.write_atomic(f"{root}/target.json", b"{}", durable=False)
    make_symlink(fs, "target.json", f"{root}/link.json")
    make_fifo(fs, f"{root}/fifo.json")
    for name, word in (("dir.json", "a directory"), ("link.json", "a symbolic link"), ("fifo.json", "a FIFO")):
        with pytest.raises(NotRegularFile, match=word) as caught:
            fs.read_document(f"{root}/{name}")
        assert isinstance(caught.value, OSError)  # contained wherever a failed read is
        assert str(caught.value) == f"{root}/{name} is {word}, not a regular file"
    # A symlink in an intermediate component is followed: only the document's own name must be regular.
    make_symlink(fs, root, f"{root}/via")
    assert fs.read_document(f"{root}/via/target.json") == b"{}"


def test_read_document_bounds_the_size(env):
    fs, root = env
    fs.write_atomic(f"{root}/big", b"x" * 11, durable=False)
    assert fs.read_document(f"{root}/big", limit=11) == b"x" * 11
    with pytest.raises(DocumentTooLarge, match="11 bytes, more than the 10-byte bound"):
        fs.read_document(f"{root}/big", limit=10)
    assert fs.read_document(f"{root}/big", limit=None) == b"x" * 11
    assert DOCUMENT_LIMIT == 16 * 1024 * 1024


def test_read_range_refuses_what_is_not_a_regular_file_and_caps_the_length(env):
    fs, root = env
    fs.makedirs(f"{root}/dir")
    make_fifo(fs, f"{root}/fifo")
    for name in ("dir", "fifo"):
        with pytest.raises(NotRegularFile):
            fs.read_range(f"{root}/{name}", 0, 1)
    fs.write_atomic(f"{root}/small", b"abc", durable=False)
    # Lengths and offsets far beyond the file (a damaged record reference) read nothing, never allocate.
    assert fs.read_range(f"{root}/small", 1, 2**40) == b"bc"
    assert fs.read_range(f"{root}/small", 2**70, 2**40) == b""


def test_scandir_kinds(env):
    fs, root = env
    fs.write_atomic(f"{root}/d/file", b"x", durable=False)
    fs.makedirs(f"{root}/d/sub")
    make_symlink(fs, "sub", f"{root}/d/link")
    entries = {entry.name: entry for entry in fs.scandir(f"{root}/d")}
    assert sorted(entries) == ["file", "link", "sub"]
    assert entries["file"].path == f"{root}/d/file"

    def kind(name):
        return entries[name].is_file, entries[name].is_dir, entries[name].is_symlink

    assert kind("file") == (True, False, False)
    assert kind("sub") == (False, True, False)
    assert kind("link") == (False, False, True)


def test_scandir_of_missing_or_non_directory_yields_nothing(env):
    fs, root = env
    assert list(fs.scandir(f"{root}/missing")) == []
    assert list(fs.scandir(f"{root}/missing/deeper")) == []
    fs.write_atomic(f"{root}/file", b"", durable=False)
    assert list(fs.scandir(f"{root}/file")) == []
    assert list(fs.scandir(f"{root}/file/below")) == []


def test_lstat(env):
    fs, root = env
    fs.write_atomic(f"{root}/f", b"12345", durable=False)
    make_symlink(fs, "f", f"{root}/link")
    make_symlink(fs, "nowhere", f"{root}/dangling")
    info = fs.lstat(f"{root}/f")
    assert (info.size, info.is_file, info.is_dir, info.is_symlink) == (5, True, False, False)
    assert isinstance(info.uid, int) and info.mtime > 0
    link = fs.lstat(f"{root}/link")
    assert (link.is_symlink, link.is_file, link.is_dir) == (True, False, False)
    assert fs.lstat(root).is_dir
    assert fs.lstat(f"{root}/missing") is None
    assert fs.lstat(f"{root}/f/below") is None
    assert fs.exists(f"{root}/dangling")  # a name, even when it points nowhere
    assert not fs.exists(f"{root}/missing")


def test_readlink(env):
    fs, root = env
    make_symlink(fs, "../somewhere/else", f"{root}/link")
    fs.write_atomic(f"{root}/f", b"", durable=False)
    assert fs.readlink(f"{root}/link") == "../somewhere/else"
    with pytest.raises(FileNotFoundError):
        fs.readlink(f"{root}/missing")
    with pytest.raises(OSError):
        fs.readlink(f"{root}/f")


def test_lstat_reports_permission_bits(env):
    fs, root = env
    fs.write_atomic(f"{root}/f", b"", durable=False)
    assert fs.lstat(f"{root}/f").mode & 0o111 == 0
    fs.makedirs(f"{root}/d")
    assert fs.lstat(f"{root}/d").mode & 0o700 == 0o700


def test_makedirs_remove_rmdir(env):
    fs, root = env
    fs.makedirs(f"{root}/x/y")
    fs.makedirs(f"{root}/x/y")
    fs.write_atomic(f"{root}/x/y/f", b"", durable=False)
    with pytest.raises(FileExistsError):
        fs.makedirs(f"{root}/x/y/f")
    with pytest.raises(OSError):
        fs.rmdir(f"{root}/x/y")  # not empty
    fs.remove(f"{root}/x/y/f")
    with pytest.raises(FileNotFoundError):
        fs.remove(f"{root}/x/y/f")
    fs.rmdir(f"{root}/x/y")
    assert names(fs, f"{root}/x") == []


def test_rmtree(env):
    fs, root = env
    fs.write_atomic(f"{root}/t/a/b/c", b"x", durable=False)
    make_symlink(fs, "a", f"{root}/t/link")
    fs.rmtree(f"{root}/t")
    assert not fs.exists(f"{root}/t")
    fs.rmtree(f"{root}/t")  # missing is fine
    fs.write_atomic(f"{root}/single", b"x", durable=False)
    fs.rmtree(f"{root}/single")
    assert not fs.exists(f"{root}/single")


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("durable", [False, True])
def test_copy_tree_of_a_tree(env, durable, staged):
    fs, root = env
    fs.write_atomic(f"{root}/src/a.txt", b"a", durable=False)
    fs.write_atomic(f"{root}/src/sub/b.txt", b"b", durable=False)
    fs.makedirs(f"{root}/src/empty")
    make_symlink(fs, "a.txt", f"{root}/src/link")
    fs.copy_tree(f"{root}/src", f"{root}/out/copy", durable=durable, staged=staged)
    assert names(fs, f"{root}/out") == ["copy"]  # no temp sibling left
    assert names(fs, f"{root}/out/copy") == ["a.txt", "empty", "link", "sub"]
    assert fs.read_bytes(f"{root}/out/copy/sub/b.txt") == b"b"
    assert fs.lstat(f"{root}/out/copy/link").is_symlink
    assert fs.read_bytes(f"{root}/out/copy/link") == b"a"
    assert fs.read_bytes(f"{root}/src/a.txt") == b"a"


@pytest.mark.parametrize("staged", [False, True])
def test_copy_tree_of_a_file_and_refusal(env, staged):
    fs, root = env
    fs.write_atomic(f"{root}/f", b"content", durable=False)
    fs.copy_tree(f"{root}/f", f"{root}/g", durable=True, staged=staged)
    assert fs.read_bytes(f"{root}/g") == b"content"
    with pytest.raises(FileExistsError):
        fs.copy_tree(f"{root}/f", f"{root}/g", durable=False, staged=staged)
    with pytest.raises(FileNotFoundError):
        fs.copy_tree(f"{root}/missing", f"{root}/h", durable=False, staged=staged)
    assert names(fs, root) == ["f", "g"]


@pytest.mark.parametrize("source", ["tree", "file", "fifo", "missing"])
@pytest.mark.parametrize("staged", [False, True])
def test_copy_tree_never_touches_an_existing_destination(env, staged, source):
    """A tree in the way is refused and left whole, whatever the source (one that fails before the copy
    creates anything, a FIFO or a name gone, included): the refused copy removes only what it made."""
    fs, root = env
    fs.write_atomic(f"{root}/tree/a.txt", b"new", durable=False)
    fs.write_atomic(f"{root}/file", b"new", durable=False)
    make_fifo(fs, f"{root}/fifo")
    fs.write_atomic(f"{root}/dest/a.txt", b"old", durable=False)
    with pytest.raises(OSError):
        fs.copy_tree(f"{root}/{source}", f"{root}/dest", durable=False, staged=staged)
    assert names(fs, f"{root}/dest") == ["a.txt"]
    assert fs.read_bytes(f"{root}/dest/a.txt") == b"old"


def test_copy_tree_refuses_a_fifo_and_leaves_nothing(env):
    """A FIFO is never opened by a copy (it would block) nor copied as one: alone or inside a tree."""
    fs, root = env
    make_fifo(fs, f"{root}/pipe")
    fs.write_atomic(f"{root}/tree/a.txt", b"a", durable=False)
    fs.makedirs(f"{root}/tree/sub")
    make_fifo(fs, f"{root}/tree/sub/pipe")
    for staged in (False, True):
        for source in ("pipe", "tree"):
            with pytest.raises(OSError, match="is a named pipe"):
                fs.copy_tree(f"{root}/{source}", f"{root}/out/{source}", durable=True, staged=staged)
    assert names(fs, f"{root}/out") == []  # neither the copy nor its temp sibling


def test_sync_tree_and_fsync_dir(env):
    fs, root = env
    fs.write_atomic(f"{root}/s/a/f", b"x", durable=False)
    make_symlink(fs, "a", f"{root}/s/link")
    fs.sync_tree(f"{root}/s")
    fs.sync_tree(f"{root}/s/a/f")
    fs.fsync_dir(f"{root}/s")
    with pytest.raises(FileNotFoundError):
        fs.fsync_dir(f"{root}/missing")


def test_retry_until_returns_at_once_when_ready(env):
    fs, _ = env
    calls = []

    def probe():
        calls.append(1)
        return "ready"

    assert fs.retry_until(probe, 5.0) == "ready"
    assert len(calls) == 1


def test_retry_until_gives_up_after_the_deadline(env):
    fs, _ = env
    calls = []

    def probe():
        calls.append(1)
        return None

    assert fs.retry_until(probe, 0.05) is None
    # 10 ms, 20 ms, then a final probe at the deadline: at least four probes in all.
    assert len(calls) >= 4


def test_retry_until_sees_a_late_arrival(env):
    fs, root = env
    calls = []

    def probe():
        calls.append(1)
        if len(calls) == 3:
            fs.write_atomic(f"{root}/late", b"here", durable=False)
        return fs.lstat(f"{root}/late")

    assert fs.retry_until(probe, 5.0).size == 4
    assert len(calls) == 3


def test_concurrent_renames_of_one_source_have_exactly_one_winner(env):
    fs, root = env
    fs.create_empty(f"{root}/q/marker", durable=False)
    results = []
    barrier = threading.Barrier(8)

    def contender(index):
        barrier.wait()
        try:
            fs.rename(f"{root}/q/marker", f"{root}/r/{index}", durable=False)
            results.append("won")
        except FileNotFoundError:
            results.append("lost")

    threads = [threading.Thread(target=contender, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == ["lost"] * 7 + ["won"]
    assert len(names(fs, f"{root}/r")) == 1
    assert names(fs, f"{root}/q") == []


def test_symlink_creates_a_link_and_never_replaces_a_name(env):
    # The port's symlink rebuilds a transferred job's links at the far end of a transport.
    fs, root = env
    fs.write_atomic(f"{root}/l/target.txt", b"x", durable=False)
    fs.symlink("target.txt", f"{root}/l/link")
    info = fs.lstat(f"{root}/l/link")
    assert info is not None and info.is_symlink and fs.readlink(f"{root}/l/link") == "target.txt"
    with pytest.raises(FileExistsError):
        fs.symlink("elsewhere", f"{root}/l/link")
    assert fs.readlink(f"{root}/l/link") == "target.txt"
