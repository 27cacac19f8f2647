"""``workspace report`` / ``diff`` / ``status --at`` on a real workspace whose jobs a real manager ran.

The campaign is built once per module: five Bash-runner jobs (three succeed, two
fail with ``bad_input``) run by ``httk workflow run`` until idle, then a second
manager serving another pool is left heartbeating. The page is opened in a real
headless chromium when one is installed (``make test`` installs Debian's through ``make browser``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from httk.workflow.protocol import JobSpec, prepare_job_payload
from httk.workflow.workspace import Workspace
from runner_support import HTTK, PRELUDE, SUCCEED

FAIL = """publish '"action":"fail","failure":{"code":"bad_input","message":"no POSCAR"}'"""


class Campaign:
    def __init__(self, root: Path) -> None:
        self.tmp = root
        self.ws = root / "ws"
        self.env = {**os.environ, "HOME": str(root), "XDG_DATA_HOME": str(root / "xdg"),
                    "XDG_CONFIG_HOME": str(root / "config"), "LC_ALL": "C.UTF-8"}
        self.env.pop("HTTK_WORKFLOW_WORKSPACE", None)
        self.started = time.time()
        workspace = Workspace.init(self.ws, durable=False)
        for index, (placement, body) in enumerate(
            [("proj-a/00", SUCCEED), ("proj-a/01", SUCCEED), ("proj-b", SUCCEED), ("proj-b", FAIL),
             ("proj-c/x", FAIL)]):
            payload = root / "payloads" / f"job{index}"
            prepare_job_payload(payload, JobSpec(name=f"job{index}", workflow="ops", runner_path="run.sh"),
                                durable=False)
            (payload / "run.sh").write_text(PRELUDE + body + "\n")
            workspace.submit(payload, placement)
        self.httk("run", str(self.ws), "--workers", "2", timeout=120)
        self.live = subprocess.Popen([HTTK, "workflow", "run", str(self.ws), "--idle", "--pool", "gpu",
                                      "--capability", "cuda"], env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 30
        while sum(1 for m in self.json("workspace", "managers", str(self.ws)) if m["live"]) < 1:
            assert time.monotonic() < deadline, "the second manager never heartbeat"
            time.sleep(0.1)

    def httk(self, *args: str, code: int = 0, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([HTTK, "workflow", *args], capture_output=True, text=True, env=self.env,
                              timeout=timeout, check=False)
        assert done.returncode == code, f"exit {done.returncode} for {args}\n{done.stdout}\n{done.stderr}"
        return done

    def json(self, *args: str) -> Any:
        return json.loads(self.httk(*args, "--json").stdout)

    def close(self) -> None:
        self.live.kill()
        self.live.wait(10)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Campaign]:
    built = Campaign(tmp_path_factory.mktemp("campaign"))
    try:
        yield built
    finally:
        built.close()


@pytest.fixture(scope="module")
def published(campaign: Campaign) -> Path:
    out = campaign.tmp / "out"
    campaign.httk("workspace", "report", str(campaign.ws), "--out", str(out))
    return out


def test_report_json_matches_the_workspace(campaign, published):
    document = json.loads((published / "report.json").read_text())
    status = campaign.json("workspace", "status", str(campaign.ws))
    assert document["counts"] == status["counts"] and document["total"] == 5
    assert {row["subtree"]: row["counts"] for row in document["placements"]} == {
        "proj-a": {"succeeded": 2}, "proj-b": {"failed": 1, "succeeded": 1}, "proj-c": {"failed": 1}}
    [code] = document["failures"]["codes"]
    assert (code["code"], code["jobs"], document["failures"]["failed"]) == ("bad_input", 2, 2)
    for example in code["examples"]:
        why = campaign.json("job", "why", str(campaign.ws), example["job"])
        assert example["why"] == why["summary"] == "failed: bad_input: no POSCAR"
    managers = {m["manager_id"]: m for m in campaign.json("workspace", "managers", str(campaign.ws))}
    reported = {m["manager_id"]: m for m in document["managers"]}
    assert set(reported) == set(managers)
    assert sorted(m["state"] for m in reported.values()) == ["live", "stopped"]
    [live] = [m for m in reported.values() if m["live"]]
    assert (live["pools"], live["capabilities"]) == (["gpu"], ["cuda"]) and live["heartbeat_age"] < 60
    # Every job went submitted -> ready -> claimed -> running -> committing -> terminal: 5 frames each.
    assert document["history"]["frames"] == 25 and not document["history"]["collected"]
    assert sum(row["transitions"] for row in document["throughput"]["bins"]) == 25
    assert document["time_in_state"]["kinds"]["running"]["count"] == 5
    assert document["batch"] == {"remote": None, "batch_system": None, "jobs": [], "note": None}
    assert sorted(path.name for path in published.iterdir()) == [
        "index.html", "placements.svg", "report.json", "states.svg", "throughput.svg", "time_in_state.svg"]


def test_json_prints_the_document_and_writes_nothing(campaign):
    before = sorted(path.name for path in (campaign.ws / ".httk-workflow").iterdir())
    document = campaign.json("workspace", "report", str(campaign.ws))
    assert document["format"] == "httk-workflow-report" and document["total"] == 5
    assert sorted(path.name for path in (campaign.ws / ".httk-workflow").iterdir()) == before


def test_a_second_report_replaces_the_first_and_leaves_nothing_beside_it(campaign, tmp_path):
    out = tmp_path / "site"
    campaign.httk("workspace", "report", str(campaign.ws), "--out", str(out))
    first = json.loads((out / "report.json").read_text())["generated_at"]
    campaign.httk("workspace", "report", str(campaign.ws), "--out", str(out))
    assert json.loads((out / "report.json").read_text())["generated_at"] > first
    assert sorted(path.name for path in tmp_path.iterdir()) == ["site"]


def test_an_out_that_is_not_a_report_is_refused_and_left_alone(campaign, tmp_path):
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("precious\n")
    done = campaign.httk("workspace", "report", str(campaign.ws), "--out", str(out), code=2)
    assert done.stderr.startswith("error: --out ") and "holds no earlier report" in done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["home"]
    assert [path.name for path in out.iterdir()] == ["thesis.tex"]


def test_without_matplotlib_the_page_is_refused_and_json_still_works(campaign, tmp_path):
    hidden = tmp_path / "hidden"
    (hidden / "matplotlib").mkdir(parents=True)
    # What an installation without the [report] extra sees when it imports matplotlib.
    (hidden / "matplotlib" / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    env = {**campaign.env, "PYTHONPATH": str(hidden)}
    out = tmp_path / "site"
    done = subprocess.run([HTTK, "workflow", "workspace", "report", str(campaign.ws), "--out", str(out)],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    assert done.returncode == 2
    assert done.stderr == ("error: workspace report draws its charts with matplotlib, which is not installed "
                           "here: pip install 'httk-workflow[report]'\n")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["hidden"]
    printed = subprocess.run([HTTK, "workflow", "workspace", "report", str(campaign.ws), "--json"],
                             capture_output=True, text=True, env=env, timeout=120, check=True)
    assert json.loads(printed.stdout)["total"] == 5


def test_a_remote_report_needs_out(campaign, tmp_path):
    done = campaign.httk("workspace", "report", "kappa:runs", code=2)
    assert "give --out DIR" in done.stderr


def test_a_remote_workspace_is_reported_through_one_forwarded_command(campaign, tmp_path):
    campaign.httk("remote", "add", "here", "--template", "local")
    campaign.httk("remote", "configure", "here", "--set", f"httk_command={HTTK}",
                  "--set", f"workspace_root={campaign.tmp}")
    out = tmp_path / "remote-report"
    done = campaign.httk("workspace", "report", f"here:{campaign.ws}", "--out", str(out))
    assert done.stdout.startswith(f"report of ws to {out}/index.html: 5 jobs")
    document = json.loads((out / "report.json").read_text())
    local = campaign.json("workspace", "report", str(campaign.ws))
    assert (document["counts"], document["failures"]["codes"]) == (local["counts"], local["failures"]["codes"])
    assert document["batch"]["remote"] == "here" and document["batch"]["batch_system"] == "local"
    assert "listed for a slurm remote" in document["batch"]["note"]
    page = (out / "index.html").read_text()
    assert f"here:{campaign.ws}" in page and "none listed: batch jobs are listed for a slurm remote" in page
    # The remote wrote no report of its own: --json there publishes nothing.
    assert not (campaign.ws / ".httk-workflow" / "report").exists()


def test_status_at_and_diff_since(campaign):
    before = campaign.json("workspace", "status", str(campaign.ws), "--at", f"@{campaign.started - 60:.0f}")
    assert before["total"] == 0
    now = campaign.json("workspace", "status", str(campaign.ws), "--at", f"@{time.time() + 1:.0f}")
    assert now["counts"] == campaign.json("workspace", "status", str(campaign.ws))["counts"]
    changed = campaign.json("workspace", "diff", str(campaign.ws), "--since", f"@{campaign.started - 60:.0f}")
    assert changed["new_jobs"] == 5
    assert {(row["from"], row["to"]): row["jobs"] for row in changed["transitions"]} == {
        ("new", "succeeded"): 3, ("new", "failed"): 2}
    assert [(f["code"], f["jobs"]) for f in changed["new_failures"]] == [("bad_input", 2)]
    text = campaign.httk("workspace", "diff", str(campaign.ws), "--since", "1d").stdout
    assert "new failure bad_input: 2 job(s)" in text


def test_a_bad_timestamp_is_refused(campaign):
    done = campaign.httk("workspace", "status", str(campaign.ws), "--at", "yesterday-ish", code=2)
    assert done.stderr.startswith("error: --at 'yesterday-ish': not an instant")


def test_other_commands_never_import_the_plotting_or_progress_libraries():
    code = ("import sys, httk.workflow.cli.main; "
            "print(sorted(m for m in ('matplotlib', 'tqdm') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


# -- the page in a real browser ---------------------------------------------------------------------
def browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def headless(binary: str, *args: str, home: Path) -> subprocess.CompletedProcess[str]:
    argv = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            f"--user-data-dir={home / 'chromium-profile'}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "HOME": str(home)})


def test_the_page_renders_in_headless_chromium(campaign, published, tmp_path):
    binary = browser()
    if binary is None:
        pytest.skip("no chromium or chrome on PATH ('apt-get install -y chromium', as make browser does)")
    url = (published / "index.html").as_uri()
    dom = headless(binary, "--dump-dom", url, home=tmp_path)
    assert dom.returncode == 0, dom.stderr
    page = dom.stdout
    assert "<span id=\"total\">5</span>" in page
    for kind, count in (("succeeded", 3), ("failed", 2)):
        assert f'data-kind="{kind}"' in page and f"{kind}<b>{count}</b>" in page
    for chart in ("states", "placements", "throughput", "time_in_state"):
        assert f'id="chart-{chart}"' in page
    assert page.count("<svg") >= 4 and "transitions per" in page and "bad_input" in page
    shot = tmp_path / "shot.png"
    taken = headless(binary, f"--screenshot={shot}", "--window-size=1200,2000", url, home=tmp_path)
    assert taken.returncode == 0 and shot.exists(), taken.stderr
    from PIL import Image  # matplotlib's own dependency

    with Image.open(shot) as image:
        assert image.size == (1200, 2000)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50  # text, tiles and charts, not a blank page
    dominant = max(count for count, _ in colours)
    assert dominant < 0.97 * 1200 * 2000
    # The chart colours of the succeeded and failed bars are on the screen.
    present = {colour for _, colour in colours}
    assert (0x43, 0xA0, 0x47) in present and (0xE5, 0x39, 0x35) in present


def test_the_default_out_is_inside_the_workspace_and_fsck_stays_clean(campaign):
    done = campaign.httk("workspace", "report", str(campaign.ws))
    default = campaign.ws / ".httk-workflow" / "report"
    assert done.stdout.startswith(f"report of ws to {default}/index.html: 5 jobs (succeeded 3, failed 2); 2 failed;")
    assert (default / "index.html").is_file() and (default / "report.json").is_file()
    assert campaign.json("workspace", "fsck", str(campaign.ws))["clean"] is True


def test_watch_republishes_until_interrupted(campaign, tmp_path):
    import signal

    out = tmp_path / "live"
    watcher = subprocess.Popen([HTTK, "workflow", "workspace", "report", str(campaign.ws), "--out", str(out),
                                "--watch", "1"], env=campaign.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        seen: set[float] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 2:
            assert time.monotonic() < deadline, "the report was not republished"
            try:
                seen.add(json.loads((out / "report.json").read_text())["generated_at"])
            except (OSError, ValueError):
                pass  # between the two renames, or not yet published
            time.sleep(0.1)
        assert "<meta http-equiv='refresh' content='1'>" in (out / "index.html").read_text()
    finally:
        watcher.send_signal(signal.SIGINT)
        stdout, stderr = watcher.communicate(timeout=30)
    assert watcher.returncode == 0 and stderr.endswith("stopped watching\n"), stderr
    assert stdout.count("report of ws to") >= 2


def test_history_collected_by_gc_bounds_the_views_and_is_said(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "xdg"),
           "XDG_CONFIG_HOME": str(tmp_path / "config")}

    def httk(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([HTTK, "workflow", *args], capture_output=True, text=True, env=env, timeout=120,
                              check=False)
        assert done.returncode == code, f"{args}: {done.stdout}{done.stderr}"
        return done

    ws = tmp_path / "ws"
    workspace = Workspace.init(ws, durable=False)
    httk("workspace", "policy", "set", str(ws), "journal_segment_bytes", "4096")
    httk("workspace", "policy", "set", str(ws), "retention.journal_days", "1")
    for index in range(4):
        payload = tmp_path / "payloads" / f"job{index}"
        prepare_job_payload(payload, JobSpec(name=f"job{index}", workflow="ops", runner_path="run.sh"), durable=False)
        (payload / "run.sh").write_text(PRELUDE + SUCCEED + "\n")
        workspace.submit(payload, "p")
    started = time.time()
    httk("run", str(ws))
    [writer] = list((ws / ".httk-workflow" / "journal").iterdir())
    segments = sorted(writer.iterdir(), key=lambda path: int(path.stem))
    assert len(segments) >= 3, "the small segment size should have rotated the journal"
    week_ago = time.time() - 7 * 86400
    os.utime(segments[0], (week_ago, week_ago))  # aged, and no marker names a frame in it
    removed = json.loads(httk("workspace", "gc", str(ws), "--json").stdout)["removed"]
    assert [item["path"] for item in removed] == [str(segments[0])]

    refused = httk("workspace", "status", str(ws), "--at", f"@{started - 1:.0f}", code=2)
    assert refused.stderr.startswith("error: --at: the journal before ") and "was collected by 'workspace gc'" in \
        refused.stderr
    assert "give --at " in refused.stderr
    httk("workspace", "diff", str(ws), "--since", f"@{started - 1:.0f}", code=2)
    now = json.loads(httk("workspace", "status", str(ws), "--at", f"@{time.time() + 1:.0f}", "--json").stdout)
    assert now["counts"]["succeeded"] == 4 and now["history"]["collected"] is True
    out = tmp_path / "site"
    done = httk("workspace", "report", str(ws), "--out", str(out))
    assert "note: journal history before " in done.stderr
    document = json.loads((out / "report.json").read_text())
    assert document["history"]["collected"] and document["history"]["complete_since"] > started - 1
    assert "id='history-note'" in (out / "index.html").read_text()
