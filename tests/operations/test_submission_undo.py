"""Submission through the in-memory filesystem: refusals and failed writes leave the workspace as it was."""

from __future__ import annotations

import errno

import attrs
import pytest

from httk.workflow.operations.submission import SubmissionError, submit
from httk.workflow.ports import DOCUMENT_LIMIT, FileStat
from httk.workflow.store.workspaces import Ports, WorkspaceService
from httk.workflow.testing import FakeClock, InMemoryFilesystem, SequentialIds
from memory_support import ROOT, write_payload


class Faulty(InMemoryFilesystem):
    """An in-memory filesystem with a second device under /mnt and writes that can be made to fail."""

    fail_rename: int | None = None
    fail_copy: int | None = None

    def lstat(self, path: str) -> FileStat | None:
        info = super().lstat(path)
        if info is not None and (path == "/mnt" or path.startswith("/mnt/")):
            return attrs.evolve(info, device=7)
        return info

    def rename(self, source: str, destination: str, *, durable: bool) -> None:
        if self.fail_rename is not None:
            # Like the POSIX adapter: the destination's parents are made before the rename fails.
            self.makedirs(destination.rsplit("/", 1)[0])
            raise OSError(self.fail_rename, "simulated", source)
        super().rename(source, destination, durable=durable)

    def copy_tree(self, source: str, destination: str, *, durable: bool, staged: bool = False) -> None:
        super().copy_tree(source, destination, durable=durable, staged=staged)
        if self.fail_copy is not None:
            raise OSError(self.fail_copy, "No space left on device", destination)


@pytest.fixture
def fs() -> Faulty:
    return Faulty(clock=FakeClock())


@pytest.fixture
def workspace(fs):
    return WorkspaceService(Ports(fs=fs, clock=fs.clock, ids=SequentialIds())).init(ROOT)


def names(fs: InMemoryFilesystem, top: str) -> list[str]:
    out, pending = [], [top]
    while pending:
        for entry in fs.scandir(pending.pop()):
            out.append(entry.path)
            if entry.is_dir:
                pending.append(entry.path)
    return sorted(out)


def refused_leaving_nothing(fs, workspace, source: str, placement: str, match: str, **options) -> None:
    """``submit`` is refused with ``match`` and the workspace tree is exactly as it was before."""
    before = names(fs, ROOT)
    with pytest.raises(SubmissionError, match=match):
        submit(workspace, source, placement, **options)
    assert names(fs, ROOT) == before


def test_move_from_another_device_is_refused_before_anything_is_written(fs, workspace):
    source = write_payload(fs, "/mnt/payload")
    refused_leaving_nothing(fs, workspace, source, "a/b", "different filesystems; drop --move", move=True)
    assert fs.exists(f"{source}/job.json")


def test_a_move_the_kernel_refuses_anyway_takes_its_directories_back(fs, workspace):
    # Two mounts of one filesystem share st_dev and still refuse the rename (EXDEV).
    source = write_payload(fs, "/src/payload")
    fs.fail_rename = errno.EXDEV
    refused_leaving_nothing(fs, workspace, source, "deep/er/p", "drop --move", move=True)
    assert fs.exists(f"{source}/job.json")


def test_a_copy_that_fails_removes_the_staged_copy(fs, workspace):
    source = write_payload(fs, "/src/payload")
    fs.fail_copy = errno.ENOSPC
    refused_leaving_nothing(fs, workspace, source, "p/q",
                            "placement 'p/q'.*No space left on device; nothing was submitted")


def test_a_rename_that_fails_after_the_copy_removes_both(fs, workspace):
    source = write_payload(fs, "/src/payload")
    fs.makedirs(f"{ROOT}/p")  # an existing placement directory is kept
    fs.fail_rename = errno.ENAMETOOLONG
    refused_leaving_nothing(fs, workspace, source, "p/new", "placement .p/new.: simulated; nothing was submitted")


def test_a_long_payload_file_name_is_refused_naming_the_placement(fs, workspace):
    source = write_payload(fs, "/src/payload")
    fs.write_atomic(f"{source}/{'n' * 256}", b"x", durable=False)
    refused_leaving_nothing(fs, workspace, source, "p", "placement 'p': the payload name 'nnnn.* is 256 bytes")


def test_a_payload_name_taken_by_a_hand_made_directory_gives_the_id_back(fs, workspace):
    # A generated id is not looked up in advance: the exclusive rename finds the name taken by a
    # directory no submission made (it holds no job.json), and the reservation is released.
    source = write_payload(fs, "/src/payload")
    rename = fs.rename

    def taken_meanwhile(src: str, destination: str, *, durable: bool) -> None:
        if destination.startswith(f"{ROOT}/p/"):
            fs.makedirs(destination)
            fs.write_atomic(f"{destination}/notes.txt", b"mine", durable=False)
        rename(src, destination, durable=durable)

    fs.rename = taken_meanwhile  # type: ignore[method-assign]
    with pytest.raises(SubmissionError, match="nothing was submitted"):
        submit(workspace, source, "p")
    reservations = [name for name in names(fs, f"{ROOT}/.httk-workflow/ids") if fs.lstat(name).is_file]
    assert reservations == []


@pytest.mark.parametrize("poison", ["symlink", "fifo", "directory"])
@pytest.mark.parametrize("batch", [False, True], ids=["submit", "submit_many"])
def test_a_job_json_that_is_not_a_regular_file_is_refused_unread(fs, workspace, poison, batch):
    """As a manager reads job.json (never through a link, never opening a FIFO): refused at submission instead.

    Before, a linked job.json was read through the link and submitted (a job no manager would run),
    and a FIFO's read blocked the submission for ever (the in-memory filesystem's SimulatedHang).
    """
    from httk.workflow.operations.bulk_submission import submit_many

    real = write_payload(fs, "/src/real")
    source = write_payload(fs, "/src/p")
    fs.remove(f"{source}/job.json")
    if poison == "symlink":
        fs.symlink(f"{real}/job.json", f"{source}/job.json")
    elif poison == "fifo":
        fs.mkfifo(f"{source}/job.json")
    else:
        fs.makedirs(f"{source}/job.json")
    before = names(fs, ROOT)
    with pytest.raises(SubmissionError, match=r"^/src/p/job\.json is a .*, not a regular file; a manager runs only"):
        if batch:
            submit_many(workspace, [real, source], "camp/a")
        else:
            submit(workspace, source, "camp/a")
    assert names(fs, ROOT) == before


def test_an_oversized_job_json_is_refused_naming_the_size_limit(fs, workspace):
    source = write_payload(fs, "/src/payload")
    fs.write_atomic(f"{source}/job.json", b" " * (DOCUMENT_LIMIT + 1), durable=False)
    before = names(fs, ROOT)
    with pytest.raises(SubmissionError) as refused:
        submit(workspace, source, "p")
    text = str(refused.value)
    assert text == (f"{source}/job.json is {DOCUMENT_LIMIT + 1} bytes, more than the {DOCUMENT_LIMIT}-byte bound "
                    "of a document: a job.json is limited to 16 MiB; keep large data in payload files beside it")
    assert "regular file" not in text
    assert names(fs, ROOT) == before
