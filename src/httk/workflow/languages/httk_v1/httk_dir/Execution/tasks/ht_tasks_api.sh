# httk v1 compatibility: the historic $HTTK_DIR/Execution/tasks/ht_tasks_api.sh of an unchanged ht_steps.
# A thin redirect to the httk-workflow implementation of the v1 task API (docs/v1_compatibility.md).
. "${HTTK_DIR:?HTTK_DIR is not set: run the task with the packaged v1 runner of httk-workflow}/../lib/ht_tasks_api.sh"
