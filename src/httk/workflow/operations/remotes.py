"""The remote registry: named remotes made from templates, and how ``REMOTE:PATH`` is recognized.

A remote is one document ``<config>/httk-workflow/remotes/<name>.json``
(``{"format": "httk-workflow-remote", "format_version": 1, "name", "template",
"settings"}``) holding only the settings the operator chose. Its template is not
a file: every (transport × batch system) the :class:`AdapterCatalog` knows is one,
named ``TRANSPORT-BATCH`` (``ssh-slurm``, ``local-pbs``; ``local`` alone when
both are ``local``), with the settings every remote has and the ones its
transport declares, each with its type and default. A plug-in's batch system
therefore gets its templates by being installed. A setting is validated when it
is written and again when it is read, so a remote never reaches a transport with
a key or value its template does not allow.

``split_reference`` decides from the text alone whether a workspace argument is
``REMOTE:PATH`` (it lives in :mod:`.remote_reference`, re-exported here, so that
every local command can ask without importing this module). Everything here goes
through the Filesystem port and the catalog.
Spec: 000 "Running on a remote", "Initialize a workspace".
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from .. import codec
from ..ports import BatchSystem, Filesystem, RemoteTransport

# Re-exported: they are this registry's names too (``from .remotes import RemoteError``).
from .remote_reference import RemoteError as RemoteError
from .remote_reference import RemoteReference as RemoteReference
from .remote_reference import split_reference as split_reference

REMOTE_FORMAT = "httk-workflow-remote"
TEMPLATE_FORMAT = "httk-workflow-remote-template"
TYPES = ("string", "integer", "number", "boolean")
_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,47}")
_SPEC_MEMBERS = {"type", "default", "required", "description", "minimum", "maximum"}
_TRUE = {"yes", "true", "on", "1"}
_FALSE = {"no", "false", "off", "0"}


@attrs.frozen
class SettingSpec:
    """One setting a template allows."""

    name: str
    type: str
    default: Any = None
    required: bool = False
    description: str = ""
    minimum: float | None = None
    maximum: float | None = None

    def parse(self, text: str) -> Any:
        """A command-line value (``key=value``) as this setting's type."""
        try:
            if self.type == "integer":
                value: Any = int(text)
            elif self.type == "number":
                value = float(text)
            elif self.type == "boolean":
                lowered = text.strip().lower()
                if lowered not in _TRUE | _FALSE:
                    raise ValueError(text)
                value = lowered in _TRUE
            else:
                value = text
        except ValueError:
            raise RemoteError(f"setting {self.name}: {text!r} is not {_a(self.type)}") from None
        return self.check(value)

    def check(self, value: Any) -> Any:
        """``value`` when it has this setting's type and range; a one-line error otherwise."""
        kinds = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}[self.type]
        if not isinstance(value, kinds) or (isinstance(value, bool) and self.type != "boolean"):
            raise RemoteError(f"setting {self.name}: expected {_a(self.type)}, got {codec.type_name(value)}")
        if isinstance(value, float) and not math.isfinite(value):
            raise RemoteError(f"setting {self.name}: {value} is not a finite number")
        if self.minimum is not None and value < self.minimum:
            raise RemoteError(f"setting {self.name}: {value} is below the minimum {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise RemoteError(f"setting {self.name}: {value} is above the maximum {self.maximum:g}")
        if self.type == "string" and ("\n" in value or "\0" in value):
            raise RemoteError(f"setting {self.name}: a value must be one line")
        return value


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


class AdapterCatalog(Protocol):
    """The installed transports and batch systems (entry points), each class loaded when named.

    A batch-system class has ``name``, ``description``, ``commands`` and is built as
    ``cls(transport, timeout=...)``; a transport class has ``description``,
    ``settings`` (this module's setting schema) and ``from_settings(settings)``.
    """

    def batch_system_names(self) -> list[str]: ...

    def transport_names(self) -> list[str]: ...

    def batch_system(self, name: str) -> Any: ...

    def transport(self, name: str) -> Any: ...


def template_name(transport: str, batch: str) -> str:
    """``TRANSPORT-BATCH``, or the one word when both are the same (``local``)."""
    return transport if transport == batch else f"{transport}-{batch}"


def _did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` for the one of ``known`` that ``name`` is a typo of, else ''."""
    import difflib  # only for a refusal

    # 0.75, as for remote names: a typo ('hots', 'ssh-slrum'), not any name sharing letters.
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def common_settings(commands: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The settings of every template, as SettingSpec documents; ``commands`` are the batch system's."""
    return {
        "httk_command": {"type": "string", "default": "httk", "description": (
            "The httk command on the target, split like a shell would (default: httk on the PATH of a remote "
            "command there, else ~/.local/bin/httk as pipx installs it).")},
        "workspace_root": {"type": "string", "default": "", "description": (
            "The directory on the target below which a relative REMOTE:PATH lies: 'workspace init' puts "
            "it there, and every command finds a PATH with a / there (a bare name is the remote registry's; "
            "an absolute or ~ PATH is used as given; '' = the login directory); 'remote check' tests that "
            "it is writable.")},
        "check_connectivity": {"type": "boolean", "default": True, "description": (
            "Whether 'remote check' reaches the target and runs the adapter there (no: validate the "
            "configuration only).")},
        "command_timeout": {"type": "number", "default": 300, "minimum": 1,
                            "description": f"Seconds one remote command (httk, {', '.join(commands)}) may take."},
    }


@attrs.frozen
class Template:
    """A remote template: transport, batch system, allowed settings, the commands ``remote check`` looks for."""

    name: str
    description: str
    transport: str
    batch: str
    specs: Mapping[str, SettingSpec]
    commands: tuple[str, ...] = ()

    def defaults(self) -> dict[str, Any]:
        return {name: spec.default for name, spec in self.specs.items() if spec.default is not None}

    def spec(self, key: str) -> SettingSpec:
        try:
            return self.specs[key]
        except KeyError:
            raise RemoteError(
                f"template {self.name} has no setting {key!r}{_did_you_mean(key, self.specs)}; it knows "
                f"{', '.join(sorted(self.specs))}"
            ) from None


@attrs.frozen
class Remote:
    """A configured remote: its template and the settings chosen for it."""

    name: str
    template: Template
    chosen: Mapping[str, Any]

    @property
    def settings(self) -> dict[str, Any]:
        """Template defaults overlaid with the chosen settings."""
        return {**self.template.defaults(), **self.chosen}

    def workspace_path(self, path: str, *, creating: bool = False) -> str:
        """The workspace ``REMOTE:PATH`` names there: a relative path below ``workspace_root`` when that is set.

        A bare name (no ``/``) is the remote registry's to resolve, except where the
        workspace is being made (``workspace init``, ``creating``), which registers that
        name for it; an absolute or ``~`` path, or any with ``workspace_root`` '', is
        as given (the remote's httk reads ``~`` and a relative path against the login
        directory). So ``workspace init kappa:proj/runs`` and ``run kappa:proj/runs``
        name one directory.
        """
        root = str(self.settings.get("workspace_root") or "")
        if root.startswith("~") and root != "~" and not root.startswith("~/"):
            # Only the remote's own home is expanded there (by its httk and the upload script alike).
            raise RemoteError(f"remote {self.name}: workspace_root {root!r}: only ~ and ~/ are expanded there; "
                              f"give the absolute path ('httk workflow remote configure {self.name} --set "
                              "workspace_root=/path/on/the/remote')")
        if not root or not path or path.startswith(("/", "~")) or path in (".", ".."):
            return path
        if not creating and "/" not in path:
            return path
        return posixpath.join(root, path)

    def missing(self) -> list[str]:
        """Required settings without a value."""
        settings = self.settings
        return [name for name, spec in sorted(self.template.specs.items()) if spec.required and name not in settings]

    def require_complete(self) -> None:
        missing = self.missing()
        if missing:
            sets = " ".join(f"--set {name}=..." for name in missing)
            raise RemoteError(f"remote {self.name}: {', '.join(missing)} not set; 'httk workflow remote configure "
                              f"{self.name} {sets}'")

    def to_document(self) -> dict[str, Any]:
        return {"format": REMOTE_FORMAT, "format_version": 1, "name": self.name, "template": self.template.name,
                "settings": dict(sorted(self.chosen.items()))}


class RemoteRegistry:
    """This user's remotes, one JSON document each, and the templates the catalog makes."""

    def __init__(self, fs: Filesystem, directory: str, catalog: AdapterCatalog, adapter_program: str) -> None:
        self.fs = fs
        self.directory = directory
        self.catalog = catalog
        #: The generic adapter program ``remote check`` runs on the target (top-level ``adapters/adapter``).
        self.adapter_program = adapter_program

    # -- templates ------------------------------------------------------------------------------
    def template_names(self) -> list[str]:
        transports, batches = self.catalog.transport_names(), self.catalog.batch_system_names()
        return sorted(template_name(transport, batch) for transport in transports for batch in batches)

    def template(self, name: str) -> Template:
        """The template ``name``: its transport and batch system loaded, its settings checked."""
        batches = self.catalog.batch_system_names()
        for transport in self.catalog.transport_names():
            for batch in batches:
                # Only the canonical spelling names a template: 'local-local' is 'local'.
                if template_name(transport, batch) == name:
                    return self._make(name, transport, batch)
        names = self.template_names()
        raise RemoteError(f"no remote template {name!r}{_did_you_mean(name, names)}; templates: {', '.join(names)}")

    def adapter_script(self, template: Template) -> str:
        """The text of the generic adapter program (sent to the target on stdin)."""
        return self.fs.read_bytes(self.adapter_program).decode("utf-8")

    def adapters(self, remote: Remote) -> tuple[RemoteTransport, BatchSystem]:
        """The transport and batch system of a configured remote (not connected yet: that happens on first use)."""
        remote.require_complete()
        settings = remote.settings
        transport = self.catalog.transport(remote.template.transport).from_settings(settings)
        batch_class = self.catalog.batch_system(remote.template.batch)
        return transport, batch_class(transport, timeout=float(settings.get("command_timeout", 300)))

    def _make(self, name: str, transport_name: str, batch_name: str) -> Template:
        transport = self.catalog.transport(transport_name)
        batch = self.catalog.batch_system(batch_name)
        commands = tuple(batch.commands)
        document = {
            "format": TEMPLATE_FORMAT, "format_version": 1, "name": name,
            "description": f"{transport.description}; {batch.description}.",
            "transport": transport_name, "batch": batch_name,
            "settings": {**common_settings(commands), **transport.settings},
        }
        return attrs.evolve(parse_template(document, f"template {name}"), commands=commands)

    # -- remotes --------------------------------------------------------------------------------
    def path(self, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise RemoteError(f"invalid remote name {name!r}: use 1-48 of [a-z0-9._-], starting with a letter or digit")
        return f"{self.directory}/{name}.json"

    def names(self) -> list[str]:
        # Only files named like a remote count: a stray file must not break the listing.
        stems = [entry.name[: -len(".json")] for entry in self.fs.scandir(self.directory)
                 if entry.is_file and entry.name.endswith(".json")]
        return sorted(stem for stem in stems if _NAME.fullmatch(stem))

    def get(self, name: str) -> Remote:
        path = self.path(name)
        try:
            data = self.fs.read_bytes(path)
        except FileNotFoundError:
            import difflib  # only for this refusal: start-up does not pay for it

            try:
                names = self.names()
            except OSError:  # the suggestion is best effort: an unreadable directory suggests nothing
                names = []
            # 0.75, not difflib's 0.6: a typo ('kapa', 'kappa2'), not any name sharing letters ('nowhere', 'here').
            close = difflib.get_close_matches(name, names, n=1, cutoff=0.75)
            listed = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            hint = f" (did you mean {close[0]!r}?)" if close else f" (configured: {listed})" if names else ""
            raise RemoteError(f"no remote named {name!r}{hint}; see 'httk workflow remote list' and 'remote add'") \
                from None
        return self._parse(codec.decode_object(data, path), path, name)

    def add(self, name: str, template_name: str) -> Remote:
        path = self.path(name)
        if self.fs.exists(path):
            raise RemoteError(f"remote {name!r} exists already; 'httk workflow remote remove {name}' first")
        remote = Remote(name, self.template(template_name), {})
        self.fs.write_new(path, codec.encode(remote.to_document()), durable=True)
        return remote

    def configure(self, name: str, assignments: Sequence[str]) -> Remote:
        """Apply ``key=value`` assignments (``key=`` returns a setting to its default)."""
        remote = self.get(name)
        chosen = dict(remote.chosen)
        for assignment in assignments:
            key, separator, text = assignment.partition("=")
            if not separator or not key:
                raise RemoteError(f"{assignment!r}: expected key=value")
            spec = remote.template.spec(key.strip())
            if text == "":
                chosen.pop(spec.name, None)
            else:
                chosen[spec.name] = spec.parse(text)
        updated = attrs.evolve(remote, chosen=chosen)
        self.fs.write_atomic(self.path(name), codec.encode(updated.to_document()), durable=True)
        return updated

    def remove(self, name: str) -> None:
        self.get(name)
        self.fs.remove(self.path(name))

    def _parse(self, document: dict[str, Any], path: str, name: str) -> Remote:
        expected = {"format", "format_version", "name", "template", "settings"}
        for key in document:
            if key not in expected:
                raise codec.DocumentError(path, f"$.{key}", "unknown member")
        if document.get("format") != REMOTE_FORMAT or document.get("format_version") != 1:
            raise codec.DocumentError(path, "$.format", f"expected {REMOTE_FORMAT} version 1")
        if document.get("name") != name:
            raise codec.DocumentError(path, "$.name", f"expected {name!r} (the file's name)")
        settings = document.get("settings")
        if not isinstance(settings, dict):
            raise codec.DocumentError(path, "$.settings", "expected an object")
        try:
            template = self.template(str(document.get("template")))
        except RemoteError as error:
            # A plug-in uninstalled since: say which remote needs it.
            raise RemoteError(f"remote {name}: {error}; reinstall the batch system or transport it names, "
                              f"or 'httk workflow remote remove {name}'") from None
        try:
            chosen = {key: template.spec(key).check(value) for key, value in settings.items()}
        except RemoteError as error:
            raise codec.DocumentError(path, "$.settings", str(error)) from None
        return Remote(name, template, chosen)


def parse_template(document: Mapping[str, Any], path: str) -> Template:
    """A template document, every member checked (a plug-in transport's settings schema included)."""
    if document.get("format") != TEMPLATE_FORMAT or document.get("format_version") != 1:
        raise codec.DocumentError(path, "$.format", f"expected {TEMPLATE_FORMAT} version 1")
    for key in document:
        if key not in {"format", "format_version", "name", "description", "transport", "batch", "settings"}:
            raise codec.DocumentError(path, f"$.{key}", "unknown member")
    for member in ("name", "transport", "batch"):
        if not isinstance(document.get(member), str):
            raise codec.DocumentError(path, f"$.{member}", "expected a string")
    raw = document.get("settings")
    if not isinstance(raw, dict):
        raise codec.DocumentError(path, "$.settings", "expected an object")
    specs: dict[str, SettingSpec] = {}
    for key, item in raw.items():
        member = f"$.settings.{key}"
        if not isinstance(item, dict) or item.get("type") not in TYPES or set(item) - _SPEC_MEMBERS:
            raise codec.DocumentError(path, member, f"expected {{type: {'|'.join(TYPES)}, default?, required?, ...}}")
        spec = SettingSpec(key, item["type"], None, bool(item.get("required", False)), str(item.get("description", "")),
                           item.get("minimum"), item.get("maximum"))
        if item.get("default") is not None:
            try:
                spec = attrs.evolve(spec, default=spec.check(item["default"]))
            except RemoteError as error:
                raise codec.DocumentError(path, f"{member}.default", str(error)) from None
        specs[key] = spec
    return Template(document["name"], str(document.get("description", "")), document["transport"],
                    document["batch"], specs)
