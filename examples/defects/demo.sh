#!/usr/bin/env bash
# The quick-start demo: the spec's defect campaign on the per-user default workspace.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export PATH="$here/bin:$PATH"
workspace=$(python -c 'import os; from httk.workflow.cli.defaults import default_workspace_path; print(default_workspace_path(os.environ))')
echo "== workspace: $workspace"
job=$(python "$here/submit.py" "$workspace")
echo "== submitted campaign job $job"
# A VASP relaxation from the shipped vasp-relax workflow, run by the mock VASP program.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cp "$here/POSCAR" "$scratch/POSCAR"
# stderr is not hidden: under set -e a failing 'job new' stops the demo, and its error must show. (Its
# warning that vasp.command is unset is expected: the run below supplies it.)
relax=$(cd "$scratch" && httk workflow job new "$workspace" --workflow vasp-relax --input structure=POSCAR --tag silicon-demo)
echo "== submitted vasp-relax job $relax (vasp.command comes from HTTK_VASP_COMMAND when it runs)"
# A deployment override (the HTTK_* layer) rather than a workspace setting, so the
# demo never changes the vasp.command of your default workspace.
HTTK_VASP_COMMAND="python -m httk.workflow.testing.mock_vasp" httk workflow run "$workspace" --workers 2
echo "== campaign job:"
httk workflow job show "$workspace" "$job"
workdir="$workspace/.httk-workflow/workdirs/${job##*--}"
echo "== results: $workdir/campaign.json"
cat "$workdir/campaign.json"; echo
echo "== vasp-relax job:"
httk workflow job show "$workspace" "$relax"
cat <<'NEXT'

== what to try next
httk is in .venv/bin, which is not on your PATH: run '.venv/bin/httk ...', or first
  source .venv/bin/activate
then, for example:
  httk workflow workspace status
  httk workflow job list --kind succeeded
and the campaign's dashboard (its charts need the report extra):
  pip install -e '.[report]'
  httk workflow workspace report --out campaign-report
  xdg-open campaign-report/index.html
NEXT
