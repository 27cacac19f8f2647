"""Driving a transfer: the two endpoints, the bundle copy, the environment check, resume and rollback.

An endpoint is one side's workspace as the client reaches it: a
:class:`LocalEndpoint` calls :class:`.transfer.SourceSide` /
:class:`.transfer_import.DestinationSide` in this process, a
:class:`RemoteEndpoint` runs the same operation with the remote's own httk
(``httk workflow transfer-remote ROLE OP WORKSPACE``, the request as JSON on
stdin) and moves files with the transport's ``put``/``get``, all over one
connection. :class:`Transfer` finishes unfinished transfers first (the same
decisions whether the client crashed, the connection dropped or the destination
refused), then checks and starts the new one. Spec: 000 "Running on a remote",
"Readiness and transfer environment advisories".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from .. import codec
from ..domain.lifecycle import FINAL_KINDS, StateKind
from ..ports import Filesystem, Ids, RemoteTransport, TransportError
from ..store import transfer_bundle as bundles
from ..store.transfer_ledger import DESTINATION, ROLLED_BACK, SOURCE, resume_command
from .remote_staging import launch_argv
from .transfer import TransferError

#: The operations each role offers to a client, local or remote.
OPERATIONS: dict[str, frozenset[str]] = {
    SOURCE: frozenset({
        "identity", "select", "pending", "state", "plan", "detach", "bundle", "bundle_files", "mark_sent",
        "decide_rollback", "acknowledge", "destination_rolled_back", "retire", "rollback",
    }),
    DESTINATION: frozenset({"probe", "state", "prepare", "receive", "import", "abort"}),
}
#: Source steps after which nothing was sent: a refusal or a lost destination rolls the transfer back.
NOT_SENT = ("planned", "detached", "bundled")
_MAX_PASSES = 64


class Unreachable(Exception):
    """An endpoint that could not be reached, or was lost mid-call; ``role`` says which side."""

    def __init__(self, role: str, message: str) -> None:
        super().__init__(message)
        self.role = role


def dispatch(side: Any, role: str, op: str, request: Mapping[str, Any]) -> Any:
    """Call operation ``op`` of ``side`` with ``request``'s members as keyword arguments."""
    if op not in OPERATIONS[role]:
        raise TransferError(f"unknown {role} operation {op!r}; known: {', '.join(sorted(OPERATIONS[role]))}")
    method = getattr(side, "import_" if op == "import" else op)
    try:
        return method(**dict(request))
    except TypeError as error:
        raise TransferError(f"{role} {op}: {error}") from None


def refusal_text(error: BaseException, label: str) -> str:
    """One line for an anticipated failure of one side's operation."""
    if isinstance(error, OSError) and error.strerror:
        where = f" ({error.filename})" if error.filename else ""
        return f"{label}: {error.strerror}{where}"
    return str(error)


class Endpoint(Protocol):
    label: str

    def call(self, role: str, op: str, request: Mapping[str, Any]) -> Any: ...


class LocalEndpoint:
    """A workspace of this machine: both roles' services, called in this process."""

    def __init__(self, source: Any, destination: Any, fs: Filesystem, label: str) -> None:
        self.sides = {SOURCE: source, DESTINATION: destination}
        self.fs = fs
        self.label = label

    def call(self, role: str, op: str, request: Mapping[str, Any]) -> Any:
        try:
            return dispatch(self.sides[role], role, op, request)
        except TransferError:
            raise
        except (OSError, ValueError) as error:  # a ledger, bundle or document problem, a full disk
            raise TransferError(refusal_text(error, self.label)) from None


class RemoteEndpoint:
    """A workspace on a remote, reached through its transport and its own httk."""

    def __init__(
        self, transport: RemoteTransport, httk_command: Sequence[str], workspace: str, label: str, *,
        remote: str, timeout: float, missing_httk: str | None = None,
    ) -> None:
        self.transport = transport
        self.httk_command = list(httk_command)
        self.workspace = workspace
        self.label = label
        self.remote = remote
        self.timeout = timeout
        #: The refusal when the httk command is not there (the one every forwarded command gives).
        self.missing_httk = missing_httk

    def call(self, role: str, op: str, request: Mapping[str, Any]) -> Any:
        args = ["workflow", "transfer-remote", role, op, "--label", self.label, "--"]
        if self.workspace:
            args.append(self.workspace)
        try:
            # Through the launcher every forwarded command uses, so a pipx httk in ~/.local/bin is found.
            result = self.transport.run(launch_argv(self.httk_command, args, remote=self.remote),
                                        input=codec.dumps(dict(request)), timeout=self.timeout)
        except TransportError as error:
            raise Unreachable(role, f"remote {self.remote}: {error}") from None
        if result.returncode in (126, 127):
            raise TransferError(self.missing_httk or (
                f"remote {self.remote}: cannot run {' '.join(self.httk_command)!r} there (exit {result.returncode}); "
                f"set httk_command (see 'httk workflow remote check {self.remote}')"))
        if result.returncode != 0:
            text = result.stderr + "\n" + result.stdout
            if "No such command 'transfer-remote'" in text:
                raise TransferError(f"remote {self.remote}: its httk has no 'transfer-remote' (it is older than this "
                                    "one); upgrade httk-workflow there")
            lines = [line.strip() for line in text.splitlines() if line.strip()]
            line = next((item[len("error:"):].strip() for item in lines if item.startswith("error:")),
                        lines[-1] if lines else f"exit status {result.returncode}")
            if result.returncode == 2:
                raise TransferError(line)  # a refusal, as the remote's own httk words it
            # Killed, crashed, or timed out there: like a dropped connection, the step's fate is unknown here.
            raise Unreachable(role, f"remote {self.remote}: transfer-remote {role} {op} ended with exit status "
                                    f"{result.returncode} ({line})")
        try:
            return json.loads(result.stdout)
        except json.JSONDecodeError:
            raise TransferError(f"remote {self.remote}: transfer-remote {role} {op} printed no JSON") from None


def _nothing(moved: bool) -> str:
    """How a refusal ends: nothing moved, or (after this command finished resumed transfers) nothing more."""
    return "nothing more moved (the transfers finished before stay done)" if moved else "nothing moved"


def _names(selector: str, key: str) -> bool:
    """Whether the job selector ``selector`` (a key, an id, or a prefix of either) names the job ``key``."""
    return key == selector or key.split("--")[-1].startswith(selector) or key.startswith(selector)


# -- the environment check -------------------------------------------------------------------------
def environment(jobs: Sequence[Mapping[str, Any]], settings: Mapping[str, Any], label: str) -> list[dict[str, Any]]:
    """How each declared setting of each job resolves at the destination, and the warnings.

    Layers: the job's inputs (its overrides), the destination's settings, the declared
    default; never this process's environment, which is not the destination's. A
    required entry none of them resolves is a ``warning``; an optional one is ``unset``.
    A succeeded or cancelled job (:data:`FINAL_KINDS`) never runs again, so its settings
    are not checked: bringing results home must not warn about the VASP command.
    """
    out = []
    for job in jobs:
        if StateKind(job["kind"]) in FINAL_KINDS:
            continue
        inputs = set(job.get("inputs") or ())
        for name, declared in sorted((job.get("settings") or {}).items()):
            if name in inputs:
                status = "job input"
            elif name in settings:
                status = "destination setting"
            elif declared.get("has_default"):
                status = "declared default"
            else:
                status = "warning" if declared.get("required") else "unset"
            entry = {"job": job["job_key"], "setting": name, "status": status}
            if status == "warning":
                entry["message"] = (
                    f"job {job['job_key']}: setting {name} resolves to nothing at {label} (no job input, no setting "
                    f"there, no declared default); set it with 'httk workflow workspace settings set {label} {name} "
                    "VALUE'")
            out.append(entry)
    return out


# -- the transfer ------------------------------------------------------------------------------
class Transfer:
    """One ``transfer SRC DST`` invocation."""

    def __init__(
        self,
        source: Endpoint,
        destination: Endpoint,
        ids: Ids,
        *,
        progress: Callable[[dict[str, Any]], None] | None = None,
        warn: Callable[[str], None] | None = None,
        local_fs: Filesystem | None = None,
        scratch: str | None = None,
    ) -> None:
        self.src = source
        self.dst = destination
        self.ids = ids
        self.progress = progress or (lambda event: None)
        self.local_fs = local_fs
        self.scratch = scratch
        self.warnings: list[str] = []
        self._warn = warn or (lambda message: None)

    def warn(self, message: str) -> None:
        """Record a warning and show it at once (the caller's ``warn``)."""
        self.warnings.append(message)
        self._warn(message)

    # -- entry point -----------------------------------------------------------------------------
    def run(
        self, *, jobs: Sequence[str] = (), placement: str | None = None, kinds: Sequence[str] = (),
        strict: bool = False, resume_only: bool = False,
    ) -> dict[str, Any]:
        """Finish the unfinished transfers to this destination, then (unless ``resume_only``) start a new one."""
        report: dict[str, Any] = {"source": self.src.label, "destination": self.dst.label, "transfers": [],
                                  "skipped": [], "unselected": {}, "owned": {}, "placement": None,
                                  "environment": [], "warnings": self.warnings}
        destination, unreachable = self._probe()
        if unreachable is not None:
            # Spec 000: an unreachable destination gets one immediate warning and is only a strict-mode
            # failure of the environment check; moving anything there is refused further on.
            self.warn(f"{self.dst.label} is unreachable ({unreachable}): its environment was not checked")
            if strict:
                raise TransferError(f"{self.warnings[-1]}; --strict-environment needs its settings: nothing moved")
        for pending in self._call_source("pending", {}):
            header = pending["header"].get("destination") or {}
            if destination is not None and header.get("workspace_id") == destination["workspace_id"]:
                report["transfers"].append(self.advance(pending["transfer_id"], resumed=True))
            elif destination is None and header.get("label") == self.dst.label:
                report["transfers"].append(self._held(pending["transfer_id"], pending["step"], str(unreachable),
                                                      True))
            else:
                self.warn(
                    f"transfer {pending['transfer_id']} to {header.get('label')} is unfinished (step "
                    f"{pending['step']}); finish it with 'httk workflow transfer {self.src.label} "
                    f"{header.get('label')} --resume'")
        if resume_only:
            return report
        # Repeating an interrupted command finishes it: the jobs it named went with the resumed transfer.
        moved = [key for item in report["transfers"] if item["state"] == "retired" for key in item["jobs"]]
        remaining = [job for job in jobs if not any(_names(job, key) for key in moved)]
        if jobs and not remaining:
            return report
        selection = self._call_source("select", {"jobs": remaining, "placement": placement, "kinds": list(kinds)},
                                      moved=bool(report["transfers"]))
        report["skipped"] = selection["skipped"]
        # A source of an older version does not count them.
        report["unselected"] = selection.get("unselected") or {}
        report["owned"] = selection.get("owned") or {}
        if selection.get("placement_empty"):
            report["placement"] = {"placement": placement, "nearest": selection.get("nearest_placement")}
        done = {item["transfer_id"] for item in report["transfers"]}
        asked = selection.get("finished_jobs") or {}  # a source of an older version does not say
        for transfer_id in selection.get("finished") or ():
            if transfer_id not in done:
                if destination is not None:  # an unreachable DST cannot say whether it was this one
                    self._went_here(transfer_id, remaining, destination, moved=bool(report["transfers"]))
                item = self.advance(transfer_id, resumed=True)
                # "already transferred" counts the jobs asked for, not every job that transfer carried.
                item["asked"] = list(asked.get(transfer_id) or item["jobs"])
                report["transfers"].append(item)
        if not selection["jobs"]:
            return report
        if destination is not None and selection["source"]["workspace_id"] == destination["workspace_id"]:
            raise TransferError(f"{self.src.label} and {self.dst.label} are the same workspace; nothing to transfer")
        if destination is not None:
            report["environment"] = environment(selection["jobs"], destination["settings"], self.dst.label)
            unresolved = [entry["message"] for entry in report["environment"] if entry["status"] == "warning"]
            if unresolved and strict:
                more = f" (and {len(unresolved) - 1} more)" if len(unresolved) > 1 else ""
                raise TransferError(f"{unresolved[0]}{more}; --strict-environment refuses: nothing moved")
            for message in unresolved:
                self.warn(message)
        checked = self._call_destination("probe", {"jobs": selection["jobs"], "runners": selection["runners"]})
        if checked["problems"]:
            raise TransferError(f"{checked['problems'][0]}; nothing moved")
        transfer_id = f"t-{self.ids.new_hex(12)}"
        target = {"label": self.dst.label, "workspace_id": checked["workspace_id"], "root": checked["root"]}
        self._plan(transfer_id, selection["jobs"], target)
        report["transfers"].append(self.advance(transfer_id, resumed=False))
        return report

    def _probe(self) -> tuple[dict[str, Any] | None, Unreachable | None]:
        """The destination's identity and settings, or (unreachable) ``None`` and the connection's error."""
        try:
            return self.dst.call(DESTINATION, "probe", {}), None
        except Unreachable as error:
            return None, error

    def _went_here(self, transfer_id: str, selectors: Sequence[str], destination: Mapping[str, Any], *,
                   moved: bool = False) -> None:
        """Refuse when the finished transfer that took a named job away went to another workspace than DST.

        Only then is "already transferred" true; a job that left for elsewhere is not here to move.
        """
        state = self._call_source("state", {"transfer_id": transfer_id}, moved=moved)
        target = state["header"].get("destination") or {}
        if target.get("workspace_id") == destination["workspace_id"]:
            return
        keys = [key for key in state.get("jobs") or () if any(_names(job, key) for job in selectors)]
        where = target.get("label") or target.get("root") or "another workspace"
        raise TransferError(
            f"job {', '.join(keys) or '(named)'} is not in {self.src.label}: transfer {transfer_id} took it to "
            f"{where}, not to {self.dst.label}; {_nothing(moved)} (to move it on: 'httk workflow transfer {where} "
            f"{self.dst.label} --job {keys[0] if keys else 'JOB'}')")

    def _plan(self, transfer_id: str, jobs: Sequence[Mapping[str, Any]], target: Mapping[str, Any]) -> None:
        """Record the plan at the source; a source lost meanwhile is a refusal that says what it may have left.

        The plan may have been recorded there before the answer was lost: it detached
        nothing, but it is an unfinished transfer, and the next transfer from SRC to DST
        (or ``--resume``) finds it among the pending ones and finishes it, moving its jobs.
        """
        try:
            self.src.call(SOURCE, "plan", {"transfer_id": transfer_id, "jobs": list(jobs), "destination": dict(target)})
        except Unreachable as error:
            raise TransferError(
                f"{error}; no job moved, but transfer {transfer_id} ({len(jobs)} job{'' if len(jobs) == 1 else 's'}) "
                f"may be recorded at {self.src.label} as planned: '{resume_command(self.src.label, self.dst.label)}' "
                "(or the next transfer between them) finishes it and moves them") from None

    def _call_source(self, op: str, request: Mapping[str, Any], *, moved: bool = False) -> Any:
        """A source call made before any plan was sent: an unreachable source is a refusal, nothing (more) moved.

        ``moved``: this command has already finished transfers (resumed ones), which stay done.
        """
        try:
            return self.src.call(SOURCE, op, request)
        except Unreachable as error:
            raise TransferError(f"{error}; {_nothing(moved)}") from None

    def _call_destination(self, op: str, request: Mapping[str, Any]) -> Any:
        try:
            return self.dst.call(DESTINATION, op, request)
        except Unreachable as error:
            raise TransferError(f"{error}; nothing moved") from None

    # -- one transfer ----------------------------------------------------------------------------
    def advance(self, transfer_id: str, *, resumed: bool) -> dict[str, Any]:
        """Run ``transfer_id`` to its end (retired or rolled back), or hold it when a side is out of reach."""
        refusal: str | None = None
        for passes in range(_MAX_PASSES):
            try:
                state = self.src.call(SOURCE, "state", {"transfer_id": transfer_id})
            except Unreachable as error:
                return self._held(transfer_id, None, str(error), resumed)
            if state["final"]:
                # Final before any step of ours: an earlier run did all of it, and nothing moved now.
                return self._outcome(state, refusal, resumed and passes > 0, already=passes == 0)
            step = state["step"]
            try:
                try:
                    self._step(transfer_id, step, state)
                except TransferError as error:
                    refusal = refusal or str(error)
                    self._after_refusal(transfer_id, step, refusal)
                except Unreachable as error:
                    if error.role == SOURCE or step not in NOT_SENT:
                        return self._held(transfer_id, step, str(error), resumed)
                    refusal = refusal or f"{error}; transfer {transfer_id} is rolled back: nothing moved"
                    self._after_refusal(transfer_id, step, refusal)
            except Unreachable as error:  # lost while deciding the rollback: the next run decides it
                return self._held(transfer_id, step, str(error), resumed)
        raise TransferError(f"transfer {transfer_id} did not settle after {_MAX_PASSES} steps; see its ledger")

    def _step(self, transfer_id: str, step: str, state: Mapping[str, Any]) -> None:
        request = {"transfer_id": transfer_id}
        jobs = len(state.get("jobs") or ())
        if step == "planned":
            self.progress({"phase": "detach", "transfer": transfer_id, "jobs": jobs})
            self.src.call(SOURCE, "detach", request)
        elif step == "detached":
            self.progress({"phase": "bundle", "transfer": transfer_id, "jobs": jobs})
            self.src.call(SOURCE, "bundle", request)
        elif step == "bundled":
            self._send(transfer_id, jobs)
            self.src.call(SOURCE, "mark_sent", request)
        elif step == "sent":
            self.progress({"phase": "import", "transfer": transfer_id, "jobs": jobs})
            self._import(transfer_id, str(state["manifest_sha256"]))
        elif step == "acknowledged":
            self.progress({"phase": "retire", "transfer": transfer_id, "jobs": jobs})
            self.src.call(SOURCE, "retire", request)
        elif step == ROLLED_BACK:
            self.progress({"phase": "rollback", "transfer": transfer_id, "jobs": jobs})
            self.src.call(SOURCE, "rollback", request)
        else:
            raise TransferError(f"transfer {transfer_id}: the source ledger is at the unknown step {step!r}")

    def _after_refusal(self, transfer_id: str, step: str, reason: str) -> None:
        """Decide the rollback a refusal at ``step`` allows; a refusal with nothing left to decide is raised."""
        request = {"transfer_id": transfer_id, "reason": reason}
        if step in NOT_SENT:
            decided = self.src.call(SOURCE, "decide_rollback", request)
            if decided["step"] == ROLLED_BACK:
                self._abort_destination(transfer_id, reason)
            return
        if step == "sent":
            state = self.dst.call(DESTINATION, "state", {"transfer_id": transfer_id})
            if state.get("decision") is None:
                state = self.dst.call(DESTINATION, "abort", request)
            if state.get("decision") == ROLLED_BACK:
                self.src.call(SOURCE, "destination_rolled_back", {"transfer_id": transfer_id,
                                                                   "reason": state.get("reason") or reason})
            return
        raise TransferError(f"transfer {transfer_id} stopped at step {step}: {reason}; run the same transfer again "
                            "to finish it")

    def _abort_destination(self, transfer_id: str, reason: str) -> None:
        """Clear what reached the destination of a transfer that was never sent (best effort: it cannot commit)."""
        try:
            self.dst.call(DESTINATION, "abort", {"transfer_id": transfer_id, "reason": reason})
        except (Unreachable, TransferError):
            pass

    def _send(self, transfer_id: str, jobs: int) -> None:
        """Copy the bundle's files the destination lacks, then let it verify them (``received``)."""
        files = self.src.call(SOURCE, "bundle_files", {"transfer_id": transfer_id})
        manifest = bundles.parse_manifest(files["manifest"].encode("utf-8"), f"transfer {transfer_id}")
        prepared = self.dst.call(DESTINATION, "prepare", {"transfer_id": transfer_id, "manifest": files["manifest"],
                                                          "source": manifest["source"]})
        complete = set(prepared["complete"])
        entries = [entry for entry in manifest["files"] if entry["type"] == "file"]
        total = sum(int(entry["size"]) for entry in entries)
        done = sum(int(entry["size"]) for entry in entries if entry["path"] in complete)
        self.progress({"phase": "send", "transfer": transfer_id, "jobs": jobs, "bytes": done, "total": total})
        for entry in entries:
            if entry["path"] in complete:
                continue
            self._copy(f"{files['path']}/{entry['path']}", f"{prepared['path']}/{entry['path']}")
            done += int(entry["size"])
            self.progress({"phase": "send", "transfer": transfer_id, "jobs": jobs, "bytes": done, "total": total})
        self.dst.call(DESTINATION, "receive", {"transfer_id": transfer_id,
                                               "manifest_sha256": files["manifest_sha256"]})

    def _copy(self, source: str, target: str) -> None:
        """One file from the source's machine to the destination's."""
        src, dst = self.src, self.dst
        try:
            if isinstance(src, LocalEndpoint) and isinstance(dst, LocalEndpoint):
                if src.fs.lstat(target) is not None:
                    src.fs.remove(target)
                src.fs.copy_tree(source, target, durable=False)
            elif isinstance(src, LocalEndpoint) and isinstance(dst, RemoteEndpoint):
                self._put(dst, source, target)
            elif isinstance(src, RemoteEndpoint) and isinstance(dst, LocalEndpoint):
                if dst.fs.lstat(target) is not None:
                    dst.fs.remove(target)
                self._get(src, source, target)
            elif isinstance(src, RemoteEndpoint) and isinstance(dst, RemoteEndpoint):
                if self.scratch is None or self.local_fs is None:
                    raise TransferError("a transfer between two remotes needs a local scratch directory")
                relay = f"{self.scratch}/{self.ids.new_hex(12)}"
                try:
                    self._get(src, source, relay)
                    self._put(dst, relay, target)
                finally:
                    if self.local_fs.lstat(relay) is not None:
                        self.local_fs.remove(relay)
            else:
                raise TransferError("unknown kind of endpoint")
        except OSError as error:
            raise TransferError(refusal_text(error, dst.label)) from None

    @staticmethod
    def _put(dst: RemoteEndpoint, source: str, target: str) -> None:
        try:
            dst.transport.put(source, target)
        except TransportError as error:
            raise Unreachable(DESTINATION, f"remote {dst.remote}: {error}") from None

    @staticmethod
    def _get(src: RemoteEndpoint, source: str, target: str) -> None:
        try:
            src.transport.get(source, target)
        except TransportError as error:
            raise Unreachable(SOURCE, f"remote {src.remote}: {error}") from None

    def _import(self, transfer_id: str, manifest_sha256: str) -> None:
        state = self.dst.call(DESTINATION, "state", {"transfer_id": transfer_id})
        if state.get("decision") == ROLLED_BACK:
            fallback = f"transfer {transfer_id} was rolled back at the destination"
            raise TransferError(str(state.get("reason") or fallback))
        ack = self.dst.call(DESTINATION, "import", {"transfer_id": transfer_id, "manifest_sha256": manifest_sha256})
        self.src.call(SOURCE, "acknowledge", {"transfer_id": transfer_id, "ack": ack})

    # -- outcomes --------------------------------------------------------------------------------
    def _outcome(
        self, state: Mapping[str, Any], refusal: str | None, resumed: bool, *, already: bool = False
    ) -> dict[str, Any]:
        """How one transfer ended; ``already``: it had ended before this command (this one moved nothing)."""
        retired = state["step"] == "retired"
        return {
            "transfer_id": state["transfer_id"],
            "state": "retired" if retired else ROLLED_BACK,
            "jobs": list(state.get("jobs") or ()),
            "bytes": state.get("bytes") or 0,
            "reason": None if retired else (refusal or state.get("reason")),
            "resumed": resumed,
            "already": already,
        }

    def _held(self, transfer_id: str, step: str | None, message: str, resumed: bool) -> dict[str, Any]:
        where = f" at step {step}" if step else ""
        return {
            "transfer_id": transfer_id,
            "state": "held",
            "jobs": [],
            "bytes": 0,
            "reason": (f"{message}; transfer {transfer_id} is held{where} (its jobs are safe at one end): run the "
                       f"same command again, or 'httk workflow transfer {self.src.label} {self.dst.label} --resume', "
                       "to finish it"),
            "resumed": resumed,
            "already": False,
        }
