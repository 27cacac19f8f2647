#!/usr/bin/env bash
# Defect campaign in Bash: characterize, relax every site, aggregate, triage.
# The same four steps as defects.py, through the Bash runner SDK (docs/sdks/native_bash_api.md).
set -euo pipefail
# The manager exports the library's path; outside a manager (--describe) ask the package for it.
source "${HTTK_WORKFLOW_SHELL_LIB:-$("${HTTK_WORKFLOW_PYTHON:-python3}" -m httk.workflow.shell_bridge libpath)}"

httk_workflow_runner defects characterize relax aggregate triage

step_characterize() {
    local status=0 index=0 site sites
    httk_workflow_run --timeout 600 -- characterize --structure POSCAR || status=$?
    if ((status)); then
        httk_workflow_fail characterize_failed "site characterization failed" --retryable
        return
    fi
    # One site at a time out of sites.json, without jq: the template utility indexes a JSON
    # array, and an index past its end is a legitimately absent value (status 1).
    sites="{\"sites\": $(<sites.json)}"
    while site=$(httk_template_render <(printf '{{ sites.%d }}' "$index") "$sites"); do
        httk_workflow_spawn --label "site-$index" --step relax --input "site=$site" \
            --maximum-attempts-per-activation 2 >/dev/null
        index=$((index + 1))
    done
    httk_workflow_state_set sites "$index"
    httk_workflow_gather aggregate --when all_terminal --on-impossible triage
}

step_relax() {
    local site status=0
    site=$(httk_workflow_input site)
    httk_workflow_run --timeout 3600 -- relax --site "$site" || status=$?
    case $status in
        0) httk_workflow_succeed ;;
        124) httk_workflow_retry "the relaxation timed out" ;;
        *) httk_workflow_fail relax_diverged "site $site did not relax" ;;
    esac
}

step_aggregate() {
    local label energies="" failed=""
    for label in $(httk_workflow_children --succeeded); do
        energies+="${energies:+, }\"$label\": $(<"$(httk_workflow_child "$label" workdir)/energy.json")"
    done
    printf '{%s}' "$energies" >campaign.json
    for label in $(httk_workflow_children --failed); do
        failed+="${failed:+,}\"$label\""
    done
    if [[ -n $failed ]]; then
        httk_workflow_advance triage --state "{\"failed\": [$failed]}"
    else
        httk_workflow_succeed
    fi
}

step_triage() {
    local failed label labels=()
    if ! failed=$(httk_workflow_state_get failed); then
        for label in $(httk_workflow_children --failed); do
            failed+="${failed:+,}\"$label\""
        done
        failed="[$failed]"
    fi
    # Labels are tags ([a-z0-9._-]), so the JSON array splits on commas once brackets and quotes go.
    label=${failed//[\[\]\"]/}
    IFS=, read -ra labels <<<"$label"
    httk_workflow_runlog_note triage "${#labels[@]} of $(httk_workflow_state_get sites) sites did not relax"
    httk_workflow_fail campaign_incomplete "not every site relaxed" --details "{\"failed\": $failed}"
}

httk_workflow_main "$@"
