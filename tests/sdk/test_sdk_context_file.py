"""``context.json`` is read like any document another actor wrote: a FIFO there never hangs the runner."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from httk.workflow import codec
from httk.workflow.runtime import AttemptContext
from httk.workflow.testing import InMemoryFilesystem


@pytest.fixture
def deadline():
    """Fail (instead of hanging the test run) if a read blocks for 10 s."""

    def expired(signum, frame):
        raise AssertionError("AttemptContext.load blocked")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("what", ["fifo", "directory", "symlink"])
def test_a_context_json_that_is_no_regular_file_is_refused_in_one_line(tmp_path: Path, what: str, deadline):
    path = tmp_path / "context.json"
    if what == "fifo":
        os.mkfifo(path)
    elif what == "directory":
        path.mkdir()
    else:
        (tmp_path / "real.json").write_text("{}")
        path.symlink_to(tmp_path / "real.json")
    with pytest.raises(codec.DocumentError) as refused:
        AttemptContext.load(path)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"{path} @ $: is a")
    assert "start this runner through a manager" in message


def test_the_in_memory_filesystem_refuses_the_same_fifo(deadline):
    fs = InMemoryFilesystem()
    fs.makedirs("/a")
    fs.mkfifo("/a/context.json")
    with pytest.raises(codec.DocumentError, match="is a FIFO, not a regular file"):
        AttemptContext.load("/a/context.json", fs=fs)
