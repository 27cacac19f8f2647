"""Forwarding a command to ``REMOTE:WS`` as plain functions: staging the local files, uploading, cleaning up.

``stage`` decides how a forwarded argument is spelled there and what is uploaded;
``run_forwarded`` runs the command (in a fresh upload directory when there are
uploads) and removes that directory even when the command fails. A transport
double stands in for the remote; the local files live on the in-memory filesystem.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence

import pytest

from httk.workflow.operations.forwarding import (
    PRECHECK_SECONDS,
    LocalPath,
    RemoteSession,
    run_forwarded,
    save_scripts,
    stage,
    unresolved_settings,
)
from httk.workflow.operations.remote_staging import Upload
from httk.workflow.operations.remotes import Remote, RemoteError, RemoteReference, Template
from httk.workflow.ports import CommandResult, TransportError
from httk.workflow.testing import memory_ports


def locate_in(found: dict[str, LocalPath]) -> Callable[[str, str], LocalPath | None]:
    return lambda path, kind: found.get(f"{kind}:{path}")


def test_a_relative_path_keeps_its_name_and_an_absolute_one_goes_below_upload():
    uploads: list[Upload] = []
    locate = locate_in({
        "payload:p": LocalPath("/home/u/p", "/data/p"),
        "file:/tmp/POSCAR": LocalPath("/tmp/POSCAR", "/tmp/POSCAR"),
    })
    assert stage("p", kind="payload", separator=None, required=True, remote="kappa", uploads=uploads,
                 locate=locate) == "p"
    assert stage("structure=/tmp/POSCAR", kind="file", separator="=", required=False, remote="kappa",
                 uploads=uploads, locate=locate) == "structure=.upload/1/POSCAR"
    # The symlinked payload is sent as the tree it names.
    assert uploads == [Upload("/data/p", "p", "/home/u/p"), Upload("/tmp/POSCAR", ".upload/1/POSCAR", "/tmp/POSCAR")]


def test_a_value_that_names_nothing_here_is_passed_on_unless_required():
    uploads: list[Upload] = []
    nothing = locate_in({})
    assert stage("encut=520", kind="file", separator="=", required=False, remote="kappa", uploads=uploads,
                 locate=nothing) == "encut=520"
    assert stage("no-separator", kind="file", separator="=", required=False, remote="kappa", uploads=uploads,
                 locate=nothing) == "no-separator"
    with pytest.raises(RemoteError, match=r"^missing: not a payload directory \(holding job.json\) on this "
                                          r"machine; name a local one to send to kappa$"):
        stage("missing", kind="payload", separator=None, required=True, remote="kappa", uploads=uploads,
              locate=nothing)
    assert uploads == []


class StreamingTransport:
    """A transport double: ``PREPARE`` answers with a workspace and a directory; ``stream`` exits ``code``."""

    def __init__(self, code: int = 0, *, remove_fails: bool = False) -> None:
        self.code, self.remove_fails = code, remove_fails
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> CommandResult:
        self.calls.append(list(argv))
        if argv[:2] == ["sh", "-c"] and "mktemp" in argv[2]:
            return CommandResult(0, "/there/ws\n/there/ws/.httk-workflow/tmp/httk-upload.1\n", "")
        if argv[0] == "rm" and self.remove_fails:
            raise TransportError("connection lost")
        return CommandResult(0, "", "")

    def stream(self, argv: Sequence[str], *, out: Callable[[bytes], None], err: Callable[[bytes], None],
               timeout: float | None = None) -> int:
        self.calls.append(["stream", *argv])
        out(b"done\n")
        return self.code

    def put(self, local: str, remote: str) -> None:
        self.calls.append(["put", local, remote])

    def get(self, remote: str, local: str) -> None:
        raise AssertionError("a forwarded command downloads nothing")

    def close(self) -> None:
        self.calls.append(["close"])


def session(transport: StreamingTransport) -> RemoteSession:
    template = Template("local", "this machine", "local", "local", {})
    return RemoteSession(Remote("kappa", template, {}), transport, batch=None)  # type: ignore[arg-type]


def test_uploads_go_to_a_fresh_directory_the_command_runs_in_and_it_is_removed_afterwards():
    fs = memory_ports().fs
    fs.makedirs("/here/p")
    fs.write_atomic("/here/p/job.json", b"{}", durable=False)
    transport = StreamingTransport(code=3)
    seen: list[str] = []
    warnings: list[str] = []

    code = run_forwarded(
        session(transport), RemoteReference("kappa", "rel/ws"), lambda ws: ["workflow", "job", "submit", "--", ws, "p"],
        [Upload("/here/p", "p")], fs, timeout=5.0, out=lambda data: seen.append(data.decode()), err=seen.append,
        warn=warnings.append,
    )

    assert code == 3 and seen == ["done\n"] and warnings == []
    directory = "/there/ws/.httk-workflow/tmp/httk-upload.1"
    puts = [call for call in transport.calls if call[0] == "put"]
    assert puts == [["put", "/here/p/job.json", f"{directory}/p/job.json"]]
    [streamed] = [call for call in transport.calls if call[0] == "stream"]
    # In the upload directory, with the relative workspace spelled by its absolute path there.
    assert directory in streamed and streamed[-2:] == ["/there/ws", "p"]
    assert transport.calls[-1] == ["rm", "-rf", "--", directory]


def test_a_directory_that_cannot_be_removed_is_a_warning_not_an_error():
    fs = memory_ports().fs
    fs.write_atomic("/POSCAR", b"Si", durable=False)
    warnings: list[str] = []
    code = run_forwarded(
        session(StreamingTransport(remove_fails=True)), RemoteReference("kappa", "/there/ws"), lambda ws: ["x", ws],
        [Upload("/POSCAR", "POSCAR")], fs, timeout=5.0, out=lambda data: None, err=lambda data: None,
        warn=warnings.append,
    )
    assert code == 0
    assert warnings == ["remote kappa: could not remove /there/ws/.httk-workflow/tmp/httk-upload.1 there; "
                        "remove it by hand"]


def test_without_uploads_the_command_runs_in_the_login_directory_as_spelled():
    transport = StreamingTransport()
    code = run_forwarded(
        session(transport), RemoteReference("kappa", "runs"), lambda ws: ["workflow", "job", "list", "--", ws],
        [], memory_ports().fs, timeout=None, out=lambda data: None, err=lambda data: None, warn=print,
    )
    assert code == 0
    [streamed] = transport.calls
    assert streamed[0] == "stream" and streamed[-1] == "runs" and "/there/ws" not in streamed


def test_every_command_there_is_launched_forwarded_as_the_remote():
    """The launcher exports HTTK_WORKFLOW_FORWARDED_AS=REMOTE, so the remote's fix hints say 'kappa:'."""
    transport = StreamingTransport()
    run_forwarded(session(transport), RemoteReference("kappa", "runs"), lambda ws: ["workflow", "job", "list", ws],
                  [], memory_ports().fs, timeout=None, out=lambda data: None, err=lambda data: None, warn=print)
    [streamed] = transport.calls
    assert streamed[1:3] == ["sh", "-c"] and "HTTK_WORKFLOW_FORWARDED_AS=$2" in streamed[3]
    assert streamed[4:7] == ["httk-workflow", "", "kappa"] and streamed[-3:] == ["job", "list", "runs"]


class SlowTransport(StreamingTransport):
    def run(self, argv: Sequence[str], *, input: str | None = None, timeout: float | None = None) -> CommandResult:
        self.calls.append([*argv, f"timeout={timeout}"])
        raise TransportError("ssh kappa: the command did not finish within 60 s")


def test_runs_settings_advice_never_stops_a_submission():
    warnings: list[str] = []
    transport = SlowTransport()
    assert unresolved_settings(session(transport), "/there/ws", warnings.append) == []
    assert transport.calls[0][-1] == f"timeout={PRECHECK_SECONDS}"
    assert warnings == ["remote kappa: the pending jobs' settings were not checked (ssh kappa: the command did not "
                        "finish within 60 s); see 'httk workflow precheck kappa:/there/ws'"]


def test_a_copy_of_each_submitted_script_is_kept_beside_its_output_atomically():
    transport = StreamingTransport()
    template = Template("local", "this machine", "local", "local", {})

    class Batch:
        name = "slurm"

    warnings: list[str] = []
    kept = RemoteSession(Remote("kappa", template, {}), transport, batch=Batch())  # type: ignore[arg-type]
    save_scripts(kept, "/ws/.httk-workflow/batch", "#!/bin/sh\n", ["41", "42"], warnings.append)
    [call] = transport.calls
    assert call[:2] == ["sh", "-c"] and call[3:] == ["httk-workflow", "/ws/.httk-workflow/batch", "slurm-41.sh",
                                                      "slurm-42.sh"]
    assert "mv -f" in call[2] and warnings == []
    save_scripts(kept, "/ws/.httk-workflow/batch", "#!/bin/sh\n", [], warnings.append)
    assert len(transport.calls) == 1  # nothing submitted, nothing kept


def test_stderr_names_each_upload_by_its_local_path_whatever_the_chunks():
    from httk.workflow.operations.forwarding import LocalSpelling

    directory = "/there/tmp/httk-upload.1"
    uploads = [Upload("/real/p", "p", "/home/u/p"), Upload("/real/p-2", "p-2", "/home/u/p-2"),
               Upload("/x/POSCAR", ".upload/1/POSCAR"), Upload("/y/POSCAR", ".upload/10/POSCAR")]
    text = (f"error: {directory}/p/job.json @ $.data: bad\n"
            f"note: {directory}/p-2 and {directory}/.upload/10/POSCAR and {directory}/.upload/1/POSCAR\r"
            f"{directory}/px is no upload, {directory}/p.x neither; {directory}/p.\nlast {directory}/p")
    for size in (1, 3, 7, len(text)):
        seen: list[bytes] = []
        spelling = LocalSpelling(directory, uploads, seen.append)
        data = text.encode()
        for start in range(0, len(data), size):
            spelling(data[start:start + size])
        spelling.flush()
        assert b"".join(seen).decode() == (
            "error: /home/u/p/job.json @ $.data: bad\n"
            "note: /home/u/p-2 and /y/POSCAR and /x/POSCAR\r"
            f"{directory}/px is no upload, {directory}/p.x neither; /home/u/p.\nlast /home/u/p"), size


def test_what_cannot_become_an_uploads_path_is_handed_on_at_once():
    """A progress line or a prompt without its newline is not held back; only a possible path is."""
    from httk.workflow.operations.forwarding import LocalSpelling

    directory = "/there/tmp/httk-upload.1"
    seen: list[bytes] = []
    spelling = LocalSpelling(directory, [Upload("/real/p", "p", "/home/u/p")], seen.append)
    spelling(b"waiting for the job")
    assert seen == [b"waiting for the job"]
    spelling(b" ... see /there/tmp/httk")  # may be the start of the directory: held
    assert seen[1:] == [b" ... see "]
    spelling(b"-upload.1/p")  # the path, maybe not ended yet: held to the end of its line
    assert seen[2:] == []
    spelling(b" is bad")
    spelling.flush()
    assert b"".join(seen) == b"waiting for the job ... see /home/u/p is bad"
    # A name that no UTF-8 can spell is carried as the file system spells it.
    odd = LocalSpelling(directory, [Upload("/real/p", "p", "/home/u/caf\udce9")], seen.append)
    seen.clear()
    odd(f"{directory}/p\n".encode())
    assert seen == [b"/home/u/caf\xe9\n"]


def test_an_upload_is_named_by_its_origin_inside_the_directory_only():
    from httk.workflow.operations.remote_staging import uploaded_document, uploaded_origin

    document = uploaded_document("/there/tmp/up.1", [Upload("/real/p", "p", "/home/u/p"),
                                                     Upload("/x/POSCAR", ".upload/1/POSCAR")])
    assert uploaded_origin(document, "/there/tmp/up.1/p") == "/home/u/p"
    assert uploaded_origin(document, "/there/tmp/up.1/p/data/in.txt") == "/home/u/p/data/in.txt"
    assert uploaded_origin(document, "/there/tmp/up.1/.upload/1/POSCAR") == "/x/POSCAR"
    for other in ("/there/tmp/up.1/px", "/there/tmp/up.10/p", "/elsewhere/p"):
        assert uploaded_origin(document, other) == other
    # The command there sees its working directory with links resolved: that spelling is the directory too.
    assert uploaded_origin(document, "/data/up.1/p/x", realpath=lambda path: "/data/up.1") == "/home/u/p/x"
    for broken in ("", "not json", "[1]", '{"directory": 1, "origins": {}}'):
        assert uploaded_origin(broken, "/there/tmp/up.1/p") == "/there/tmp/up.1/p"


def test_the_launch_script_exports_what_it_was_told(tmp_path):
    from httk.workflow.operations.remote_staging import launch_argv

    argv = launch_argv(["sh"], ["-c", 'printf "%s|%s|%s" "$PWD" "$HTTK_WORKFLOW_FORWARDED_AS" '
                                      '"$HTTK_WORKFLOW_UPLOADED"'], str(tmp_path), remote="kappa", uploaded='{"a":1}')
    env = {key: value for key, value in os.environ.items() if not key.startswith("HTTK_")}
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=True)
    assert done.stdout == f'{tmp_path}|kappa|{{"a":1}}'
    plain = subprocess.run(launch_argv(["sh"], ["-c", 'printf "%s" "${HTTK_WORKFLOW_UPLOADED-unset}"']),
                           capture_output=True, text=True, env=env, check=True)
    assert plain.stdout == "unset"
