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
# the same bytes. Inside httk_workflow_main one bridge co-process answers the calls
# of the attempt (HTTK_WORKFLOW_SHELL_COPROCESS=0: one interpreter per call). The normative list of functions is docs/sdks/sdk_parity.md;
# the guide is docs/sdks/native_bash_api.md.
#
# Exit-code discipline: 0 success; 1 the answer is legitimately absent (an unset
# state key, a missing input without a default, a null child field, a child that
# was not observed); 2 the call is refused (bad usage, a protocol violation, a
# corrupt attempt context). httk_workflow_run reports the supervised program's
# class instead: 0, 22 (nonzero exit), 124 (timeout), 125 (stopped, or could not
# start). Functions return; only httk_workflow_main exits. The VASP functions are in
# httk-vasp.sh beside this file (httk_vasp_run adds 3, 20 and 21).
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

# One bridge call: answered by the co-process of httk_workflow_main when this process can take
# its token (run and batch need the caller's own stdin and stdout; vasp_run supervises a program
# for hours, which must not hold the token), else by a fresh interpreter.
_httk_bridge() {
    local _httk_token
    if [[ -n ${_HTTK_SERVE_LOCK:-} && $1 != run && $1 != batch && $1 != vasp_run ]] && _httk_serve_can "$@" &&
        IFS= read -r -N1 -t 0.05 -u "$_HTTK_SERVE_LOCK" _httk_token 2>/dev/null; then
        if kill -0 "$_HTTK_SERVE_PID" 2>/dev/null; then
            _httk_serve_call "$@"
            return
        fi
        _HTTK_SERVE_LOCK=  # the co-process is gone: the token stays taken, so every caller runs one-shot
    fi
    "${HTTK_WORKFLOW_PYTHON:-python3}" -m httk.workflow.shell_bridge "$@"
}

# --------------------------------------------------------------------------- the bridge co-process
#
# httk_workflow_main starts `python -m httk.workflow.shell_bridge --serve` once per attempt,
# so a handler's calls share one interpreter (httk/workflow/shell_serve.py has the wire format).
# A manager that forks runners from its preloaded interpreter starts that server before the
# runner, already holding the SDK, and names its two pipes in HTTK_WORKFLOW_BRIDGE
# (RUNNER_PID:REQUEST_FD:REPLY_FD:BRIDGE_PID); the library then uses it instead of starting one.
# Each call sends the caller's exported variables, working directory and umask with its
# arguments, and prints the stdout and stderr the call produced, so it behaves as a process
# of its own. A one-byte token in a FIFO serializes callers: a call that cannot take it
# within 50 ms (a concurrent call, or a holder killed mid-call) runs one-shot instead.

# The pre-started bridge is this process's alone (a runner started by this one must not take it), so
# its variable is unset at once and its pid checked. Its descriptors are taken only by
# httk_workflow_main, as a co-process's are made only there; until then (and after, as Bash can
# set close-on-exec on no descriptor it inherited) programs the runner starts inherit them, which
# keeps nothing alive: the bridge ends with the runner, by its death signal. Sourcing again keeps it.
: "${_HTTK_BRIDGE=}"
if [[ -n ${HTTK_WORKFLOW_BRIDGE-} ]]; then
    [[ $HTTK_WORKFLOW_BRIDGE =~ ^([0-9]+):[0-9]+:[0-9]+:[0-9]+$ && ${BASH_REMATCH[1]} == "$BASHPID" ]] &&
        _HTTK_BRIDGE=$HTTK_WORKFLOW_BRIDGE
    unset HTTK_WORKFLOW_BRIDGE
fi

# Takes the pre-started bridge as the co-process: status 1 when there is none (or its pipes are gone).
_httk_bridge_take() {
    local pid given_in given_out rest
    IFS=: read -r pid given_in given_out rest <<<"$_HTTK_BRIDGE"
    _HTTK_BRIDGE=
    [[ -n $rest && -p /dev/fd/$given_in && -p /dev/fd/$given_out ]] || return 1
    _HTTK_SERVE_PID=$rest _HTTK_SERVE_IN=$given_in _HTTK_SERVE_OUT=$given_out _HTTK_SERVE_OWN=0
}

# Ends a pre-started bridge that will not be used: at end-of-file on its requests it exits.
_httk_bridge_release() {
    local pid given_in given_out rest
    [[ -n $_HTTK_BRIDGE ]] || return 0
    IFS=: read -r pid given_in given_out rest <<<"$_HTTK_BRIDGE"
    _HTTK_BRIDGE=
    [[ -p /dev/fd/$given_in ]] || return 0
    exec {given_in}>&- {given_out}<&-
    _httk_await_exit "$rest"
}

_httk_serve_start() {
    local path
    # ${name@a} (Bash 4.4) lists exported variables.
    if ((BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] < 4)) || [[ ${HTTK_WORKFLOW_SHELL_COPROCESS:-1} == 0 ]]; then
        _httk_bridge_release
        return 0
    fi
    if [[ -z $_HTTK_BRIDGE ]] || ! _httk_bridge_take; then
        # Start-up is silent (fd 3 keeps stderr for later): if it fails, every call runs one-shot and says why.
        coproc _HTTK_COPROC {
            exec 3>&2 2>/dev/null
            exec "${HTTK_WORKFLOW_PYTHON:-python3}" -m httk.workflow.shell_bridge --serve
        }
        _HTTK_SERVE_PID=$_HTTK_COPROC_PID
        _HTTK_SERVE_OWN=1
        # Copies that survive into subshells (the coproc's own do not); bash keeps them close-on-exec. The
        # token FIFO opened below is inherited by programs the handler runs, which keeps nothing alive.
        exec {_HTTK_SERVE_IN}>&"${_HTTK_COPROC[1]}" {_HTTK_SERVE_OUT}<&"${_HTTK_COPROC[0]}"
    fi
    if IFS= read -r -d '' -u "$_HTTK_SERVE_OUT" path && [[ -p $path ]] &&
        exec {_HTTK_SERVE_LOCK}<>"$path"; then
        printf T >&"$_HTTK_SERVE_LOCK"
    else
        _HTTK_SERVE_LOCK=
    fi
}

# A path into the caller's own descriptors (<(...), /dev/stdout, /proc/self/...) means nothing
# in another process: such a call runs one-shot.
_httk_serve_can() {
    local _httk_arg
    for _httk_arg; do
        case $_httk_arg in
            /dev/* | /proc/* | *=/dev/* | *=/proc/*) return 1 ;;
        esac
    done
}

# Ends the co-process before the runner exits, so the manager finds the runner's process group
# empty. Taking the token for good first makes any later caller (a background job the handler
# left running) run one-shot; a token that does not come back in 5 s was lost with a killed caller.
_httk_serve_stop() {
    local token rest
    [[ -n ${_HTTK_SERVE_PID:-} ]] || return 0
    if [[ -n ${_HTTK_SERVE_LOCK:-} ]] && IFS= read -r -N1 -t 5 -u "$_HTTK_SERVE_LOCK" token 2>/dev/null; then
        (trap '' PIPE; printf 'stop\n' >&"$_HTTK_SERVE_IN") 2>/dev/null
    else
        kill "$_HTTK_SERVE_PID" 2>/dev/null
    fi
    _HTTK_SERVE_LOCK=
    if ((_HTTK_SERVE_OWN)); then
        wait "$_HTTK_SERVE_PID" 2>/dev/null
    else
        # A pre-started bridge is not this shell's to wait for: its replies end as it exits, and it leaves
        # the runner's group (a zombie, for this shell to reap) a moment later. A manager that found it still
        # there after the runner ended would kill the group and warn, so the runner ends only after it.
        IFS= read -r -d '' -t 5 -u "$_HTTK_SERVE_OUT" rest 2>/dev/null
        _httk_await_exit "$_HTTK_SERVE_PID"
    fi
    _HTTK_SERVE_PID=
}

# Returns once process PID is gone or a zombie, or after about 1 s. It is about to exit when this is
# called, so the first polls are back to back; later ones are paced by sleep(1).
_httk_await_exit() {
    local stat tries=0
    while IFS= read -r stat 2>/dev/null <"/proc/$1/stat" && [[ ${stat##*) } != [ZX]* ]]; do
        ((++tries <= 200)) && continue
        ((tries <= 300)) || return 0
        sleep 0.01
    done
}

_httk_main_exit() {
    _httk_serve_stop
    _httk_bridge_release
    exit "$1"
}

# Prints one stream of a reply: inline bytes, or the file the co-process spilled them into.
_httk_serve_print() {
    case $1 in
        i*) printf '%s' "${1:1}" ;;
        f*) cat -- "${1:1}" ;;
    esac
}

# Writes one request. SIGPIPE is ignored for the write alone: runners start with it at its default, and
# a co-process that died but is not yet reaped (kill -0 still answers) must fail the call, not kill
# the caller. The caller's own PIPE trap is put back afterwards.
_httk_serve_send() {
    local _httk_pipe _httk_sent=0
    _httk_pipe=$(trap -p PIPE)
    trap '' PIPE
    { umask && printf '%s\0' "${PWD:-}" "${#_httk_env[@]}" "${_httk_env[@]}" "$#" "$@"; } >&"$_HTTK_SERVE_IN" \
        2>/dev/null || _httk_sent=1
    if [[ -n $_httk_pipe ]]; then eval "$_httk_pipe"; else trap - PIPE; fi
    return "$_httk_sent"
}

_httk_serve_call() {
    # Not traced under set -x: the trace would print every exported variable on every call.
    local - _httk_name _httk_env=() _httk_status _httk_out _httk_err
    set +x
    for _httk_name in "${!A@}" "${!B@}" "${!C@}" "${!D@}" "${!E@}" "${!F@}" "${!G@}" "${!H@}" "${!I@}" \
        "${!J@}" "${!K@}" "${!L@}" "${!M@}" "${!N@}" "${!O@}" "${!P@}" "${!Q@}" "${!R@}" "${!S@}" "${!T@}" \
        "${!U@}" "${!V@}" "${!W@}" "${!X@}" "${!Y@}" "${!Z@}" "${!a@}" "${!b@}" "${!c@}" "${!d@}" "${!e@}" \
        "${!f@}" "${!g@}" "${!h@}" "${!i@}" "${!j@}" "${!k@}" "${!l@}" "${!m@}" "${!n@}" "${!o@}" "${!p@}" \
        "${!q@}" "${!r@}" "${!s@}" "${!t@}" "${!u@}" "${!v@}" "${!w@}" "${!x@}" "${!y@}" "${!z@}" "${!_@}"; do
        [[ -n ${!_httk_name+set} && ${!_httk_name@a} == *x* ]] && _httk_env+=("$_httk_name=${!_httk_name}")
    done
    if ! _httk_serve_send "$@" || ! IFS= read -r -d '' -u "$_HTTK_SERVE_OUT" _httk_status ||
        ! IFS= read -r -d '' -u "$_HTTK_SERVE_OUT" _httk_out ||
        ! IFS= read -r -d '' -u "$_HTTK_SERVE_OUT" _httk_err; then
        _HTTK_SERVE_LOCK=  # a broken channel: keep the token, so every caller runs one-shot from now on
        printf 'httk-workflow.sh: the bridge co-process ended during %s\n' "$1" >&2
        return 2
    fi
    if [[ $_httk_status == redo ]]; then
        printf T >&"$_HTTK_SERVE_LOCK"
        "${HTTK_WORKFLOW_PYTHON:-python3}" -m httk.workflow.shell_bridge "$@"
        return
    fi
    if [[ $_httk_out == i* && $_httk_err == i* ]]; then
        printf T >&"$_HTTK_SERVE_LOCK"  # before printing: a reader gone (SIGPIPE) must not take the token along
        printf '%s' "${_httk_out:1}"
        printf '%s' "${_httk_err:1}" >&2
    else
        _httk_serve_print "$_httk_out"
        _httk_serve_print "$_httk_err" >&2
        printf T >&"$_HTTK_SERVE_LOCK"  # after: the next request removes the spilled files
    fi
    return "$_httk_status"
}

# One public function, one bridge command. `|| return` keeps a failing bridge call
# from tripping errexit inside the library: the caller's own line fails instead. A failing
# call records itself and its caller's FILE:LINE, so the ERR trap names the call (not the
# library's `return`) only when the failure it reports is that call's.
_httk_call() {
    local _httk_status=0
    _httk_bridge "$@" || _httk_status=$?
    if ((_httk_status)); then
        _HTTK_CALL=${FUNCNAME[1]}
        (($# > 1)) && _HTTK_CALL+=" ${*:2}"
        _HTTK_CALL_AT=${BASH_SOURCE[2]:-}:${BASH_LINENO[1]:-}
    fi
    return "$_httk_status"
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
    if [[ ${FUNCNAME[1]:-} == _httk_handler ]]; then
        # The failing command is the handler itself: it ended nonzero without a command failing in it.
        # The trap runs here, after its frame is gone; the RETURN trap kept where a `return N` of it stood.
        if [[ $command == return* && ${_HTTK_RETURN_FILE+set} ]]; then
            file=$_HTTK_RETURN_FILE line=$_HTTK_RETURN_LINE
        else
            file=  # its last list failed (`a && b`): no line is known, only the handler's file below
        fi
    fi
    while [[ $file == "$_HTTK_LIB" && $index -lt ${#BASH_SOURCE[@]} ]]; do
        line=${BASH_LINENO[index]}
        index=$((index + 1))
        file=${BASH_SOURCE[index]:-}
    done
    if [[ $command == return* && "$file:$line" == "${_HTTK_CALL_AT:-}" ]]; then
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
# ends it at that command and an explicit exit cannot skip httk_workflow_main. The handler
# alone gets the trace attribute, so the RETURN trap runs when it returns (and for no other
# function unless the script set functrace): a `return N` of its own raises ERR only in this
# frame, after its line is gone from BASH_LINENO.
_httk_handler() {
    _HTTK_HANDLER_PID=$BASHPID
    set -eE
    trap '_httk_on_error "$?" "$BASH_COMMAND"' ERR
    trap '_httk_on_exit "$?" "$BASH_COMMAND"' EXIT
    # One line: LINENO counts the lines of a trap's own text too.
    trap 'if [[ ${FUNCNAME[0]:-} == "step_$HTTK_WORKFLOW_STEP" ]]; then _HTTK_RETURN_FILE=${BASH_SOURCE[0]:-} _HTTK_RETURN_LINE=$LINENO; fi' RETURN
    declare -ft "step_$1"
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
        _httk_main_exit 2
    fi
    if [[ -z ${HTTK_WORKFLOW_BASH_WORKFLOW:-} ]]; then
        echo "httk_workflow_main: no workflow declared: call httk_workflow_runner WORKFLOW STEP... first" >&2
        _httk_main_exit 2
    fi
    IFS=' ' read -ra steps <<<"${HTTK_WORKFLOW_BASH_STEPS:-}"
    for step in "${steps[@]}"; do
        declare -F "step_$step" >/dev/null || missing+=" step_$step"
    done
    if [[ -n $missing ]]; then
        echo "httk_workflow_main: declared steps without a handler function:$missing" >&2
        _httk_main_exit 2
    fi
    if ((describe)); then
        _httk_bridge describe
        _httk_main_exit "$?"
    fi
    _httk_serve_start
    step=$(_httk_bridge begin)
    status=$?
    case $status in
        0) ;;
        1) _httk_main_exit 0 ;;  # not a step of this runner: fail unknown_step is published
        *) _httk_main_exit "$status" ;;
    esac
    export HTTK_WORKFLOW_STEP=$step
    (_httk_handler "$step")
    status=$?
    if ((status == 0)); then
        [[ -e $HTTK_WORKFLOW_CONTROL_DIR/outcome.ready ]] && _httk_main_exit 0
        _httk_bridge no_outcome
        _httk_main_exit "$?"
    fi
    if [[ ! -e $HTTK_WORKFLOW_CONTROL_DIR/error.json ]]; then
        # Killed before either trap could run.
        _httk_step_location
        _httk_bridge error --kind exit --step "$step" --status "$status" --file "$_HTTK_STEP_FILE" \
            --command "(the handler ended with status $status)"
    fi
    _httk_main_exit "$status"
}

# --------------------------------------------------------------------------- reading

httk_workflow_context() { _httk_call context "$@" || return; }
httk_workflow_input() { _httk_call input "$@" || return; }
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
