# shellcheck shell=bash
# The httk v1 VASP tools (VASP_PREPARE_CALC, VASP_RUN_CONTROLLED, VASP_INPUTS_FIX_ERROR, ...) are
# not reimplemented by httk-workflow's v1 compatibility: an ht_steps that sources them stops here,
# before running anything, and its job fails with v1_stopped naming this file. Port such a task to
# the VASP helpers of httk.workflow.vasp (or the shipped vasp-relax workflow); see
# docs/v1_compatibility.md.
echo "httk-workflow v1 compatibility: \$HTTK_DIR/Execution/tasks/vasp/vasptools.sh (the v1 VASP tools) is" \
     "not provided; port the task to httk.workflow.vasp or the vasp-relax workflow (docs/v1_compatibility.md)" >&2
exit 64
