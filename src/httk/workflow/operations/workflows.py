"""The workflow catalog and ``job new``: a named workflow and its inputs become a submitted job.

A *workflow* is a runner directory holding a ``workflow.json``
(``httk-workflow-workflow`` version 1) beside its entry point (``run``,
``run.py`` or ``run.sh``, as for every runner directory). The document names the
workflow, declares its inputs (each with a ``type``; ``file`` inputs are staged
into the payload at their ``destination``), the settings it reads and the job
defaults (``job``: claim, workdir, data mode and retry budgets of job.json);
every other member belongs to the runner.

Two places provide workflows, and a workspace one shadows a shipped one of the
same name:

- *shipped*: the directories below the package's ``workflows/`` (the caller
  passes that path: services do no I/O of their own). ``job new`` publishes
  the directory — its regular files, never ``__pycache__`` — into the workspace
  runner store under ``shipped/<name>`` (content addressed: unchanged bytes are
  a no-op, a newer package replaces the name while old jobs keep their digest);
- *workspace*: a runner directory published under ``workflows/<name>``, e.g.
  ``httk workflow runner publish ./my-flow --workspace WS --name workflows/my-flow``.

Either way the job pins the stored runner by digest, so a transferred job
carries it. Steps are never declared: :func:`describe` asks the runner itself
(``HTTK_WORKFLOW_DESCRIBE=1``). A refusal of :func:`new_job` writes nothing.
Spec: 000 "Running on a remote" (``job new``); 001 "VASP files".
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from .. import codec
from ..attempt_records import RunnerDescription
from ..domain.model import JobKey, ValidationError, check_placement, check_tag
from ..engine.attempts import LaunchSettings, command_for
from ..ports import Filesystem, ProcessControl
from ..protocol import JOB_FILE, PRIVATE_DIR, JobSpec
from ..store.digests import fs_digest
from ..store.policy import setting_env_name
from ..store.runners import check_runner_name, object_path, publish_runner, stage_tree
from ..store.workspaces import WorkspaceHandle
from .submission import Submitted, check_path_lengths, job_paths, submit

WORKFLOW_FORMAT = "httk-workflow-workflow"
WORKFLOW_FILE = "workflow.json"
SHIPPED_PREFIX = "shipped"
WORKSPACE_PREFIX = "workflows"
ENTRY_POINTS = ("run", "run.py", "run.sh")
INPUT_TYPES = ("file", "string", "number", "integer", "boolean", "object", "array", "any")
#: The members of job.json a workflow document may set in its ``job`` object.
JOB_MEMBERS = (
    "pool", "capabilities", "priority", "executor", "workdir_mode", "data_mode",
    "maximum_attempts_per_activation", "maximum_total_attempts", "maximum_activations", "retry_on", "resources",
)
_INPUT_KEYS = {"type", "required", "default", "destination", "description"}
#: The members the catalog reads; every other member of a workflow document belongs to its runner.
_DOCUMENT_KEYS = {"format", "format_version", "name", "summary", "initial_step", "inputs", "settings", "job"}
_INPUT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")
_NO_DEFAULT: Any = object()
DESCRIBE_TIMEOUT = 60.0


class WorkflowError(ValueError):
    """A workflow or ``job new`` request that is refused; nothing was written."""


@attrs.frozen
class InputSpec:
    """One declared input: its type, whether it is required, its default and (files) its payload destination."""

    name: str
    type: str
    required: bool = False
    default: Any = _NO_DEFAULT
    destination: str | None = None
    description: str = ""

    @property
    def has_default(self) -> bool:
        return self.default is not _NO_DEFAULT

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "required": self.required,
                               "description": self.description}
        if self.has_default:
            out["default"] = self.default
        if self.destination is not None:
            out["destination"] = self.destination
        return out


@attrs.frozen
class Workflow:
    """One catalog entry. ``problem`` is set (and everything else may be empty) when its document is unusable.

    ``location`` is the runner directory (a shipped package directory or the
    workspace store object); ``reference`` the job.json runner of a workspace
    workflow (a shipped one gets its reference when :func:`new_job` publishes it).
    """

    name: str
    source: str
    location: str
    summary: str = ""
    initial_step: str = ""
    inputs: tuple[InputSpec, ...] = ()
    settings: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)
    job: Mapping[str, Any] = attrs.field(factory=dict)
    reference: Mapping[str, Any] | None = None
    problem: str | None = None
    shadows_shipped: bool = False
    #: The runner's own members of the document (the VASP runner's default ``incar``), verbatim.
    options: Mapping[str, Any] = attrs.field(factory=dict)

    def input(self, name: str) -> InputSpec | None:
        return next((spec for spec in self.inputs if spec.name == name), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "source": self.source, "location": self.location, "summary": self.summary,
            "initial_step": self.initial_step, "inputs": [spec.to_json() for spec in self.inputs],
            "settings": {name: dict(value) for name, value in self.settings.items()}, "job": dict(self.job),
            "runner": dict(self.reference) if self.reference is not None else None, "problem": self.problem,
            "shadows_shipped": self.shadows_shipped, "options": dict(self.options),
        }


# -- the workflow document -----------------------------------------------------------------------------
def _problem(where: str, message: str) -> WorkflowError:
    return WorkflowError(f"{where}: {message}")


def _parse_input(name: str, value: Any, where: str) -> InputSpec:
    if not _INPUT_NAME.match(name):
        raise _problem(where, f"input name {name!r} must match [A-Za-z][A-Za-z0-9_.-]*")
    if not isinstance(value, dict):
        raise _problem(where, f"input {name!r} must be an object with a type")
    unknown = sorted(set(value) - _INPUT_KEYS)
    if unknown:
        raise _problem(where, f"input {name!r} has unknown members {', '.join(unknown)}; known: "
                       f"{', '.join(sorted(_INPUT_KEYS))}")
    kind = value.get("type")
    if kind not in INPUT_TYPES:
        raise _problem(where, f"input {name!r} has type {kind!r}; use one of {', '.join(INPUT_TYPES)}")
    required = value.get("required", False)
    if not isinstance(required, bool):
        raise _problem(where, f"input {name!r}: required must be true or false")
    default = value.get("default", _NO_DEFAULT)
    if default is not _NO_DEFAULT and (kind == "file" or required):
        raise _problem(where, f"input {name!r}: a {'file' if kind == 'file' else 'required'} input has no default")
    if default is not _NO_DEFAULT and default is not None:
        mismatch = _type_mismatch(kind, default)
        if mismatch:
            raise _problem(where, f"input {name!r}: its default is {mismatch}, not of type {kind}")
    destination = value.get("destination")
    if kind == "file":
        destination = _destination(name if destination is None else destination, name, where)
    elif destination is not None:
        raise _problem(where, f"input {name!r}: only a file input has a destination")
    description = value.get("description", "")
    if not isinstance(description, str):
        raise _problem(where, f"input {name!r}: description must be a string")
    return InputSpec(name, kind, required, default, destination, description)


def _destination(value: Any, name: str, where: str) -> str:
    try:
        path = check_runner_name(value) if isinstance(value, str) else None
    except ValueError:
        path = None
    if path is None or path.split("/")[0] in (JOB_FILE, PRIVATE_DIR):
        raise _problem(where, f"input {name!r}: destination {value!r} must be a relative path inside the payload, "
                       f"other than {JOB_FILE} and {PRIVATE_DIR}/")
    return path


def parse_workflow(data: bytes, where: str, *, name: str, source: str, location: str) -> Workflow:
    """The catalog entry a ``workflow.json`` describes; :class:`WorkflowError` names ``where`` and the problem."""
    try:
        document = codec.decode_object(data, where)
    except codec.DocumentError as error:
        raise WorkflowError(str(error)) from None
    if document.get("format") != WORKFLOW_FORMAT or document.get("format_version") != 1:
        raise _problem(where, f"not an {WORKFLOW_FORMAT} version 1 document (format, format_version)")
    declared = document.get("name", name)
    if declared != name:
        raise _problem(where, f"names the workflow {declared!r}, but it is published as {name!r}")
    initial = document.get("initial_step")
    if not isinstance(initial, str) or not initial:
        raise _problem(where, "initial_step must name the step a new job starts at")
    raw_inputs = document.get("inputs", {})
    if not isinstance(raw_inputs, dict):
        raise _problem(where, "inputs must be an object of input declarations")
    inputs = tuple(_parse_input(key, value, where) for key, value in raw_inputs.items())
    destinations = [spec.destination for spec in inputs if spec.destination is not None]
    if len(set(destinations)) != len(destinations):
        raise _problem(where, "two file inputs share one destination")
    settings = document.get("settings", {})
    if not isinstance(settings, dict) or not all(isinstance(v, dict) for v in settings.values()):
        raise _problem(where, "settings must be an object of {required, description} objects")
    job = document.get("job", {})
    unknown = sorted(set(job) - set(JOB_MEMBERS)) if isinstance(job, dict) else ["(not an object)"]
    if unknown:
        raise _problem(where, f"job has unknown members {', '.join(unknown)}; known: {', '.join(JOB_MEMBERS)}")
    try:
        JobSpec(name=name, workflow=name, runner_path="run", initial_step=initial, **job).to_document()
    except (TypeError, ValueError, codec.DocumentError) as error:
        raise _problem(where, f"job or initial_step is not valid in job.json: {error}") from None
    summary = document.get("summary", "")
    return Workflow(
        name=name, source=source, location=location, summary=summary if isinstance(summary, str) else "",
        initial_step=initial, inputs=inputs, settings=settings, job=job,
        options={key: value for key, value in document.items() if key not in _DOCUMENT_KEYS},
    )


# -- the catalog ---------------------------------------------------------------------------------------
def _check_name(name: str) -> str | None:
    try:
        check_tag(name, "workflow name")
    except ValidationError as error:
        return str(error)
    return None


class Catalog:
    """The workflows a workspace can start: its own (``workflows/<name>`` in its runner store), then the shipped."""

    def __init__(self, handle: WorkspaceHandle, shipped_root: str) -> None:
        self._handle = handle
        self._shipped_root = shipped_root

    def shipped(self) -> list[Workflow]:
        fs, found = self._handle.fs, []
        for entry in sorted(fs.scandir(self._shipped_root), key=lambda item: item.name):
            document = f"{entry.path}/{WORKFLOW_FILE}"
            if not entry.is_dir or entry.name.startswith(("_", ".")) or not fs.exists(document):
                continue
            try:
                name = codec.decode_object(fs.read_bytes(document), document).get("name")
            except (OSError, codec.DocumentError) as error:
                found.append(Workflow(entry.name, "shipped", entry.path, problem=str(error)))
                continue
            found.append(self._entry(str(name), "shipped", entry.path, document))
        return found

    def registered(self) -> list[Workflow]:
        fs, layout, found = self._handle.fs, self._handle.layout, []
        names = f"{layout.runners}/names/{WORKSPACE_PREFIX}"
        for entry in sorted(fs.scandir(names), key=lambda item: item.name):
            if entry.is_dir or not entry.name.endswith(".json"):
                continue
            name = entry.name[: -len(".json")]
            try:
                record = codec.decode_object(fs.read_bytes(entry.path), entry.path)
            except (OSError, codec.DocumentError) as error:
                found.append(Workflow(name, "workspace", entry.path, problem=str(error)))
                continue
            sha256 = record.get("sha256")
            store_name = f"{WORKSPACE_PREFIX}/{name}"
            if not isinstance(sha256, str) or "/" in sha256 or sha256 in ("", ".", ".."):
                found.append(Workflow(name, "workspace", entry.path, problem=f"{entry.path}: no valid sha256"))
                continue
            location = object_path(layout, sha256, store_name)
            if record.get("kind") == "tree":
                workflow = self._entry(name, "workspace", location, f"{location}/{WORKFLOW_FILE}")
            else:
                workflow = Workflow(name, "workspace", location, problem=f"runner {store_name!r} is a single file; "
                                    f"publish a directory holding {WORKFLOW_FILE} and its run.py")
            reference = {"path": store_name, "sha256": sha256, "source": "workspace"}
            found.append(attrs.evolve(workflow, reference=reference))
        return found

    def _entry(self, name: str, source: str, location: str, document: str) -> Workflow:
        bad = _check_name(name)
        if bad is not None:
            return Workflow(name, source, location, problem=f"{document}: {bad}")
        try:
            data = self._handle.fs.read_bytes(document)
        except FileNotFoundError:
            return Workflow(name, source, location, problem=f"{document} is missing; a workflow directory holds "
                            f"{WORKFLOW_FILE} beside its run.py")
        except OSError as error:
            return Workflow(name, source, location, problem=f"{document}: {error.strerror or error}")
        try:
            workflow = parse_workflow(data, document, name=name, source=source, location=location)
        except WorkflowError as error:
            return Workflow(name, source, location, problem=str(error))
        if _entry_point(self._handle.fs, location) is None:
            return attrs.evolve(workflow, problem=f"{location} has no {', '.join(ENTRY_POINTS)}")
        return workflow

    def entries(self) -> list[Workflow]:
        """Every workflow by name; a workspace one replaces (and says it shadows) a shipped one of its name."""
        by_name = {workflow.name: workflow for workflow in self.shipped()}
        for workflow in self.registered():
            shadows = workflow.name in by_name
            by_name[workflow.name] = attrs.evolve(workflow, shadows_shipped=shadows)
        return [by_name[name] for name in sorted(by_name)]

    def get(self, name: str) -> Workflow:
        """The usable workflow ``name``; refused (naming the known ones) when it is unknown or broken."""
        entries = {workflow.name: workflow for workflow in self.entries()}
        workflow = entries.get(name)
        if workflow is None:
            known = ", ".join(sorted(entries)) or "(none)"
            raise WorkflowError(f"unknown workflow {name!r}; known: {known} (see 'httk workflow workflow list')")
        if workflow.problem is not None:
            raise WorkflowError(f"workflow {name!r} cannot be used: {workflow.problem}")
        return workflow


def _entry_point(fs: Filesystem, directory: str) -> str | None:
    return next((f"{directory}/{name}" for name in ENTRY_POINTS if fs.exists(f"{directory}/{name}")), None)


# -- describing: ask the runner ------------------------------------------------------------------------
def describe(
    handle: WorkspaceHandle, workflow: Workflow, process: ProcessControl, launch: LaunchSettings,
    *, timeout: float = DESCRIBE_TIMEOUT,
) -> RunnerDescription:
    """The runner's own ``httk-workflow-runner-description`` (its steps), run with ``HTTK_WORKFLOW_DESCRIBE=1``.

    The runner starts in a scratch directory below the workspace's ``tmp/``,
    which is removed afterwards; a runner that exits non-zero, prints no
    description or outlives ``timeout`` is refused naming what it did.
    """
    fs = handle.fs
    entry = _entry_point(fs, workflow.location)
    if entry is None:
        raise WorkflowError(f"workflow {workflow.name!r}: {workflow.location} has no {', '.join(ENTRY_POINTS)}")
    scratch = f"{handle.layout.tmp}/describe-{handle.ports.ids.new_hex(12)}"
    env = {key: value for key, value in launch.base_env.items() if not key.startswith("HTTK_WORKFLOW_")}
    env.update({"HTTK_WORKFLOW_DESCRIBE": "1", **launch.library_env()})
    fs.makedirs(scratch)
    try:
        child = process.launch(command_for(entry, launch.python), cwd=scratch, env=env,
                               stdout_path=f"{scratch}/stdout", stderr_path=f"{scratch}/stderr")
        try:
            child.release()
            status = child.wait(timeout)
            if status is None:
                process.kill_group(child.identity.pgid)
                child.wait(5.0)
                raise WorkflowError(f"workflow {workflow.name!r}: {entry} --describe did not finish in {timeout:g} s")
        finally:
            child.close()
        stderr = fs.read_bytes(f"{scratch}/stderr").decode("utf-8", "replace").strip().splitlines()
        if status != 0:
            tail = f": {stderr[-1]}" if stderr else ""
            raise WorkflowError(f"workflow {workflow.name!r}: {entry} --describe exited with status {status}{tail}")
        document = codec.decode_object(fs.read_bytes(f"{scratch}/stdout"), f"{entry} --describe")
    except codec.DocumentError as error:
        raise WorkflowError(f"workflow {workflow.name!r}: {error}") from None
    finally:
        fs.rmtree(scratch)
    try:
        return codec.structure(document, RunnerDescription, f"{entry} --describe")
    except codec.DocumentError as error:
        raise WorkflowError(f"workflow {workflow.name!r}: {entry} --describe printed no runner description "
                            f"({error})") from None


# -- job new -------------------------------------------------------------------------------------------
@attrs.frozen
class NewJob:
    """What :func:`new_job` created: the submission, the runner it pins, the inputs it recorded, warnings."""

    submitted: Submitted
    workflow: Workflow
    runner: Mapping[str, Any]
    inputs: Mapping[str, Any]
    staged: Mapping[str, str]
    warnings: tuple[str, ...] = ()


def _type_mismatch(kind: str, value: Any) -> str | None:
    """``None`` when ``value`` is a JSON value of ``kind``, else what it is instead (``the string "abc"``)."""
    checks = {
        "string": lambda v: isinstance(v, str),
        "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }
    check = checks.get(kind)
    if check is None or check(value):
        return None
    return f"the {codec.type_name(value)} {codec.dumps(value)}"


def _value(spec: InputSpec, text: str) -> Any:
    """An input value from its command-line text: JSON when it parses, else the text (a string input: the text)."""
    value = codec.json_or_text(text)
    if spec.type == "string" and not isinstance(value, str):
        value = text
    mismatch = _type_mismatch(spec.type, value)
    if mismatch:
        raise WorkflowError(f"--input {spec.name}: expected a value of type {spec.type}, got {mismatch}")
    return value


def resolve_inputs(
    handle: WorkspaceHandle, workflow: Workflow, assignments: Sequence[str], cwd: str
) -> tuple[dict[str, Any], dict[str, str]]:
    """``(inputs, staged)``: job.json inputs, and payload destination -> source file; reads only."""
    fs = handle.fs
    values: dict[str, Any] = {}
    staged: dict[str, str] = {}
    names = ", ".join(spec.name for spec in workflow.inputs) or "(none)"
    for assignment in assignments:
        key, equals, text = assignment.partition("=")
        if not equals or not key:
            raise WorkflowError(f"--input {assignment!r}: expected KEY=VALUE, e.g. --input structure=POSCAR")
        spec = workflow.input(key)
        if spec is None:
            raise WorkflowError(f"workflow {workflow.name!r} has no input {key!r}; its inputs: {names} "
                                f"(see 'httk workflow workflow show {workflow.name}')")
        if key in values:
            raise WorkflowError(f"--input {key} is given twice; give each input once")
        if spec.type != "file":
            values[key] = _value(spec, text)
            continue
        source = posixpath.normpath(text if text.startswith("/") else posixpath.join(cwd, text))
        info = fs.lstat(source)
        if not text or info is None or (info.is_symlink and not fs.exists(source)):
            if handle.remote:
                # Forwarded: the client sends every --input file it has, so this one is missing over there.
                raise WorkflowError(f"--input {key}: no file {text!r} on the machine that ran 'job new' (it sends "
                                    f"the --input files it finds there to remote {handle.remote}); give the path "
                                    "of an existing local file")
            raise WorkflowError(f"--input {key}: no file {text!r} (looked at {source}); give the path of an "
                                "existing file")
        if info.is_dir:
            raise WorkflowError(f"--input {key}: {source} is a directory; give the path of a file")
        values[key] = spec.destination
        staged[str(spec.destination)] = source
    missing = [spec for spec in workflow.inputs if spec.required and spec.name not in values]
    if missing:
        spec = missing[0]
        example = "FILE" if spec.type == "file" else "VALUE"
        what = f" ({spec.description})" if spec.description else ""
        raise WorkflowError(f"workflow {workflow.name!r} needs input {spec.name!r}{what}: add "
                            f"--input {spec.name}={example}")
    for spec in workflow.inputs:
        if spec.name not in values and spec.has_default:
            values[spec.name] = spec.default
    return values, staged


def _declaration(workflow: Workflow, staged: Mapping[str, str], digests: Mapping[str, str]) -> dict[str, Any]:
    files = {spec.name: spec for spec in workflow.inputs if spec.type == "file"}
    return {
        "name": workflow.name,
        "source": workflow.source,
        "inputs": {
            name: {"type": "file", "required": spec.required, "destination": spec.destination,
                   **({"from": staged[str(spec.destination)], "sha256": digests[str(spec.destination)]}
                      if spec.destination in staged else {})}
            for name, spec in files.items()
        },
    }


def missing_settings(handle: WorkspaceHandle, workflow: Workflow) -> list[str]:
    """A warning per required setting of ``workflow`` this workspace lacks (``job new`` prints them)."""
    present = handle.settings()
    out = []
    for name, declared in workflow.settings.items():
        if declared.get("required") and name not in present:
            out.append(
                f"workspace {handle.reference} has no setting {name}: set it before a manager runs this job "
                f"({setting_fix(handle, name)}), in the workspace it is transferred to, or as "
                f"{setting_env_name(name)} in the manager's environment"
            )
    return out


def setting_fix(handle: WorkspaceHandle, name: str) -> str:
    """The command that gives this workspace the setting ``name``, as the user types it here."""
    return f"'httk workflow workspace settings set {handle.reference} {name} VALUE'"


def declared_settings(fs: Filesystem, layout: Any, payload: str, spec: JobSpec) -> dict[str, dict[str, bool]]:
    """The settings a job's workflow declares, ``{name: {required, has_default}}``; none when it has no document.

    The declaration is the ``workflow.json`` beside the runner the job pins (a workspace
    runner's stored object, or a payload runner's directory); an installed runner has none.
    """
    if spec.runner_source == "workspace":
        tree = object_path(layout, spec.runner_sha256 or "", spec.runner_path)
    elif spec.runner_source == "payload":
        tree = posixpath.dirname(f"{payload}/{spec.runner_path}")
    else:
        return {}
    path = f"{tree}/{WORKFLOW_FILE}"
    try:
        declared = codec.decode_object(fs.read_document(path), path).get("settings")
    except (OSError, codec.DocumentError):
        return {}
    out: dict[str, dict[str, bool]] = {}
    for name, entry in (declared or {}).items() if isinstance(declared, dict) else ():
        entry = entry if isinstance(entry, dict) else {}
        out[str(name)] = {"required": bool(entry.get("required")), "has_default": "default" in entry}
    return out


def unresolved_settings(
    declared: Mapping[str, Mapping[str, bool]], *, inputs: Mapping[str, Any], settings: Mapping[str, Any],
    environ: Mapping[str, str] | None,
) -> list[str]:
    """The required declared settings nothing resolves, in the runner's layers.

    The layers are the job's inputs, an ``HTTK_*`` variable in ``environ`` (``None``:
    that layer is not this process's to judge, as for a transfer's destination), the
    workspace ``settings``, then the declared default. A runner that reads such a
    setting fails its attempt at once (``vasp_command_missing``).
    """
    return sorted(
        name for name, entry in declared.items()
        if entry.get("required") and not entry.get("has_default") and name not in inputs and name not in settings
        and (environ is None or setting_env_name(name) not in environ)
    )


def new_job(
    handle: WorkspaceHandle,
    catalog: Catalog,
    name: str,
    assignments: Sequence[str],
    *,
    cwd: str,
    tag: str | None = None,
    placement: str | None = None,
    origin: Callable[[str], str] | None = None,
) -> NewJob:
    """Create and submit a job of workflow ``name`` with ``assignments`` (``KEY=VALUE`` texts).

    ``origin`` names an input file's path in the job's ``workflow`` declaration (its
    ``from``) and in the result's ``staged``: a forwarded command names a file it was
    sent by the sender's path (default: the path itself).

    Everything a user can get wrong is checked before the first write: the
    workflow, every input (unknown, repeated, missing required, wrong type, a file
    that does not exist), the tag, the placement and the lengths of every path
    the job will use. The payload is then built below ``tmp/``, a shipped
    runner published, and the payload moved into place by :func:`submit`.
    ``placement`` defaults to the workflow name.
    """
    workflow = catalog.get(name)
    values, staged = resolve_inputs(handle, workflow, assignments, cwd)
    try:
        chosen = check_placement(placement if placement is not None else workflow.name)
        if tag is not None:
            check_tag(tag)
    except ValidationError as error:
        raise WorkflowError(str(error)) from None
    named = {destination: origin(source) for destination, source in staged.items()} if origin else staged
    fs, layout, durable = handle.fs, handle.layout, handle.durable
    key = JobKey(handle.ports.ids.new_id(), tag)
    scratch = f"{layout.tmp}/new-{key.job_id}"
    payload, runner_tree = f"{scratch}/payload", f"{scratch}/runner/{workflow.name}"
    try:
        reference = dict(workflow.reference) if workflow.reference is not None else None
        if reference is None:
            stage_tree(fs, workflow.location, runner_tree, durable=durable)
            reference = {"path": f"{SHIPPED_PREFIX}/{workflow.name}", "sha256": fs_digest(fs, runner_tree),
                         "source": "workspace"}
        digests: dict[str, str] = {}
        for destination, source in staged.items():
            data = fs.read_bytes(source)
            fs.write_atomic(f"{payload}/{destination}", data, durable=durable)
            digests[destination] = fs_digest(fs, f"{payload}/{destination}")
        spec = JobSpec(
            name=f"{workflow.name} {tag}" if tag else workflow.name,
            workflow=workflow.name,
            runner_source="workspace",
            runner_path=str(reference["path"]),
            runner_sha256=str(reference["sha256"]),
            initial_step=workflow.initial_step,
            inputs=values,
            declarations={"workflow": _declaration(workflow, named, digests)},
            tag=tag,
            **workflow.job,
        )
        fs.write_atomic(f"{payload}/{JOB_FILE}", spec.to_bytes(), durable=durable)
        check_path_lengths(job_paths(handle, payload, chosen, key, staging=None), chosen)
        if workflow.reference is None:
            publish_runner(fs, layout, runner_tree, str(reference["path"]), replace=True, durable=durable)
        submitted = submit(handle, payload, chosen, move=True, tag=tag, job_id=key.job_id)
    finally:
        fs.rmtree(scratch)
    warnings = tuple(missing_settings(handle, workflow))
    return NewJob(submitted, workflow, reference, values, named, warnings)
