"""The hexagon as a test: an ``ast`` import scan of ``src/httk/workflow``.

- ``domain/`` is pure: stdlib modules without I/O, plus attrs, plus itself.
- ``store/``, ``engine/`` and ``operations/`` never import adapters, the CLI, the composition
  root, or I/O modules; ``store/`` imports neither ``engine/`` nor ``operations/``, and
  ``engine/`` does not import ``operations/`` (the rooms depend inward only).
- No module of ``engine/`` but the loop itself imports ``engine.manager``: a pass receives a
  ``TickContext`` (``engine/context.py``), never the manager, so each one can be built alone.
- ``dependency_injector`` appears only in ``bootstrap``, ``cli/`` and ``testing``.
- ``cattrs`` appears only in ``codec``: its one converter structures every document.
- ``time``, ``subprocess`` and ``socket`` appear only in adapters (and the CLI); a runner-side
  module may import ``subprocess`` only where it starts the program a step asked for.
- Publication and process-group primitives (``os.rename``/``replace``/``link``/``fsync``,
  ``os.killpg``/``waitid``, ``/proc``) appear only in adapters: the runner side publishes
  through ``PosixFilesystem`` and signals through ``adapters/process_groups`` like the manager.
- Adapters are named only by the composition roots: ``bootstrap`` for the manager, and the
  runner-side entry points that build their own (a runner process has no container).
- The lifecycle's ``TRANSITIONS`` table is read only inside ``domain/``: everything else asks
  the domain's functions (``next_kind``, ``allowed_events``, the planners), so no service
  decides a move by probing the table.
- Every public function of a ``domain/`` module has a production caller: something in
  ``src/`` outside its module (``testing/`` aside) names it, or a public function of its own
  module that has one does. A rule only tests call drifts from the service copy beside it.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "httk" / "workflow"
STDLIB = set(sys.stdlib_module_names)
IO_MODULES = {
    "os", "io", "time", "subprocess", "socket", "shutil", "pathlib", "random", "uuid", "tempfile",
    "select", "selectors", "signal", "threading", "multiprocessing", "asyncio", "glob", "fcntl",
    "secrets", "datetime", "logging", "sys", "importlib", "ctypes", "platform", "getpass", "pwd",
}
AMBIENT = {"time", "subprocess", "socket", "datetime"}
#: The ambient imports runner-side modules still need, each for a program the step asked to run
#: with pipes, its own session and inherited stdio (the manager's gated launch is another thing).
RUNNER_AMBIENT = {
    "runtime": {"subprocess"},  # Attempt.run
    "supervision": {"subprocess"},  # ProcessSupervisor: the program and its checkers on pipes
    "vasp.potcar": {"subprocess"},  # the configured POTCAR generator
}
#: Runner-side modules that build the adapters they publish, time and signal through: a runner
#: process runs outside the manager's composition root.
RUNNER_ROOTS = {"sdk", "runtime", "outcome", "protocol", "supervision", "runtime_utils", "vasp._io",
                "languages.v1_runner"}
#: ``languages/`` is no room: each module is one of three kinds. The pure helpers (no I/O module,
#: no adapter, nothing runner-side) are the only ones ``store/``, ``engine/`` and ``operations/``
#: import; ``installation`` asks this interpreter (the CLI and the composition roots use it); the
#: runner side runs inside attempts (it builds adapters through the ``RUNNER_ROOTS`` it is among, or
#: the SDK's).
LANGUAGE_PURE = {"languages.__init__", "languages.realization", "languages.v1_format", "languages.jobflow_codec"}
LANGUAGE_INSTALLATION = {"languages.installation"}
LANGUAGE_RUNNER_SIDE = {"languages.jobflow_runner", "languages.v1_runner", "languages.jobflow.run",
                        "languages.httk_v1.run"}
#: What a pure ``languages/`` helper may import of this package besides its pure siblings.
LANGUAGE_PURE_MAY_IMPORT = ("httk.workflow.protocol", "httk.workflow.domain")
#: ``os`` calls that publish, sync or signal: the risky code the adapters hold once.
PRIMITIVES = {"rename", "renames", "replace", "link", "fsync", "fdatasync", "killpg", "waitid"}


def modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "shell" in path.parts[len(PACKAGE.parts):-1]:
            continue
        relative = path.relative_to(PACKAGE).with_suffix("")
        out.append((".".join(relative.parts), path))
    return out


def from_module(node: ast.ImportFrom, dotted: str) -> str:
    """The absolute module a ``from … import`` in module ``dotted`` (``x.__init__`` for a package) names."""
    if not node.level:
        return node.module or ""
    package_parts = ["httk", "workflow", *dotted.split(".")[:-1]]
    base = package_parts[: len(package_parts) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(path: Path, dotted: str) -> set[str]:
    """Absolute module names imported by one file (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = from_module(node, dotted)
            if node.level and node.module is None:
                found.update(f"{module}.{alias.name}" for alias in node.names)
            elif module:
                found.add(module)
    return found


ALL = modules()


def _ids() -> list[str]:
    return [name for name, _ in ALL]


def test_scan_sees_the_package() -> None:
    names = _ids()
    assert {"domain.lifecycle", "store.store", "engine.manager", "operations.fsck", "bootstrap"} <= set(names)


DOMAIN = [item for item in ALL if item[0].startswith("domain.")]
SERVICES = [item for item in ALL if item[0].startswith(("store.", "engine.", "operations."))]
#: What each room may not import: the rooms depend inward (operations -> engine -> store -> domain).
OUTWARD = {"store": ("engine", "operations"), "engine": ("operations",), "operations": ()}


@pytest.mark.parametrize(("name", "path"), DOMAIN, ids=lambda v: str(v))
def test_domain_is_pure(name: str, path: Path) -> None:
    for module in imports_of(path, name):
        top = module.split(".")[0]
        if module.startswith("httk.workflow.domain") or module == "attrs" or module == "__future__":
            continue
        assert top in STDLIB, f"domain module {name} imports {module}, which is neither stdlib nor attrs"
        assert top not in IO_MODULES, f"domain module {name} imports the I/O or ambient module {module}"
        assert not module.startswith("httk."), f"domain module {name} imports {module} from outside domain/"


@pytest.mark.parametrize(("name", "path"), SERVICES, ids=lambda v: str(v))
def test_services_use_ports_only(name: str, path: Path) -> None:
    for module in imports_of(path, name):
        assert not module.startswith("httk.workflow.adapters"), f"{name} imports the adapter {module}"
        assert not module.startswith("httk.workflow.cli"), f"{name} imports the CLI {module}"
        assert module != "httk.workflow.bootstrap", f"{name} imports the composition root"
        assert module.split(".")[0] not in IO_MODULES - {"logging"}, f"{name} imports the I/O module {module}"
        for room in OUTWARD[name.split(".")[0]]:
            assert not module.startswith(f"httk.workflow.{room}"), f"{name} imports {module}: {room}/ is an outer room"


ENGINE = [item for item in ALL if item[0].startswith("engine.")]


def manager_importers(modules: Mapping[str, set[str]]) -> list[str]:
    """The ``engine/`` modules other than the loop that import ``engine.manager`` (by any spelling)."""
    return [name for name, imported in modules.items()
            if name.startswith("engine.") and name != "engine.manager"
            and any(module == "httk.workflow.engine.manager" or module.startswith("httk.workflow.engine.manager.")
                    for module in imported)]


@pytest.mark.parametrize(("name", "path"), ENGINE, ids=lambda v: str(v))
def test_no_pass_imports_the_manager(name: str, path: Path) -> None:
    assert manager_importers({name: imports_of(path, name)}) == [], (
        f"{name} imports engine.manager; a pass receives the TickContext (engine/context.py) instead")


def test_the_manager_import_rule_can_fail(tmp_path: Path) -> None:
    sources = {
        "engine.waiting": "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
                          "if TYPE_CHECKING:\n    from .manager import Manager\n",
        "engine.launching": "from . import manager\n",
        "engine.recovery": "import httk.workflow.engine.manager as m\n",
        "engine.draining": "from .context import TickContext\n",
        "engine.manager": "from .waiting import WaitingPass\n",
        "operations.debug": "from ..engine.manager import Manager\n",
    }
    found = {}
    for name, source in sources.items():
        path = tmp_path / f"{name}.py"
        path.write_text(source, encoding="utf-8")
        found[name] = imports_of(path, name)
    assert manager_importers(found) == ["engine.waiting", "engine.launching", "engine.recovery"]


@pytest.mark.parametrize(("name", "path"), ALL, ids=lambda v: str(v))
def test_dependency_injector_only_at_the_root(name: str, path: Path) -> None:
    allowed = name in ("bootstrap", "injector_import") or name.startswith(("cli.", "testing"))
    for module in imports_of(path, name):
        if module.split(".")[0] == "dependency_injector":
            assert allowed, f"{name} imports dependency_injector; only bootstrap, injector_import, cli/ and testing may"


@pytest.mark.parametrize(("name", "path"), ALL, ids=lambda v: str(v))
def test_cattrs_only_in_codec(name: str, path: Path) -> None:
    # One converter structures every document: a second one would drift in its hooks and messages.
    if name == "codec":
        return
    for module in imports_of(path, name):
        assert module.split(".")[0] != "cattrs", f"{name} imports {module}; documents go through codec.converter()"


def test_the_cattrs_rule_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from cattrs.gen import make_dict_structure_fn\n", encoding="utf-8")
    assert "cattrs.gen" in imports_of(bad, "protocol")


@pytest.mark.parametrize(("name", "path"), ALL, ids=lambda v: str(v))
def test_ambient_modules_only_in_adapters(name: str, path: Path) -> None:
    if name.startswith(("adapters.", "cli.")):
        return
    allowed = RUNNER_AMBIENT.get(name, set())
    for module in imports_of(path, name):
        top = module.split(".")[0]
        assert top not in AMBIENT - allowed, f"{name} imports {module}; time and processes come through adapters"


def primitives_of(path: Path) -> list[str]:
    """The ``os`` publication/signal calls and ``/proc`` paths one file spells, as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            if node.attr in PRIMITIVES:
                found.append(f"{node.lineno}: os.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("/proc"):
            found.append(f"{node.lineno}: {node.value!r}")
    return sorted(found, key=lambda item: int(item.split(":")[0]))


@pytest.mark.parametrize(("name", "path"), ALL, ids=lambda v: str(v))
def test_publication_and_signal_primitives_only_in_adapters(name: str, path: Path) -> None:
    if name.startswith("adapters."):
        return
    assert primitives_of(path) == [], f"{name} publishes or signals by hand; use the filesystem or process adapters"


def test_adapter_classes_named_only_at_the_root() -> None:
    for name, path in ALL:
        if name.startswith("adapters.") or name == "bootstrap" or name in RUNNER_ROOTS:
            continue
        for module in imports_of(path, name):
            assert not module.startswith("httk.workflow.adapters"), f"{name} imports {module}"


def test_the_runner_side_lists_name_real_modules() -> None:
    names = set(_ids())
    assert set(RUNNER_AMBIENT) | RUNNER_ROOTS <= names


def language_module_of(module: str) -> str | None:
    """The ``languages.…`` scan name of an imported ``httk.workflow.languages…`` module, else ``None``."""
    if module != "httk.workflow.languages" and not module.startswith("httk.workflow.languages."):
        return None
    name = module.removeprefix("httk.workflow.")
    return "languages.__init__" if name == "languages" else name


def language_layering_problems(modules: Mapping[str, set[str]]) -> list[str]:
    """``module: problem`` for every import that crosses the ``languages/`` kinds' lines."""
    problems = []
    for name, imported in modules.items():
        for module in imported:
            target = language_module_of(module)
            if name.startswith(("store.", "engine.", "operations.")) and target is not None \
                    and target not in LANGUAGE_PURE:
                problems.append(f"{name}: imports {module}, which is not a pure languages/ helper")
            if name not in LANGUAGE_PURE:
                continue
            if target is not None and target not in LANGUAGE_PURE:
                problems.append(f"{name}: a pure helper imports {module}")
            elif target is None and module.startswith("httk.") and not module.startswith(LANGUAGE_PURE_MAY_IMPORT):
                problems.append(f"{name}: a pure helper imports {module}")
            elif module.split(".")[0] in IO_MODULES:
                problems.append(f"{name}: a pure helper imports the I/O module {module}")
    return problems


def test_every_languages_module_is_of_one_kind() -> None:
    found = {name for name in _ids() if name.startswith("languages.")}
    kinds = (LANGUAGE_PURE, LANGUAGE_INSTALLATION, LANGUAGE_RUNNER_SIDE)
    assert found == set().union(*kinds), "name each languages/ module's kind in tests/test_layering.py"
    assert sum(len(kind) for kind in kinds) == len(found), "a languages/ module is listed as two kinds"


def test_services_import_only_the_pure_languages_helpers() -> None:
    assert language_layering_problems({name: imports_of(path, name) for name, path in ALL}) == []


def test_the_languages_rule_can_fail() -> None:
    modules = {
        "operations.language_jobs": {"httk.workflow.languages.jobflow_runner", "httk.workflow.languages.realization"},
        "operations.precheck": {"httk.workflow.languages.installation"},
        "languages.realization": {"importlib.util", "attrs", "httk.workflow.sdk"},
        "languages.v1_format": {"httk.workflow.languages.v1_runner", "httk.workflow.protocol"},
        "cli.language_cmds": {"httk.workflow.languages.installation"},
    }
    assert sorted(language_layering_problems(modules)) == [
        "languages.realization: a pure helper imports httk.workflow.sdk",
        "languages.realization: a pure helper imports the I/O module importlib.util",
        "languages.v1_format: a pure helper imports httk.workflow.languages.v1_runner",
        "operations.language_jobs: imports httk.workflow.languages.jobflow_runner, which is not a pure "
        "languages/ helper",
        "operations.precheck: imports httk.workflow.languages.installation, which is not a pure languages/ helper",
    ]


def test_the_layering_scan_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom ..adapters import fs_posix\n", encoding="utf-8")
    found = imports_of(bad, "store.bad")
    assert "os" in found and "httk.workflow.adapters" in found


def test_the_primitive_scan_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os\nos.replace('a', 'b')\nos.fsync(3)\nos.killpg(9, 0)\nopen(f'/proc/{1}/stat')\n"
        "os.listdir('/proc')\nos.path.join('a')\n",
        encoding="utf-8",
    )
    assert primitives_of(bad) == ["2: os.replace", "3: os.fsync", "4: os.killpg", "5: '/proc/'", "6: '/proc'"]


# -- the domain decides: its transition table stays inside, and its rules have callers ---------------
SOURCES = {name: path.read_text(encoding="utf-8") for name, path in ALL}


def transitions_readers(sources: Mapping[str, str]) -> list[str]:
    """``module:line`` of every import or attribute read of ``TRANSITIONS`` outside ``domain/``."""
    found = []
    for dotted, source in sources.items():
        if dotted.startswith("domain."):
            continue
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and any(alias.name == "TRANSITIONS" for alias in node.names):
                found.append(f"{dotted}:{node.lineno}")
            elif isinstance(node, ast.Attribute) and node.attr == "TRANSITIONS":
                found.append(f"{dotted}:{node.lineno}")
    return found


def names_used_from(tree: ast.Module, dotted: str, target: str) -> set[str]:
    """The names of module ``target`` that module ``dotted`` imports, or reads as ``module.name``."""
    names: set[str] = set()
    spellings: set[str] = set()  # how the module itself is reachable in this file
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = from_module(node, dotted)
            for alias in node.names:
                if module == target:
                    names.add(alias.name)
                elif f"{module}.{alias.name}" == target:
                    spellings.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            spellings.update(alias.asname or alias.name for alias in node.names if alias.name == target)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) in spellings:
            names.add(node.attr)
    return names


def uncalled_domain_functions(sources: Mapping[str, str]) -> list[str]:
    """``module.function`` for each public top-level domain function without a production caller.

    A caller is a module outside ``testing`` other than the function's own that names it,
    or a public function of its own module that has a caller itself.
    """
    trees = {dotted: ast.parse(source) for dotted, source in sources.items()}
    missing = []
    for dotted, tree in trees.items():
        if not dotted.startswith("domain."):
            continue
        target = "httk.workflow." + dotted.removesuffix(".__init__")
        public = {node.name: node for node in tree.body
                  if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}
        used: set[str] = set()
        for other, other_tree in trees.items():
            if other != dotted and not other.startswith("testing"):
                used |= names_used_from(other_tree, other, target) & set(public)
        pending = list(used)
        while pending:  # a used function lends its use to the public functions of its module it names
            for node in ast.walk(public[pending.pop()]):
                if isinstance(node, ast.Name) and node.id in public and node.id not in used:
                    used.add(node.id)
                    pending.append(node.id)
        missing.extend(f"{dotted}.{name}" for name in public if name not in used)
    return missing


def test_transitions_are_read_only_inside_the_domain() -> None:
    assert transitions_readers(SOURCES) == [], "ask the domain (next_kind, allowed_events) instead"


def test_every_public_domain_function_has_a_production_caller() -> None:
    assert uncalled_domain_functions(SOURCES) == [], "call the domain function from the service, or delete it"


def test_the_transitions_rule_can_fail() -> None:
    sources = {
        "domain.requests": "from .lifecycle import TRANSITIONS\n",
        "engine.requests": "from ..domain.lifecycle import TRANSITIONS, Event\n",
        "cli.job_cmds": (
            "from httk.workflow.domain import lifecycle\n\nok = lifecycle.next_kind\nbad = lifecycle.TRANSITIONS\n"
        ),
    }
    assert transitions_readers(sources) == ["engine.requests:1", "cli.job_cmds:4"]


def test_the_caller_rule_can_fail() -> None:
    sources = {
        "domain.rules": (
            "def used():\n    return helper()\n\n\ndef helper():\n    return 1\n\n\n"
            "def lonely():\n    return orphan()\n\n\ndef orphan():\n    return 2\n\n\n"
            "def tested_only():\n    return 3\n\n\ndef by_attribute():\n    return 4\n\n\n"
            "def self_only():\n    return self_only()\n\n\ndef _private():\n    return 5\n"
        ),
        "engine.user": "from ..domain.rules import used\nfrom ..domain import rules as r\n\nr.by_attribute()\n",
        "testing.doubles": "from ..domain.rules import tested_only\n",
    }
    assert uncalled_domain_functions(sources) == [
        "domain.rules.lonely", "domain.rules.orphan", "domain.rules.tested_only", "domain.rules.self_only",
    ]


#: A test reaches our objects through public members only: ``name._member`` outside ``self``/``cls``
#: (and the stdlib's own underscore API) is a test that breaks on every refactoring.
PRIVATE_ACCESS = re.compile(r"\b(?!self\b|cls\b|os\b|sys\b)[A-Za-z_][A-Za-z0-9_]*\._(?!_)[a-z][a-z0-9_]*\b")
STDLIB_UNDERSCORE = {"_replace", "_asdict", "_fields", "_make", "_exit", "_getframe", "_current_frames"}


def private_accesses(text: str) -> list[str]:
    """``line: name._member`` for every private member a source spells outside strings."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = re.sub(r"(\"[^\"]*\"|'[^']*')", "''", line.split("#", 1)[0])
        for match in PRIVATE_ACCESS.finditer(code):
            if "." + match.group(0).rsplit(".", 1)[1] not in {"." + name for name in STDLIB_UNDERSCORE}:
                found.append(f"{number}: {match.group(0)}")
    return found


def test_tests_reach_our_objects_through_public_members_only() -> None:
    tests = Path(__file__).resolve().parent
    found = {str(path.relative_to(tests)): hits for path in sorted(tests.rglob("*.py"))
             if (hits := private_accesses(path.read_text(encoding="utf-8")))}
    assert found == {}


def test_the_private_access_scan_can_fail() -> None:
    assert private_accesses("cursor = discovery._cursors[kind]\nx = self._y\npoint._replace(x=1)\n") == [
        "1: discovery._cursors"]
