"""The POSIX adapter's tree copy makes what ``shutil.copytree(symlinks=True)`` makes, and never opens a special file."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import threading
from pathlib import Path

import pytest

from httk.workflow.adapters.fs_posix import PosixFilesystem


def facts(root: Path) -> dict[str, tuple[object, ...]]:
    """Every name below ``root`` (``root`` itself as ``.``): kind, permission bits, mtime, bytes or link target."""
    out: dict[str, tuple[object, ...]] = {}
    for current, dirs, files in os.walk(root):
        for name in [".", *dirs, *files] if current == str(root) else [*dirs, *files]:
            path = os.path.normpath(os.path.join(current, name))
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                content: object = os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                content = Path(path).read_bytes()
            else:
                content = None
            try:
                attributes = sorted((key, os.getxattr(path, key, follow_symlinks=False))
                                    for key in os.listxattr(path, follow_symlinks=False))
            except OSError:
                attributes = []
            out[os.path.relpath(path, root)] = (stat.S_IFMT(info.st_mode), stat.S_IMODE(info.st_mode),
                                                info.st_mtime_ns, content, attributes)
    return out


def payload(root: Path) -> Path:
    """A tree with what payloads hold: modes that differ from the umask's, nesting, a link, old times."""
    tree = root / "src"
    (tree / "sub" / "deeper").mkdir(parents=True)
    (tree / "empty").mkdir()
    (tree / "job.json").write_bytes(b'{"name":"x"}\n')
    (tree / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (tree / "run.sh").chmod(0o755)
    (tree / "secret").write_bytes(b"s" * 70000)  # more than one small read
    (tree / "secret").chmod(0o600)
    (tree / "sub" / "setgid").write_text("g")
    (tree / "sub" / "setgid").chmod(0o2750)
    (tree / "sub" / "deeper" / "data").write_bytes(b"")
    (tree / "link").symlink_to("run.sh")
    (tree / "dangling").symlink_to("nowhere")
    try:
        os.setxattr(tree / "run.sh", "user.origin", b"bench")
    except OSError as error:  # a filesystem without user attributes (tmpfs on older kernels)
        if error.errno not in (errno.ENOTSUP, errno.EPERM):
            raise
    for index, path in enumerate(sorted(tree.rglob("*"), reverse=True)):
        os.utime(path, ns=(1_600_000_000_000_000_000 + index, 1_500_000_000_123_456_789 + index),
                 follow_symlinks=False)
    (tree / "sub").chmod(0o750)
    (tree / "sub" / "deeper").chmod(0o555)  # read-only: its entries are copied before its mode
    os.utime(tree / "sub" / "deeper", ns=(1, 1_400_000_000_000_000_000))
    os.utime(tree / "sub", ns=(1, 1_400_000_000_000_000_001))
    return tree


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("durable", [False, True])
def test_copy_tree_makes_what_shutil_copytree_makes(tmp_path, durable, staged):
    tree = payload(tmp_path)
    shutil.copytree(tree, tmp_path / "by-shutil", symlinks=True)
    PosixFilesystem().copy_tree(str(tree), str(tmp_path / "out" / "copy"), durable=durable, staged=staged)
    assert facts(tmp_path / "out" / "copy") == facts(tmp_path / "by-shutil")
    assert facts(tmp_path / "out" / "copy") == facts(tree)  # and both are the source: nothing lost
    assert os.listdir(tmp_path / "out") == ["copy"]


def test_copy_tree_of_one_file_keeps_its_mode_and_time(tmp_path):
    tree = payload(tmp_path)
    PosixFilesystem().copy_tree(str(tree / "secret"), str(tmp_path / "copy"), durable=False)
    shutil.copy2(tree / "secret", tmp_path / "by-shutil")
    assert facts(tmp_path)["copy"] == facts(tmp_path)["by-shutil"]


def test_a_small_file_is_copied_in_one_sendfile_and_a_staged_copy_in_no_rename(tmp_path, monkeypatch):
    """The copy stops at the size the file had when opened (no second call to find its end), and a
    staged copy is made at its name (no temp sibling renamed onto it)."""
    tree = payload(tmp_path)
    calls: list[str] = []
    real_sendfile = os.sendfile
    monkeypatch.setattr(os, "sendfile", lambda *args: calls.append("sendfile") or real_sendfile(*args))
    fs = PosixFilesystem()
    monkeypatch.setattr(fs, "_rename_noreplace", lambda *args: calls.append("rename"))
    fs.copy_tree(str(tree / "run.sh"), str(tmp_path / "one"), durable=False, staged=True)
    assert calls == ["sendfile"]
    assert (tmp_path / "one").read_text() == "#!/bin/sh\necho hi\n"
    calls.clear()
    fs.copy_tree(str(tree / "secret"), str(tmp_path / "two"), durable=False)
    assert calls == ["sendfile", "rename"]  # not staged: copied beside, then renamed onto the name


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_device_in_a_tree_is_refused_unopened_and_leaves_nothing(tmp_path, staged):
    tree = payload(tmp_path)
    # /dev/zero: shutil.copytree opened it and read without end.
    os.mknod(tree / "sub" / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    with pytest.raises(OSError, match=r"sub/zero` is a character device"):
        PosixFilesystem().copy_tree(str(tree), str(tmp_path / "out" / "copy"), durable=False, staged=staged)
    assert os.listdir(tmp_path / "out") == []


def test_a_socket_in_a_tree_is_refused_and_leaves_nothing(tmp_path):
    tree = payload(tmp_path)
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(tree / "sock"))
        with pytest.raises(OSError, match=r"sock` is a socket"):
            PosixFilesystem().copy_tree(str(tree), str(tmp_path / "out" / "copy"), durable=True)
    finally:
        listener.close()
    assert os.listdir(tmp_path / "out") == []


def test_sync_tree_never_opens_a_fifo(tmp_path):
    tree = payload(tmp_path)
    os.mkfifo(tree / "empty" / "pipe")
    # os.walk listed a FIFO as a file and its open for the fsync waited for a writer, for ever.
    worker = threading.Thread(target=PosixFilesystem().sync_tree, args=(str(tree),), daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        fd = os.open(tree / "empty" / "pipe", os.O_WRONLY | os.O_NONBLOCK)  # release the blocked open
        os.close(fd)
        pytest.fail("sync_tree blocked on the FIFO")


def _copy_as_nobody(root: str, staged: bool) -> dict[str, object]:
    """In a forked child running as uid 65534: copy a tree whose read-only directories are copied
    before an unreadable file; what was raised and what is left beside the destination."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            os.setgid(65534)
            os.setuid(65534)
            source = f"{root}/src"
            os.mkdir(source)
            for name in "abcdefgh":
                os.mkdir(f"{source}/{name}")
                Path(f"{source}/{name}/f").write_text("x")
                os.chmod(f"{source}/{name}", 0o555)
            # The unreadable file must not be listed first, or no read-only directory is copied before it.
            for n in range(50):
                bad = f"{source}/zz{n}"
                Path(bad).write_text("secret")
                with os.scandir(source) as entries:
                    if next(entries).name != f"zz{n}":
                        break
                os.unlink(bad)
            os.chmod(bad, 0o000)
            try:
                PosixFilesystem().copy_tree(source, f"{root}/out/copy", durable=False, staged=staged)
                raised: object = None
            except OSError as error:
                raised = [type(error).__name__, error.filename]
            import json

            os.write(write, json.dumps({"raised": raised, "bad": bad, "left": os.listdir(f"{root}/out")}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as stream:
        answer = stream.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, answer
    import json

    return json.loads(answer)


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.skipif(os.geteuid() != 0, reason="switching to an unprivileged uid needs root")
def test_a_failed_copy_of_read_only_directories_leaves_nothing_and_raises_its_own_error(staged):
    import tempfile

    root = tempfile.mkdtemp(prefix="httk-tree-copy-")
    try:
        os.chown(root, 65534, 65534)
        seen = _copy_as_nobody(root, staged)
        # The file's own EACCES, not rmtree's on a read-only directory of the partial copy.
        assert seen["raised"] == ["PermissionError", seen["bad"]]
        assert seen["left"] == []
    finally:
        for current, dirs, _ in os.walk(root):
            for name in dirs:
                os.chmod(os.path.join(current, name), 0o700)
        shutil.rmtree(root)
