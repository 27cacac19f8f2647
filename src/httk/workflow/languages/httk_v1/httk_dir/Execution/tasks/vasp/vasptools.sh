# httk v1 compatibility: the historic $HTTK_DIR/Execution/tasks/vasp/vasptools.sh of an unchanged ht_steps.
# A thin redirect to the httk-workflow stand-in for the v1 VASP tools (docs/v1_compatibility.md).
. "${HTTK_DIR:?HTTK_DIR is not set: run the task with the packaged v1 runner of httk-workflow}/../lib/vasptools.sh"
