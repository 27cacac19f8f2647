#!/usr/bin/env python3
"""The packaged httk v1 runner: runs one v1 step of a converted task (httk.workflow.languages.v1_runner).

Published into a workspace's runner store as ``compat/httk-v1`` by ``httk workflow v1 convert``.
Its ``httk_dir/`` is the ``$HTTK_DIR`` the task's ``ht_steps`` sees: the historic
``Execution/tasks/`` filenames there are thin redirects to ``lib/``.
"""

from pathlib import Path

from httk.workflow.languages.v1_runner import main

if __name__ == "__main__":
    raise SystemExit(main(Path(__file__).resolve().parent))
