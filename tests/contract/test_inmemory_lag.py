"""The in-memory filesystem's lag model: what a lagging NFS client sees, and that it ends.

A reader view hides names linked less than ``lag`` ago (existing contract, see
test_inmemory_crash.py), still shows names unlinked less than ``stale`` ago with
their old inode, and shows the older size of a file appended to within ``stale``.
Its own changes it sees at once; mutations act on the true tree; a crash ends
every cache; the visibility wait (``retry_until``) outlasts every window.
"""

from __future__ import annotations

import pytest

from httk.workflow.testing import FakeClock, InMemoryFilesystem


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def writer(clock: FakeClock) -> InMemoryFilesystem:
    fs = InMemoryFilesystem(clock=clock)
    fs.write_atomic("/w/a", b"first", durable=False)
    clock.advance(10)  # older than any window below
    return fs


def names(fs: InMemoryFilesystem, path: str = "/w") -> list[str]:
    return sorted(entry.name for entry in fs.scandir(path))


def test_a_renamed_name_stays_visible_under_its_old_name_for_the_stale_window(writer, clock):
    reader = writer.reader(0.0, stale_seconds=2.0)
    writer.rename("/w/a", "/w/b", durable=False)
    assert names(reader) == ["a", "b"]  # both: the new name is not lagged, the old one is stale
    assert reader.exists("/w/a") and reader.lstat("/w/a").is_file
    assert reader.read_bytes("/w/a") == b"first" and reader.read_document("/w/a") == b"first"
    assert names(writer) == ["b"]  # the true tree
    clock.advance(2.0)
    assert names(reader) == ["b"] and not reader.exists("/w/a")


def test_a_removed_name_and_a_replaced_document_are_stale_too(writer, clock):
    writer.write_atomic("/w/doc", b"old", durable=False)
    clock.advance(10)
    reader = writer.reader(0.0, stale_seconds=1.0)
    writer.remove("/w/a")
    writer.write_atomic("/w/doc", b"new", durable=False)
    assert reader.exists("/w/a")
    assert reader.read_bytes("/w/doc") == b"new"  # lag 0: the new inode is visible at once
    lagging = writer.reader(5.0, stale_seconds=5.0)
    writer.write_atomic("/w/doc", b"newer", durable=False)
    # "newer" is hidden; "new" lived too briefly for this view to have seen it: it still sees "old".
    assert lagging.read_bytes("/w/doc") == b"old"
    clock.advance(1.0)
    assert not reader.exists("/w/a")
    clock.advance(4.0)
    assert lagging.read_bytes("/w/doc") == b"newer"


def test_a_name_the_reader_could_never_have_seen_is_not_stale(writer, clock):
    reader = writer.reader(2.0)  # stale defaults to the lag
    writer.write_atomic("/w/brief", b"x", durable=False)
    clock.advance(1.0)
    writer.remove("/w/brief")  # lived 1 s, less than the lag: never visible to the reader
    assert names(reader) == ["a"]
    writer.write_atomic("/w/new", b"n", durable=False)  # write_atomic's temp name is never shown either
    assert names(reader) == ["a"]


def test_a_grown_file_shows_its_older_size_for_the_stale_window(writer, clock):
    appender = writer.open_appender("/w/log")
    appender.append(b"0123")
    clock.advance(10)
    reader = writer.reader(0.0, stale_seconds=3.0)
    appender.append(b"4567")
    clock.advance(1.0)
    appender.append(b"89")
    assert writer.lstat("/w/log").size == 10
    assert reader.lstat("/w/log").size == 4
    assert reader.read_bytes("/w/log") == b"0123" and reader.read_document("/w/log", limit=None) == b"0123"
    assert reader.read_range("/w/log", 2, 6) == b"23"  # a short read, as past an end of file
    clock.advance(2.0)
    assert reader.read_bytes("/w/log") == b"01234567"  # the first append is older than the window now
    clock.advance(1.0)
    assert reader.lstat("/w/log").size == 10


def test_a_view_sees_its_own_changes_at_once(writer, clock):
    view = writer.reader(5.0, stale_seconds=5.0)
    view.write_atomic("/w/mine", b"m", durable=False)
    view.rename("/w/a", "/w/moved", durable=False)
    appender = view.open_appender("/w/own.log")
    appender.append(b"abc")
    appender.append(b"def")
    assert names(view) == ["mine", "moved", "own.log"]
    assert view.read_bytes("/w/own.log") == b"abcdef"
    other = writer.reader(5.0, stale_seconds=5.0)
    assert names(other) == ["a"]  # another client: the old name stale, the new ones hidden


def test_mutations_act_on_the_true_tree_not_on_a_stale_name(writer, clock):
    reader = writer.reader(0.0, stale_seconds=5.0)
    writer.rename("/w/a", "/w/b", durable=False)
    assert reader.exists("/w/a")
    with pytest.raises(FileNotFoundError):
        reader.rename("/w/a", "/w/c", durable=False)  # the fence is the server's
    reader.create_empty("/w/a", durable=False)  # the name is free in the true tree
    assert writer.exists("/w/a") and writer.exists("/w/b")


def test_the_visibility_wait_outlasts_staleness(writer, clock):
    reader = writer.reader(0.5, stale_seconds=1.5)
    writer.rename("/w/a", "/w/b", durable=False)
    start = clock.monotonic()
    assert reader.retry_until(lambda: True if not reader.exists("/w/a") else None, 5.0) is True
    assert 1.5 <= clock.monotonic() - start <= 2.0
    assert reader.retry_until(lambda: True if reader.exists("/w/a") else None, 0.0) is None


def test_a_crash_ends_every_cache(writer, clock):
    writer.sync_tree("/")
    reader = writer.reader(0.0, stale_seconds=5.0)
    writer.rename("/w/a", "/w/b", durable=True)
    writer.crash()
    assert names(reader) == ["b"]


def test_before_scandir_runs_once_before_the_listing(writer, clock):
    calls = []
    writer.before_scandir("/w/", lambda: (calls.append(1), writer.write_atomic("/w/hooked", b"", durable=False)))
    assert names(writer) == ["a", "hooked"]  # the action's change is in the listing it preceded
    assert names(writer) == ["a", "hooked"] and calls == [1]
