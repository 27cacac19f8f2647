"""How the outcome draft keeps ``children/spawn.json``: once per publication in one process, whole after
every spawn when another process continues the draft (the Bash bridge).

Rewriting the whole file (and structuring every child again) at each spawn made a fan-out quadratic:
2,000 spawns of one parent took 70 s on the reference machine, 20,000 would take hours.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from httk.workflow import codec
from httk.workflow.adapters.fs_posix import PosixFilesystem
from httk.workflow.attempt_records import SpawnDocument
from httk.workflow.outcome import OutcomeDraft


class CountingFilesystem(PosixFilesystem):
    """The POSIX filesystem, counting the publications of each file name."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: dict[str, int] = {}

    def write_atomic(self, path: str, data: bytes, *, durable: bool) -> None:
        name = path.rsplit("/", 1)[-1]
        self.writes[name] = self.writes.get(name, 0) + 1
        super().write_atomic(path, data, durable=durable)


def _entry(index: int) -> dict[str, Any]:
    job_id = f"00000000-0000-4000-8000-{index:012d}"
    key = f"c{index}--{job_id}"
    return {"label": f"c{index}", "job_id": job_id, "job_key": key, "placement": "p", "payload": f"jobs/{key}"}


def _draft(control: Path, fs: CountingFilesystem) -> OutcomeDraft:
    ids = (f"{n:08d}-0000-4000-8000-000000000000" for n in itertools.count())
    return OutcomeDraft(control, durable=False, new_id=lambda: next(ids), fs=fs)


def _spawn(draft: OutcomeDraft, indices: range) -> None:
    for index in indices:
        draft.add_child(_entry(index), lambda directory: directory.mkdir())


def _listed(path: Path) -> list[str]:
    document = codec.structure(codec.decode(path.read_bytes(), "spawn.json"), SpawnDocument, "spawn.json")
    return [child.label for child in document.children]


def test_one_process_writes_spawn_json_once_at_publication(tmp_path: Path) -> None:
    fs = CountingFilesystem()
    draft = _draft(tmp_path, fs)
    _spawn(draft, range(50))
    assert fs.writes.get("spawn.json", 0) == 0
    ready = draft.publish({"action": "succeed"})
    assert fs.writes["spawn.json"] == 1
    assert _listed(ready / "children" / "spawn.json") == [f"c{index}" for index in range(50)]


def test_a_continued_draft_is_whole_after_every_spawn(tmp_path: Path) -> None:
    # The bridge: each process resumes the draft, spawns, and exits without publishing.
    first = _draft(tmp_path, CountingFilesystem())
    assert first.resume() == []
    _spawn(first, range(3))
    [directory] = [path for path in tmp_path.iterdir() if path.name.startswith("outcome.tmp.")]
    assert _listed(directory / "children" / "spawn.json") == ["c0", "c1", "c2"]
    fs = CountingFilesystem()
    second = _draft(tmp_path, fs)
    assert [child["label"] for child in second.resume()] == ["c0", "c1", "c2"]
    _spawn(second, range(3, 5))
    assert fs.writes["spawn.json"] == 2
    assert _listed(directory / "children" / "spawn.json") == ["c0", "c1", "c2", "c3", "c4"]
