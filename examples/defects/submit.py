#!/usr/bin/env python3
"""Publish the defect-campaign runner and submit one campaign job (spec 001, "A complete runner")."""

import sys
import tempfile
from pathlib import Path

from httk.workflow import JobSpec, Workspace, prepare_job_payload

here = Path(__file__).resolve().parent
workspace = Workspace.init(sys.argv[1])
reference = workspace.publish_runner(here / "defects.py", name="defects/run.py")
with tempfile.TemporaryDirectory() as scratch:
    payload = prepare_job_payload(
        Path(scratch) / "prepared-job",
        JobSpec(
            name="Si vacancies",
            workflow="defects",
            runner_source="workspace",
            runner_path=str(reference["path"]),
            runner_sha256=str(reference["sha256"]),
            initial_step="characterize",
            inputs={"encut": 520, "supercell": [2, 2, 2]},
            tag="si-vacancies",
        ),
    )
    (payload / "POSCAR").write_text("Si8 diamond\n5.43\n", encoding="utf-8")
    marker = workspace.submit(payload, "project/si-vacancies")
print(marker.key)
