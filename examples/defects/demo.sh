#!/usr/bin/env bash
# The quick-start demo: the spec's defect campaign on the per-user default workspace.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$here/bin:$PATH"
workspace=$(python -c 'import os; from httk.workflow.cli.defaults import default_workspace_path; print(default_workspace_path(os.environ))')
echo "== workspace: $workspace"
job=$(python "$here/submit.py" "$workspace")
echo "== submitted campaign job $job"
httk workflow run "$workspace" --workers 2
echo "== campaign job:"
httk workflow job show "$workspace" "$job"
workdir="$workspace/.httk-workflow/workdirs/${job##*--}"
echo "== results: $workdir/campaign.json"
cat "$workdir/campaign.json"; echo
