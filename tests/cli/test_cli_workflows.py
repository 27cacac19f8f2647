"""``workflow list|show`` and ``job new``: the shipped VASP workflows, end to end through the mock VASP."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from httk.workflow.operations.workflows import Catalog
from httk.workflow.operations.workflows import new_job as create
from httk.workflow.testing import mock_vasp
from httk.workflow.workflows import SHIPPED_WORKFLOWS
from httk.workflow.workspace import Workspace

SI_POSCAR = """Si2 diamond
5.43
0.0 0.5 0.5
0.5 0.0 0.5
0.5 0.5 0.0
Si
2
Direct
0.00 0.00 0.00
0.25 0.25 0.25
"""


def mock_command(*options: str) -> str:
    return shlex.join([sys.executable, "-m", mock_vasp.MODULE, *options])


@pytest.fixture
def here(tmp_path, monkeypatch):
    """The current directory holds the structure, as for a user typing --input structure=POSCAR."""
    (tmp_path / "POSCAR").write_text(SI_POSCAR, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def tree(root: str) -> dict[str, str]:
    """Every path below ``root`` with its content digest: what 'nothing written' is checked against."""
    found = {}
    for directory, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(directory, name), root)] = "dir"
        for name in files:
            path = os.path.join(directory, name)
            found[os.path.relpath(path, root)] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return found


def manager_run(cli, workspace: str, *, path: str | None = None) -> subprocess.CompletedProcess[str]:
    """``httk workflow manager run WS`` in its own process (a manager configures process-wide logging)."""
    script = Path(sys.executable).parent / "httk"
    if not script.exists():
        pytest.skip(f"console script httk is not installed next to {sys.executable}")
    env = {**os.environ, **cli.env}
    if path is not None:
        env["PATH"] = path
    done = subprocess.run([str(script), "workflow", "manager", "run", workspace], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done


def new_job(cli, workspace: str, *args: str) -> dict:
    return json.loads(cli("job", "new", workspace, *args, "--json").stdout)


def test_list_shows_the_shipped_workflows(cli, workspace):
    entries = {entry["name"]: entry for entry in cli.json("workflow", "list", workspace)}
    assert {"vasp-relax", "vasp-static"} <= set(entries)
    assert entries["vasp-relax"]["source"] == "shipped" and entries["vasp-relax"]["problem"] is None
    text = cli("workflow", "list", workspace).stdout
    assert text.splitlines()[0].split() == ["workflow", "source", "summary"] and "vasp-static" in text


def test_show_takes_the_steps_from_the_runner_and_reports_the_settings(cli, workspace):
    report = cli.json("workflow", "show", "vasp-relax", workspace)
    assert report["steps"] == ["calculate", "prepare"] and report["initial_step"] == "prepare"
    inputs = {spec["name"]: spec for spec in report["inputs"]}
    assert inputs["structure"] == {
        "name": "structure", "type": "file", "required": True, "destination": "POSCAR",
        "description": "the starting structure, in POSCAR (or CONTCAR) format",
    }
    assert inputs["kpoint_density"]["default"] == 30
    assert report["settings"]["vasp.command"]["set"] is False
    assert report["options"]["incar"]["IBRION"] == 2
    cli("workspace", "settings", "set", workspace, "vasp.command", mock_command())
    text = cli("workflow", "show", "vasp-relax", workspace).stdout
    assert "steps         calculate, prepare" in text and f"vasp.command: set to {mock_command()}" in text
    assert not os.listdir(os.path.join(workspace, ".httk-workflow", "tmp"))  # the describe scratch is gone


def test_show_refuses_an_unknown_workflow(cli, workspace):
    result = cli("workflow", "show", "vasp-relx", workspace, code=2)
    assert result.stderr.startswith("error: unknown workflow 'vasp-relx'; known: ") and "vasp-relax" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workflow", "nope", "--input", "structure=POSCAR"], "unknown workflow 'nope'; known: "),
        (["--workflow", "vasp-relax", "--input", "structure=POSCAR", "--input", "encut=520"],
         "workflow 'vasp-relax' has no input 'encut'; its inputs: structure, incar,"),
        (["--workflow", "vasp-relax", "--input", "kpoint_density=40"],
         "workflow 'vasp-relax' needs input 'structure' (the starting structure, in POSCAR (or CONTCAR) format): "
         "add --input structure=FILE"),
        (["--workflow", "vasp-relax", "--input", "structure=missing/POSCAR"],
         "--input structure: no file 'missing/POSCAR' (looked at "),
        (["--workflow", "vasp-relax", "--input", "structure=."], "is a directory; give the path of a file"),
        (["--workflow", "vasp-relax", "--input", "structure"], "--input 'structure': expected KEY=VALUE"),
        (["--workflow", "vasp-relax", "--input", "structure=POSCAR", "--input", "kpoint_density=dense"],
         "--input kpoint_density: expected a value of type number, got the string \"dense\""),
        (["--workflow", "vasp-relax", "--input", "structure=POSCAR", "--input", "structure=POSCAR"],
         "--input structure is given twice"),
        (["--workflow", "vasp-relax", "--input", "structure=POSCAR", "--tag", "Bad Tag"], "invalid tag 'Bad Tag'"),
        (["--workflow", "vasp-relax", "--input", "structure=POSCAR", "--placement", "../up"], "invalid placement"),
        (["--workflow", "vasp-relax", "--input", "structure=POSCAR", "--placement", "p" * 300],
         "is too long for the filesystem"),
    ],
)
def test_job_new_refuses_bad_input_and_writes_nothing(cli, workspace, here, args, message):
    before = tree(workspace)
    result = cli("job", "new", workspace, *args, code=2)
    assert result.stderr.startswith("error: ") and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and result.stdout == ""
    assert tree(workspace) == before


def test_job_new_stages_the_structure_and_pins_the_published_runner(cli, workspace, here):
    result = cli("job", "new", workspace, "--workflow", "vasp-relax", "--input", "structure=POSCAR", "--tag",
                 "silicon", "--input", "incar={\"ENCUT\": 600}")
    key = result.stdout.strip()  # the tag--uuid key, the form 'job submit' prints
    assert "no setting vasp.command" in result.stderr  # a warning, since the job may be transferred first
    assert "HTTK_VASP_COMMAND in the manager's environment" in result.stderr
    report = cli.json("job", "show", workspace, key)
    assert report["kind"] == "submitted" and report["placement"] == "vasp-relax"
    assert key == report["job_key"] == f"silicon--{report['job_id']}"
    payload = Path(report["paths"]["payload"])
    assert (payload / "POSCAR").read_text() == SI_POSCAR
    spec = json.loads((payload / "job.json").read_text())
    assert spec["runner"]["source"] == "workspace" and spec["runner"]["path"] == "shipped/vasp-relax"
    assert spec["initial_step"] == "prepare" and spec["data"] == {"mode": "transactional"}
    assert spec["inputs"]["structure"] == "POSCAR" and spec["inputs"]["incar"] == {"ENCUT": 600}
    assert spec["inputs"]["kpoint_density"] == 30  # declared defaults are recorded
    staged = spec["declarations"]["workflow"]["inputs"]["structure"]
    assert staged["from"] == str(here / "POSCAR") and staged["sha256"] == hashlib.sha256(SI_POSCAR.encode()).hexdigest()
    objects = Path(workspace) / ".httk-workflow" / "runners" / "objects"
    stored = objects / spec["runner"]["sha256"] / "vasp-relax"
    assert sorted(os.listdir(stored)) == ["run.py", "workflow.json"]  # no __pycache__, whatever is installed
    # Publication is content addressed: a second job reuses the same object.
    second = new_job(cli, workspace, "--workflow", "vasp-relax", "--input", "structure=POSCAR")
    assert second["runner"] == spec["runner"] and second["placement"] == "vasp-relax"
    assert second["job_key"] == second["job_id"] and second["staged"] == {"POSCAR": str(here / "POSCAR")}
    assert os.listdir(objects) == [spec["runner"]["sha256"]]
    static = new_job(cli, workspace, "--workflow", "vasp-static", "--input", "structure=POSCAR")
    assert static["runner"]["path"] == "shipped/vasp-static" and static["runner"]["sha256"] != spec["runner"]["sha256"]
    assert not os.listdir(Path(workspace) / ".httk-workflow" / "tmp")


def test_a_workspace_workflow_shadows_the_shipped_one(cli, workspace, here):
    own = here / "my-relax"
    shutil.copytree(os.path.join(SHIPPED_WORKFLOWS, "vasp_relax"), own, ignore=shutil.ignore_patterns("__pycache__"))
    document = json.loads((own / "workflow.json").read_text())
    document["summary"] = "our own relaxation"
    (own / "workflow.json").write_text(json.dumps(document), encoding="utf-8")
    cli("runner", "publish", str(own), "--workspace", workspace, "--name", "workflows/vasp-relax")
    entries = {entry["name"]: entry for entry in cli.json("workflow", "list", workspace)}
    assert entries["vasp-relax"]["source"] == "workspace" and entries["vasp-relax"]["shadows_shipped"] is True
    assert entries["vasp-relax"]["summary"] == "our own relaxation"
    assert cli.json("workflow", "show", "vasp-relax", workspace)["steps"] == ["calculate", "prepare"]
    created = new_job(cli, workspace, "--workflow", "vasp-relax", "--input", "structure=POSCAR")
    assert created["source"] == "workspace" and created["runner"]["path"] == "workflows/vasp-relax"


def test_a_broken_workspace_workflow_is_listed_and_refused(cli, workspace, here):
    single = here / "run.py"
    single.write_text("print('not a workflow directory')\n", encoding="utf-8")
    cli("runner", "publish", str(single), "--workspace", workspace, "--name", "workflows/broken")
    text = cli("workflow", "list", workspace).stdout
    assert "broken" in text and "BROKEN:" in text
    before = tree(workspace)
    result = cli("job", "new", workspace, "--workflow", "broken", code=2)
    assert result.stderr.startswith("error: workflow 'broken' cannot be used: ")
    assert tree(workspace) == before


def test_a_relaxation_through_the_mock_succeeds_with_the_default_settings(cli, workspace, here):
    cli("workspace", "settings", "set", workspace, "vasp.command", mock_command())
    job_id = cli("job", "new", workspace, "--workflow", "vasp-relax", "--input", "structure=POSCAR",
                 "--tag", "silicon").stdout.strip()
    done = manager_run(cli, workspace)
    assert "1 succeeded, 0 failed" in done.stdout
    report = cli.json("job", "show", workspace, job_id)
    assert report["kind"] == "succeeded", report.get("failure")
    data = Path(report["paths"]["data"])
    assert sorted(os.listdir(data)) == ["CONTCAR", "vasp-result.json", "vasp-run-report.json"]
    result = json.loads((data / "vasp-result.json").read_text())
    assert result["relaxation"] is True and result["reruns"] == 0 and result["remedies"] == []
    assert result["kpoint_grid"] == [10, 10, 10] and result["energy"] < 0
    collected = [json.loads(line) for line in cli("collect", workspace).stdout.splitlines()]
    assert collected[0]["state"]["energy"] == result["energy"] and collected[0]["state"]["converged"] is True
    workdir = Path(report["paths"]["workdir"])
    assert "ISIF = 3" in (workdir / "INCAR").read_text() and not (workdir / "POTCAR").exists()


def test_python_in_vasp_command_is_the_managers_own_even_when_path_names_another(cli, workspace, here, tmp_path):
    """A batch job's PATH rarely names the venv: the manager runs attempts as if it were activated."""
    if sys.prefix == sys.base_prefix:
        pytest.skip("the test interpreter is not in a virtual environment")
    impostor = tmp_path / "impostor-bin"
    impostor.mkdir()
    (impostor / "python").write_text("#!/bin/sh\necho 'not the python that has httk' >&2\nexit 127\n")
    (impostor / "python").chmod(0o755)
    cli("workspace", "settings", "set", workspace, "vasp.command", "python -m httk.workflow.testing.mock_vasp")
    job_id = cli("job", "new", workspace, "--workflow", "vasp-relax", "--input", "structure=POSCAR").stdout.strip()
    done = manager_run(cli, workspace, path=f"{impostor}:/usr/bin:/bin")
    assert "1 succeeded, 0 failed" in done.stdout, cli.json("job", "show", workspace, job_id).get("failure")


def test_a_remediable_failure_is_remedied_and_the_retry_succeeds(cli, workspace, here):
    cli("workspace", "settings", "set", workspace, "vasp.command", mock_command("--fail", "zbrent", "--until-remedied"))
    job_id = cli("job", "new", workspace, "--workflow", "vasp-relax", "--input", "structure=POSCAR").stdout.strip()
    manager_run(cli, workspace)
    report = cli.json("job", "show", workspace, job_id)
    assert report["kind"] == "succeeded", report.get("failure")
    reasons = [entry.get("reason") for entry in cli.json("job", "log", workspace, job_id)]
    assert "zbrent: applied reduce_potim" in reasons
    history = json.loads((Path(report["paths"]["payload"]) / ".httk-job" / "vasp-remedies.json").read_text())
    assert [(entry["code"], entry["rung"]) for entry in history["entries"]] == [("zbrent", "reduce_potim")]
    assert "POTIM = 0.25" in (Path(report["paths"]["workdir"]) / "INCAR").read_text()
    result = json.loads((Path(report["paths"]["data"]) / "vasp-result.json").read_text())
    assert result["reruns"] == 1 and result["remedies"] == [{"code": "zbrent", "rung": "reduce_potim"}]


def test_no_remedy_left_fails_the_job_with_the_evidence(cli, workspace, here):
    cli("workspace", "settings", "set", workspace, "vasp.command", mock_command("--fail", "crash"))
    job_id = cli("job", "new", workspace, "--workflow", "vasp-static", "--input", "structure=POSCAR").stdout.strip()
    manager_run(cli, workspace)
    failure = cli.json("job", "show", workspace, job_id)["failure"]
    assert failure["code"] == "vasp_failed" and failure["retryable"] is False
    assert "segmentation fault" in failure["details"]["stdout_tail"][-1]


def test_a_real_vasp_command_without_a_potcar_source_fails_before_running(cli, workspace, here):
    cli("workspace", "settings", "set", workspace, "vasp.command", "srun -n 32 vasp_std")
    job_id = cli("job", "new", workspace, "--workflow", "vasp-relax", "--input", "structure=POSCAR").stdout.strip()
    manager_run(cli, workspace)
    report = cli.json("job", "show", workspace, job_id)
    assert report["kind"] == "failed" and report["failure"]["code"] == "vasp_potcar_missing"
    assert "vasp.potcar_library" in report["failure"]["message"] and report["step"] == "prepare"


def test_a_missing_vasp_command_names_a_fix_that_works(cli, workspace, here):
    """The failure's advice, followed as written (setting, then continue), makes the job succeed."""
    job_id = cli("job", "new", workspace, "--workflow", "vasp-relax", "--input", "structure=POSCAR").stdout.strip()
    manager_run(cli, workspace)
    failure = cli.json("job", "show", workspace, job_id)["failure"]
    assert failure["code"] == "vasp_command_missing", failure
    # No '--input vasp.command': job new refuses an input the workflow does not declare.
    assert "--input" not in failure["message"] and "workspace settings set WORKSPACE vasp.command" in failure["message"]
    assert "job request WORKSPACE JOB continue --operator" in failure["message"]
    cli("workspace", "settings", "set", workspace, "vasp.command", mock_command())
    cli("job", "request", workspace, job_id, "continue", "--operator", "rar")
    manager_run(cli, workspace)
    assert cli.json("job", "show", workspace, job_id)["kind"] == "succeeded"


def test_a_static_run_publishes_no_contcar(cli, workspace, here):
    cli("workspace", "settings", "set", workspace, "vasp.command", mock_command())
    job_id = cli("job", "new", workspace, "--workflow", "vasp-static", "--input", "structure=POSCAR").stdout.strip()
    manager_run(cli, workspace)
    report = cli.json("job", "show", workspace, job_id)
    assert report["kind"] == "succeeded", report.get("failure")
    assert sorted(os.listdir(report["paths"]["data"])) == ["vasp-result.json", "vasp-run-report.json"]
    assert "ISMEAR = -5" in (Path(report["paths"]["workdir"]) / "INCAR").read_text()


def test_a_shipped_runner_digest_does_not_depend_on_the_installation(workspace, here):
    """Bytecode caches, hidden files and executable bits of an installed copy never reach the store."""
    shipped = here / "shipped"
    (shipped / "flow").mkdir(parents=True)
    document = {"format": "httk-workflow-workflow", "format_version": 1, "name": "flow", "initial_step": "main"}
    (shipped / "flow" / "workflow.json").write_text(json.dumps(document), encoding="utf-8")
    (shipped / "flow" / "run.py").write_text("print('runner')\n", encoding="utf-8")
    (shipped / "twin").mkdir()
    (shipped / "twin" / "workflow.json").write_text(json.dumps({**document, "name": "twin"}), encoding="utf-8")
    (shipped / "twin" / "run.py").symlink_to("../flow/run.py")
    handle = Workspace(workspace).handle
    catalog = Catalog(handle, str(shipped))
    first = create(handle, catalog, "flow", [], cwd=str(here)).runner
    (shipped / "flow" / "__pycache__").mkdir()
    (shipped / "flow" / "__pycache__" / "run.cpython-311.pyc").write_bytes(b"\x00bytecode")
    (shipped / "flow" / ".swp").write_text("editor", encoding="utf-8")
    (shipped / "flow" / "run.py").chmod(0o755)
    assert create(handle, catalog, "flow", [], cwd=str(here)).runner == first
    stored = Path(workspace) / ".httk-workflow" / "runners" / "objects" / first["sha256"] / "flow"
    assert sorted(os.listdir(stored)) == ["run.py", "workflow.json"]
    twin = create(handle, catalog, "twin", [], cwd=str(here)).runner
    twin_stored = Path(workspace) / ".httk-workflow" / "runners" / "objects" / twin["sha256"] / "twin"
    assert not (twin_stored / "run.py").is_symlink() and (twin_stored / "run.py").read_text() == "print('runner')\n"


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("import sys\nsys.stderr.write('no module named vasp\\n')\nsys.exit(3)\n",
         "--describe exited with status 3: no module named vasp"),
        ("print('hello')\n", "not JSON"),
        ("print('{\"steps\": 1}')\n", "--describe printed no runner description"),
    ],
)
def test_show_refuses_a_runner_that_cannot_describe_itself(cli, workspace, here, script, message):
    flow = here / "flow"
    flow.mkdir()
    document = {"format": "httk-workflow-workflow", "format_version": 1, "initial_step": "main"}
    (flow / "workflow.json").write_text(json.dumps(document), encoding="utf-8")
    (flow / "run.py").write_text(script, encoding="utf-8")
    cli("runner", "publish", str(flow), "--workspace", workspace, "--name", "workflows/flow")
    result = cli("workflow", "show", "flow", workspace, code=2)
    assert result.stderr.startswith("error: workflow 'flow': ") and message in result.stderr, result.stderr
    assert not os.listdir(Path(workspace) / ".httk-workflow" / "tmp")
