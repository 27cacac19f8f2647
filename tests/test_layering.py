"""The hexagon as a test: an ``ast`` import scan of ``src/httk/workflow``.

- ``domain/`` is pure: stdlib modules without I/O, plus attrs, plus itself.
- ``services/`` never imports adapters, the CLI, the composition root, or I/O modules.
- ``dependency_injector`` appears only in ``bootstrap``, ``cli/`` and ``testing``.
- ``time``, ``subprocess`` and ``socket`` appear only in adapters (and the CLI); a runner-side
  module may import ``subprocess`` only where it starts the program a step asked for.
- Publication and process-group primitives (``os.rename``/``replace``/``link``/``fsync``,
  ``os.killpg``/``waitid``, ``/proc``) appear only in adapters: the runner side publishes
  through ``PosixFilesystem`` and signals through ``adapters/process_groups`` like the manager.
- Adapters are named only by the composition roots: ``bootstrap`` for the manager, and the
  runner-side entry points that build their own (a runner process has no container).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "httk" / "workflow"
STDLIB = set(sys.stdlib_module_names)
IO_MODULES = {
    "os", "io", "time", "subprocess", "socket", "shutil", "pathlib", "random", "uuid", "tempfile",
    "select", "selectors", "signal", "threading", "multiprocessing", "asyncio", "glob", "fcntl",
    "secrets", "datetime", "logging", "sys", "importlib", "ctypes", "platform", "getpass", "pwd",
}
AMBIENT = {"time", "subprocess", "socket"}
#: The ambient imports runner-side modules still need, each for a program the step asked to run
#: with pipes, its own session and inherited stdio (the manager's gated launch is another thing).
RUNNER_AMBIENT = {
    "runtime": {"subprocess"},  # Attempt.run
    "supervision": {"subprocess"},  # ProcessSupervisor: the program and its checkers on pipes
    "vasp.potcar": {"subprocess"},  # the configured POTCAR generator
}
#: Runner-side modules that build the adapters they publish, time and signal through: a runner
#: process runs outside the manager's composition root.
RUNNER_ROOTS = {"sdk", "runtime", "outcome", "protocol", "supervision", "runtime_utils", "vasp._io"}
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


def imports_of(path: Path, dotted: str) -> set[str]:
    """Absolute module names imported by one file (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package_parts = ["httk", "workflow", *dotted.split(".")[:-1]]
    if path.name == "__init__.py":
        package_parts = ["httk", "workflow", *dotted.split(".")[:-1]]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[: len(package_parts) - (node.level - 1)]
                module = ".".join([*base, node.module] if node.module else base)
                if node.module is None:
                    found.update(f"{module}.{alias.name}" for alias in node.names)
                else:
                    found.add(module)
            elif node.module:
                found.add(node.module)
    return found


ALL = modules()


def _ids() -> list[str]:
    return [name for name, _ in ALL]


def test_scan_sees_the_package() -> None:
    names = _ids()
    assert "domain.lifecycle" in names and "services.store" in names and "bootstrap" in names


DOMAIN = [item for item in ALL if item[0].startswith("domain.")]
SERVICES = [item for item in ALL if item[0].startswith("services.")]


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


@pytest.mark.parametrize(("name", "path"), ALL, ids=lambda v: str(v))
def test_dependency_injector_only_at_the_root(name: str, path: Path) -> None:
    allowed = name == "bootstrap" or name.startswith(("cli.", "testing"))
    for module in imports_of(path, name):
        if module.split(".")[0] == "dependency_injector":
            assert allowed, f"{name} imports dependency_injector; only bootstrap, cli/ and testing may"


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


def test_the_layering_scan_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom ..adapters import fs_posix\n", encoding="utf-8")
    found = imports_of(bad, "services.bad")
    assert "os" in found and "httk.workflow.adapters" in found


def test_the_primitive_scan_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import os\nos.replace('a', 'b')\nos.fsync(3)\nos.killpg(9, 0)\nopen(f'/proc/{1}/stat')\n"
        "os.listdir('/proc')\nos.path.join('a')\n",
        encoding="utf-8",
    )
    assert primitives_of(bad) == ["2: os.replace", "3: os.fsync", "4: os.killpg", "5: '/proc/'", "6: '/proc'"]
