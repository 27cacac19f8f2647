"""The hexagon as a test: an ``ast`` import scan of ``src/httk/workflow``.

- ``domain/`` is pure: stdlib modules without I/O, plus attrs, plus itself.
- ``services/`` never imports adapters, the CLI, the composition root, or I/O modules.
- ``dependency_injector`` appears only in ``bootstrap``, ``cli/`` and ``testing``.
- ``time``, ``subprocess`` and ``socket`` appear only in adapters and the runner-side SDK.
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
#: Runner-side modules execute inside runner processes, outside the composition root
#: (and so does the whole ``vasp`` package).
RUNNER_SIDE = {
    "sdk", "runtime", "outcome", "supervision", "supervision_parts", "runtime_utils", "fileio", "shell_bridge",
    "shell_attempt", "protocol",
}


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
    if name.startswith(("adapters.", "cli.", "vasp.")) or name in RUNNER_SIDE:
        return
    for module in imports_of(path, name):
        assert module.split(".")[0] not in AMBIENT, f"{name} imports {module}; time and processes come through ports"


def test_adapter_classes_named_only_at_the_root() -> None:
    for name, path in ALL:
        if name.startswith(("adapters.", "vasp.")) or name in ("bootstrap",) or name in RUNNER_SIDE:
            continue
        for module in imports_of(path, name):
            assert not module.startswith("httk.workflow.adapters"), f"{name} imports {module}"


def test_the_layering_scan_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom ..adapters import fs_posix\n", encoding="utf-8")
    found = imports_of(bad, "services.bad")
    assert "os" in found and "httk.workflow.adapters" in found
