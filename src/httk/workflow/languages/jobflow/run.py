#!/usr/bin/env python3
"""The packaged runner of jobflow language jobs: the engine is httk.workflow.languages.jobflow_runner.

Published into a workspace's runner store as ``languages/jobflow`` by ``submit_flow``
(``httk workflow job new --language jobflow``). It needs the ``jobflow`` extra on the
machine that runs the job: ``pip install 'httk-workflow[jobflow]'``.
"""

from httk.workflow.languages.jobflow_runner import main

if __name__ == "__main__":
    raise SystemExit(main())
