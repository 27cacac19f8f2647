"""The compatibility implementation of the v1 task API (lib/ht_tasks_api.sh), called from bash as ht_steps calls it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from httk.workflow.languages.installation import package_dir

LIBRARY = package_dir("httk_v1") / "lib" / "ht_tasks_api.sh"
REDIRECT = package_dir("httk_v1") / "httk_dir" / "Execution" / "tasks" / "ht_tasks_api.sh"


def bash(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", f'. "{LIBRARY}"\n{script}'], cwd=cwd, capture_output=True, text=True,
                          timeout=60, check=False, env={"PATH": "/usr/bin:/bin", **env})


def test_the_historic_filename_redirects_to_the_implementation(tmp_path):
    done = subprocess.run(["bash", "-c", '. "$HTTK_DIR/Execution/tasks/ht_tasks_api.sh"; type -t HT_TASK_INIT'],
                          cwd=tmp_path, capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin", "HTTK_DIR": str(REDIRECT.parents[2])})
    assert done.stdout.strip() == "function", done.stderr
    unset = subprocess.run(["bash", "-c", f'. "{REDIRECT}"'], cwd=tmp_path, capture_output=True, text=True,
                           check=False, env={"PATH": "/usr/bin:/bin"})
    assert unset.returncode != 0 and "HTTK_DIR is not set" in unset.stderr


def test_steps_end_with_the_v1_exit_statuses_and_leave_ht_nextstep(tmp_path):
    for call, status, nextstep in (("HT_TASK_NEXT relax", 2, "relax"), ("HT_TASK_SUBTASKS gather", 3, "gather"),
                                   ("HT_TASK_FINISHED", 10, "ht_finished"), ("HT_TASK_BROKEN", 4, "ht_broken")):
        done = bash(call, tmp_path)
        assert done.returncode == status and (tmp_path / "ht.nextstep").read_text().strip() == nextstep


def test_init_takes_ht_nextstep_and_ht_vars_and_finishes_an_ended_task(tmp_path):
    (tmp_path / "ht.nextstep").write_text("relax2\n")
    (tmp_path / "ht.vars").write_text("RELAXSTEP=4\n")
    done = bash('HT_TASK_INIT start; echo "$STEP $RELAXSTEP $HT_NBR_NODES"', tmp_path)
    assert done.stdout.strip() == "relax2 4 1"
    (tmp_path / "ht.nextstep").write_text("ht_finished\n")
    assert bash("HT_TASK_INIT start; echo not reached", tmp_path).returncode == 10


def test_an_atomic_section_commits_as_a_whole_or_not_at_all(tmp_path):
    (tmp_path / "keep").write_text("old\n")
    (tmp_path / "moveme").write_text("x\n")
    # Ended but interrupted before its files moved: the next HT_TASK_ATOMIC_EXEC completes it.
    bash("HT_TASK_ATOMIC_SECTION_START; echo new > keep; HT_TASK_ATOMIC_MV moveme moved; "
         "HT_TASK_ATOMIC_SECTION_END", tmp_path)
    assert (tmp_path / "keep").read_text() == "old\n" and (tmp_path / "ht.atomic.0").is_dir()
    bash("HT_TASK_ATOMIC_EXEC", tmp_path)
    assert (tmp_path / "keep").read_text() == "new\n" and (tmp_path / "moved").is_file()
    assert not (tmp_path / "moveme").exists() and not (tmp_path / "ht.atomic.0").exists()
    # Never ended: discarded.
    bash("HT_TASK_ATOMIC_SECTION_START; echo never > keep", tmp_path)
    bash("HT_TASK_ATOMIC_EXEC", tmp_path)
    assert (tmp_path / "keep").read_text() == "new\n" and not list(tmp_path.glob("ht.tmp.atomic.*"))
    done = bash("HT_TASK_ATOMIC_SECTION_START; echo 1 > result; HT_TASK_ATOMIC_SECTION_END_NEXT relax", tmp_path)
    assert done.returncode == 2 and (tmp_path / "result").read_text() == "1\n"


def test_vars_arithmetic_templates_and_subtasks(tmp_path):
    done = bash('HT_TASK_STORE_VAR A 1; HT_TASK_STORE_VAR B 2; HT_TASK_STORE_VAR A 3; cat ht.vars; '
                'HT_FCALC "abs(-2.5) * 2"; HT_FTEST "3 > 2" && echo yes; '
                "NAME=world; printf 'hello $NAME $((1+2))\\n' > tpl; HT_TEMPLATE tpl out; cat out; "
                "printf 'a 1\\nb 2\\n' | HT_TASK_CREATE '' ./ start any 3; ls -d ht.task.*", tmp_path)
    assert done.stdout.split("\n") == ["B=2", "A=3", "5", "yes", "hello world 3",
                                       "ht.task.any.a.start.0.none.3.waitstart",
                                       "ht.task.any.b.start.0.none.3.waitstart", ""], done.stderr
    assert (tmp_path / "ht.task.any.a.start.0.none.3.waitstart" / "task_data").read_text() == "a 1\n"


def test_run_controlled_times_out_with_99_and_a_checker_stops_with_2(tmp_path):
    checker = tmp_path / "check"
    checker.write_text('#!/bin/bash\nwhile read -r line; do case "$line" in *BAD*) echo BADLINE > "$1"; '
                       "exit 2;; esac; done\n")
    checker.chmod(0o755)
    done = bash("HT_TASK_RUN_CONTROLLED 1 -- sleep 30; echo $?; cat ht.controlled.msgs; "
                "HT_TASK_RUN_CONTROLLED 30 ./check -- bash -c 'echo ok; sleep 0.3; echo BAD; sleep 30'; echo $?; "
                "cat ht.controlled.msgs; HT_TASK_RUN_CONTROLLED 30 -- bash -c 'echo hi; exit 7'; echo $?; "
                "cat stdout.out", tmp_path)
    assert done.stdout.split("\n") == ["99", "TIMEOUT", "2", "BADLINE", "7", "hi", ""], done.stderr
