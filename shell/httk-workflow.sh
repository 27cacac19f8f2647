# shellcheck shell=bash
# httk-workflow.sh: the Bash runner SDK of httk-workflow.
#
# Source it from a runner (the manager exports its path, as $HTTK_WORKFLOW_SHELL_LIB and,
# for runners written for httk-workflow 2.1, as $HTTK_WORKFLOW_BASH_API):
#
#     source "$HTTK_WORKFLOW_SHELL_LIB"
#     httk_workflow_runner WORKFLOW STEP...
#     step_STEP() { ...; httk_workflow_succeed; }
#     httk_workflow_main "$@"
#
# Every function below is a thin call into `python -m httk.workflow.shell_bridge`,
# which drives the same Attempt object as the Python SDK, so both languages publish
# the same bytes. The normative list of functions is docs/sdks/sdk_parity.md;
# the guide is docs/sdks/native_bash_api.md.
#
# Exit-code discipline: 0 success; 1 the answer is legitimately absent (an unset
# state key, a missing input without a default, a null child field, a child that
# was not observed); 2 the call is refused (bad usage, a protocol violation, a
# corrupt attempt context). httk_workflow_run reports the supervised program's
# class instead: 0, 22 (nonzero exit), 124 (timeout), 125 (stopped, or could not
# start). Functions return; only httk_workflow_main exits.
#
# The interpreter is $HTTK_WORKFLOW_PYTHON, else python3 on PATH; it must import
# httk.workflow. Names starting with _httk_ are private.

# --------------------------------------------------------------------------- private helpers

if ((BASH_VERSINFO[0] < 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] < 2))); then
    echo "httk-workflow.sh needs Bash 4.2 or newer (this is $BASH_VERSION)" >&2
    return 2
fi

_HTTK_STEP_PATTERN='^[A-Za-z_][A-Za-z0-9_.-]{0,127}$'

# The library's own path, so an error inside it is reported at the caller's line.
_HTTK_LIB=${BASH_SOURCE[0]}

_httk_bridge() {
    "${HTTK_WORKFLOW_PYTHON:-python3}" -m httk.workflow.shell_bridge "$@"
}

# One public function, one bridge command. `|| return` keeps a failing bridge call
# from tripping errexit inside the library: the caller's own line fails instead.
_httk_call() {
    _HTTK_CALL=${FUNCNAME[1]}
    (($# > 1)) && _HTTK_CALL+=" ${*:2}"
    _httk_bridge "$@" || return
}

# Prints only: the caller returns 2 itself, so nothing inside the library trips errexit.
_httk_usage() {
    printf '%s: usage: %s\n' "${FUNCNAME[1]}" "$1" >&2
}

# ERR trap of a handler: record where it died (the first frame outside this library),
# discard the draft, write error.json, exit with the failing status.
_httk_on_error() {
    local status=$1 command=$2 index=1 file line
    [[ $BASHPID == "${_HTTK_HANDLER_PID:-}" ]] || return 0  # a subshell's failure surfaces in its parent
    trap - ERR
    set +e
    line=${BASH_LINENO[0]}
    file=${BASH_SOURCE[1]:-}
    while [[ $file == "$_HTTK_LIB" && $index -lt ${#BASH_SOURCE[@]} ]]; do
        line=${BASH_LINENO[index]}
        index=$((index + 1))
        file=${BASH_SOURCE[index]:-}
    done
    if [[ $command == return* && -n ${_HTTK_CALL:-} ]]; then
        command=$_HTTK_CALL  # the library function returned the failure; name the call, not its `return`
    fi
    if [[ -z $file || $file == "$_HTTK_LIB" ]]; then
        _httk_step_location
        file=$_HTTK_STEP_FILE line=
    fi
    _httk_bridge error --kind errexit --step "$HTTK_WORKFLOW_STEP" --status "$status" \
        --file "$file" --line "$line" --command "$command"
    _HTTK_REPORTED=1
    exit "$status"
}

# EXIT trap of a handler: an explicit nonzero `exit` is a death too, with no line to name.
_httk_on_exit() {
    local status=$1 command=$2
    [[ $status -ne 0 && -z ${_HTTK_REPORTED:-} && $BASHPID == "${_HTTK_HANDLER_PID:-}" ]] || return 0
    trap - ERR
    set +e
    _httk_step_location
    _httk_bridge error --kind exit --step "$HTTK_WORKFLOW_STEP" --status "$status" \
        --file "$_HTTK_STEP_FILE" --command "$command"
}

# The file that defines the handler of this step (with extdebug, declare -F prints "NAME LINE FILE").
_httk_step_location() {
    local had=0 where
    shopt -q extdebug && had=1
    shopt -s extdebug
    where=$(declare -F "step_$HTTK_WORKFLOW_STEP") || where=
    ((had)) || shopt -u extdebug
    where=${where#* }
    _HTTK_STEP_FILE=${where#* }
}

# Runs in a subshell: the handler under errexit and errtrace, so a failing command
# ends it at that command and an explicit exit cannot skip httk_workflow_main.
_httk_handler() {
    _HTTK_HANDLER_PID=$BASHPID
    set -eE
    trap '_httk_on_error "$?" "$BASH_COMMAND"' ERR
    trap '_httk_on_exit "$?" "$BASH_COMMAND"' EXIT
    "step_$1"
}

# --------------------------------------------------------------------------- declaring and dispatching

# httk_workflow_runner WORKFLOW STEP...: the workflow and its complete step set.
httk_workflow_runner() {
    (($# >= 1)) && [[ -n $1 ]] || { _httk_usage 'httk_workflow_runner WORKFLOW STEP...'; return 2; }
    local step seen=" " IFS=' '
    for step in "${@:2}"; do
        if [[ ! $step =~ $_HTTK_STEP_PATTERN ]]; then
            printf 'httk_workflow_runner: invalid step name %q: use [A-Za-z_][A-Za-z0-9_.-]*\n' "$step" >&2
            return 2
        fi
        if [[ $seen == *" $step "* ]]; then
            printf "httk_workflow_runner: step '%s' is declared twice in runner '%s'\n" "$step" "$1" >&2
            return 2
        fi
        seen+="$step "
    done
    export HTTK_WORKFLOW_BASH_WORKFLOW=$1
    export HTTK_WORKFLOW_BASH_STEPS="${*:2}"
}

# httk_workflow_main [--describe]: dispatch the requested step; every ending is an outcome.
httk_workflow_main() {
    local describe=0 arg step status missing= steps=()
    set +e  # this function decides every status itself; the handler gets errexit back
    trap - ERR
    [[ ${HTTK_WORKFLOW_DESCRIBE:-} == 1 ]] && describe=1
    for arg in "$@"; do
        [[ $arg == --describe ]] && describe=1
    done
    if ((!describe && $#)); then
        printf 'usage: %s [--describe] (unexpected arguments: %s)\n' "$0" "$*" >&2
        exit 2
    fi
    if [[ -z ${HTTK_WORKFLOW_BASH_WORKFLOW:-} ]]; then
        echo "httk_workflow_main: no workflow declared: call httk_workflow_runner WORKFLOW STEP... first" >&2
        exit 2
    fi
    IFS=' ' read -ra steps <<<"${HTTK_WORKFLOW_BASH_STEPS:-}"
    for step in "${steps[@]}"; do
        declare -F "step_$step" >/dev/null || missing+=" step_$step"
    done
    if [[ -n $missing ]]; then
        echo "httk_workflow_main: declared steps without a handler function:$missing" >&2
        exit 2
    fi
    if ((describe)); then
        _httk_bridge describe
        exit
    fi
    step=$(_httk_bridge begin)
    status=$?
    case $status in
        0) ;;
        1) exit 0 ;;  # not a step of this runner: fail unknown_step is published
        *) exit "$status" ;;
    esac
    export HTTK_WORKFLOW_STEP=$step
    (_httk_handler "$step")
    status=$?
    if ((status == 0)); then
        [[ -e $HTTK_WORKFLOW_CONTROL_DIR/outcome.ready ]] && exit 0
        _httk_bridge no_outcome
        exit
    fi
    if [[ ! -e $HTTK_WORKFLOW_CONTROL_DIR/error.json ]]; then
        # Killed before either trap could run.
        _httk_step_location
        _httk_bridge error --kind exit --step "$step" --status "$status" --file "$_HTTK_STEP_FILE" \
            --command "(the handler ended with status $status)"
    fi
    exit "$status"
}

# --------------------------------------------------------------------------- reading

httk_workflow_context() { _httk_call context "$@" || return; }
httk_workflow_input() { _httk_call input "$@" || return; }
# Also accepted: httk_workflow_parameter, the httk-workflow 2.1 spelling of httk_workflow_input.
httk_workflow_parameter() { _httk_call parameter "$@" || return; }
httk_workflow_setting() { _httk_call setting "$@" || return; }
httk_workflow_state_get() { _httk_call state_get "$@" || return; }
httk_workflow_declaration() { _httk_call declaration "$@" || return; }
httk_workflow_children() { _httk_call children "$@" || return; }
httk_workflow_child() { _httk_call child "$@" || return; }

# --------------------------------------------------------------------------- job state, declarations, run log

httk_workflow_state_set() { _httk_call state_set "$@" || return; }
httk_workflow_state_delete() { _httk_call state_delete "$@" || return; }
httk_workflow_state_merge() { _httk_call state_merge "$@" || return; }
httk_workflow_declare() { _httk_call declare "$@" || return; }
httk_workflow_runlog_note() { _httk_call runlog_note "$@" || return; }
httk_workflow_runlog_headline() { _httk_call runlog_headline "$@" || return; }
httk_workflow_runlog_append() { _httk_call runlog_append "$@" || return; }

# httk_workflow_log LEVEL MESSAGE: one timestamped line on stderr, in pure Bash
# (the same shape as the Python SDK's logging: "2024-05-01 12:00:00,123 INFO message").
httk_workflow_log() {
    (($# == 2)) || { _httk_usage 'httk_workflow_log LEVEL MESSAGE'; return 2; }
    local level=${1^^} now ms
    case $level in
        DEBUG | INFO | WARNING | ERROR | CRITICAL) ;;
        WARN) level=WARNING ;;
        *) _httk_usage 'httk_workflow_log DEBUG|INFO|WARNING|ERROR|CRITICAL MESSAGE'; return 2 ;;
    esac
    now=${EPOCHREALTIME:-}
    now=${now/,/.}
    if [[ $now == *.* ]]; then
        ms=${now#*.}000
        printf '%(%Y-%m-%d %H:%M:%S)T,%s %s %s\n' "${now%.*}" "${ms:0:3}" "$level" "$2" >&2
    else
        printf '%(%Y-%m-%d %H:%M:%S)T %s %s\n' -1 "$level" "$2" >&2
    fi
}

# --------------------------------------------------------------------------- doing

httk_workflow_run() { _httk_call run "$@" || return; }
httk_workflow_workdir_apply() { _httk_call workdir_apply "$@" || return; }

# --------------------------------------------------------------------------- the draft and the outcome

httk_workflow_put() { _httk_call put "$@" || return; }
httk_workflow_remove() { _httk_call remove "$@" || return; }
httk_workflow_spawn() { _httk_call spawn "$@" || return; }
httk_workflow_advance() { _httk_call advance "$@" || return; }
httk_workflow_gather() { _httk_call gather "$@" || return; }
httk_workflow_succeed() { _httk_call succeed "$@" || return; }
httk_workflow_fail() { _httk_call fail "$@" || return; }
httk_workflow_retry() { _httk_call retry "$@" || return; }
httk_workflow_pause() { _httk_call pause "$@" || return; }

# --------------------------------------------------------------------------- jobs, batches, utilities

httk_workflow_job_prepare() { _httk_call job_prepare "$@" || return; }

# httk_workflow_batch < LINES: several bridge commands, one interpreter start.
httk_workflow_batch() { _httk_call batch "$@" || return; }

httk_calc() { _httk_call calc "$@" || return; }
httk_template_render() { _httk_call template_render "$@" || return; }
httk_compress() { _httk_call compress "$@" || return; }
httk_decompress() { _httk_call decompress "$@" || return; }
