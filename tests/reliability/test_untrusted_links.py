"""``Filesystem.find_symlink``: the port walk that resolves nothing through a link, on both adapters.

The manager uses it before acting in a tree a runner could have written (an
outcome, the commit ledger, a job's data); the refusals themselves are tested
with real managers in tests/managers/test_ops_untrusted_links.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.testing import InMemoryFilesystem


class _Posix:
    def __init__(self, root: Path) -> None:
        self.fs = PosixFilesystem()
        self.root = str(root)

    def mkdir(self, relative: str) -> None:
        os.makedirs(f"{self.root}/{relative}", exist_ok=True)

    def file(self, relative: str) -> None:
        Path(f"{self.root}/{relative}").write_bytes(b"x")

    def link(self, target: str, relative: str) -> None:
        os.symlink(target, f"{self.root}/{relative}")

    def fifo(self, relative: str) -> None:
        os.mkfifo(f"{self.root}/{relative}")


class _Memory:
    def __init__(self) -> None:
        self.fs = InMemoryFilesystem()
        self.root = "/ws"
        self.fs.makedirs(self.root)

    def mkdir(self, relative: str) -> None:
        self.fs.makedirs(f"{self.root}/{relative}")

    def file(self, relative: str) -> None:
        self.fs.write_atomic(f"{self.root}/{relative}", b"x", durable=False)

    def link(self, target: str, relative: str) -> None:
        self.fs.symlink(target, f"{self.root}/{relative}")

    def fifo(self, relative: str) -> None:
        self.fs.mkfifo(f"{self.root}/{relative}")


@pytest.fixture(params=["posix", "memory"])
def tree(request, tmp_path):
    if request.param == "posix":
        (tmp_path / "ws").mkdir()
        made = _Posix(tmp_path / "ws")
    else:
        made = _Memory()
    # root/a/b/c.txt, root/outside/secret, root/a/l -> ../outside (a link inside the tree)
    made.mkdir("a/b")
    made.file("a/b/c.txt")
    made.mkdir("outside")
    made.file("outside/secret")
    made.link(f"{made.root}/outside", "a/l")
    return made


def test_a_tree_without_links_has_none(tree):
    root = f"{tree.root}/a"
    assert tree.fs.find_symlink(root, f"{root}/b/c.txt") is None
    assert tree.fs.find_symlink(root, f"{root}/b") is None
    assert tree.fs.find_symlink(root, root) is None


def test_a_link_on_the_way_is_named_and_not_followed(tree):
    root = f"{tree.root}/a"
    assert tree.fs.find_symlink(root, f"{root}/l/secret") == f"{root}/l"
    assert tree.fs.find_symlink(root, f"{root}/l/missing/deeper") == f"{root}/l"


def test_a_final_link_is_named_too(tree):
    root = f"{tree.root}/a"
    assert tree.fs.find_symlink(root, f"{root}/l") == f"{root}/l"
    tree.link("nowhere", "a/b/dangling")
    assert tree.fs.find_symlink(root, f"{root}/b/dangling") == f"{root}/b/dangling"


def test_a_missing_name_or_a_file_on_the_way_ends_the_walk(tree):
    root = f"{tree.root}/a"
    assert tree.fs.find_symlink(root, f"{root}/nothing/l") is None
    assert tree.fs.find_symlink(root, f"{root}/b/c.txt/below") is None


def test_a_fifo_on_the_way_never_blocks(tree):
    tree.fifo("a/b/pipe")
    root = f"{tree.root}/a"
    assert tree.fs.find_symlink(root, f"{root}/b/pipe") is None


def test_the_root_itself_is_trusted_and_followed(tree):
    tree.link(f"{tree.root}/a", "alias")
    alias = f"{tree.root}/alias"
    assert tree.fs.find_symlink(alias, f"{alias}/b/c.txt") is None
    # Below a wider root the same alias is a link on the way.
    assert tree.fs.find_symlink(tree.root, f"{alias}/b/c.txt") == alias


@pytest.mark.parametrize("path", ["/elsewhere/x", "{root}x/y", "{root}/b/../l"])
def test_a_path_not_plainly_below_the_root_is_a_value_error(tree, path):
    root = f"{tree.root}/a"
    with pytest.raises(ValueError):
        tree.fs.find_symlink(root, path.format(root=root))
