# shellcheck shell=bash
# The httk v1 task API, as an unchanged ht_steps uses it, implemented for httk-workflow.
#
# Sourced through the historic $HTTK_DIR/Execution/tasks/ht_tasks_api.sh redirect. It keeps
# the names, arguments, files and exit statuses of the v1 interface (httk 1.2.0, attributed
# to the httk authors, https://httk.org) and is written anew for httk-workflow; which
# behaviours are kept is listed in docs/v1_compatibility.md. The packaged v1 runner reads the
# step's exit status: 10 finished, 2 next step (ht.nextstep), 3 subtasks, 4 broken.

HT_V1_EXIT_NEXT=2
HT_V1_EXIT_SUBTASKS=3
HT_V1_EXIT_BROKEN=4
HT_V1_EXIT_FINISHED=10

# ---------------------------------------------------------------- arithmetic and small helpers
# awk evaluates the expression; abs, min and max are provided as in v1.
__ht_awk_eval() {
    local format="$1"
    shift
    awk -v fmt="$format" "function abs(v) { return v < 0 ? -v : v }
        function max(p, q) { return p > q ? p : q }
        function min(p, q) { return p < q ? p : q }
        BEGIN { printf(fmt \"\\n\", ($*)) }"
}

HT_FCALC() { __ht_awk_eval "%.6g" "$@"; }
HT_ECALC() { __ht_awk_eval "%.14e" "$@"; }

HT_FTEST() {
    awk "function abs(v) { return v < 0 ? -v : v }
        function max(p, q) { return p > q ? p : q }
        function min(p, q) { return p < q ? p : q }
        BEGIN { exit (($*) ? 0 : 1) }"
}

# HT_FILE_MATCH GLOB: true when something in GLOB's directory matches GLOB's last component.
HT_FILE_MATCH() {
    local pattern directory
    pattern=$(basename -- "$1")
    directory=$(dirname -- "$1")
    [ -n "$(find "$directory" -mindepth 1 -maxdepth 1 -name "$pattern" -print -quit 2>/dev/null)" ]
}

# HT_PATH_PREFIX (-d | -f | SOURCE) PREFIX: the first free PREFIX<n>, made a directory (-d), an
# empty file (-f) or SOURCE's new name; prints the name.
HT_PATH_PREFIX() {
    local what="$1" prefix="$2" n=0
    while [ -e "${prefix}${n}" ]; do n=$((n + 1)); done
    case "$what" in
        -d) mkdir -- "${prefix}${n}" || return ;;
        -f) : > "${prefix}${n}" || return ;;
        *) mv -- "$what" "${prefix}${n}" || return ;;
    esac
    echo "${prefix}${n}"
}

# HT_SPLIT_FIELDS SEPARATOR N STRING: the N-th field (from 1) of STRING.
HT_SPLIT_FIELDS() {
    awk -v sep="$1" -v n="$2" '{ split($0, part, sep); print part[n] }' <<< "$3"
}

# HT_TEMPLATE TEMPLATE OUTPUT: OUTPUT is TEMPLATE with its $VARIABLES and $(commands) expanded.
HT_TEMPLATE() {
    if [ ! -e "$1" ]; then
        echo "HT_TEMPLATE: Template file missing."
        exit 1
    fi
    local body
    body=$(cat -- "$1")
    eval "cat <<__HT_TEMPLATE_END__
$body
__HT_TEMPLATE_END__" > "$2"
}

HT_TASK_LOG() { echo "$1" >> ht.log; }
HT_TASK_SET_PRIORITY() { echo "$1" > ht.priority; }

# ---------------------------------------------------------------- the step protocol
# HT_TASK_INIT "$@": STEP is the step to run (ht.nextstep, when a step left one, wins), interrupted
# atomic sections are completed, and ht.vars is sourced.
HT_TASK_INIT() {
    STEP="$1"
    HT_TASK_ATOMIC_EXEC
    if [ -e ht.nextstep ]; then
        STEP=$(cat ht.nextstep)
    fi
    case "$STEP" in
        ht_finished) HT_TASK_FINISHED ;;
        ht_broken) HT_TASK_BROKEN ;;
    esac
    if [ -e ht.vars ]; then
        # shellcheck disable=SC1091
        . ./ht.vars
    fi
    if [ -z "$HT_NBR_NODES" ]; then
        HT_NBR_NODES=$(HT_FIND_NBR_NODES)
        export HT_NBR_NODES
    fi
}

HT_TASK_NEXT() { echo "$1" > ht.nextstep; exit "$HT_V1_EXIT_NEXT"; }
HT_TASK_SUBTASKS() { echo "$1" > ht.nextstep; exit "$HT_V1_EXIT_SUBTASKS"; }
HT_TASK_FINISHED() { echo ht_finished > ht.nextstep; exit "$HT_V1_EXIT_FINISHED"; }
HT_TASK_BROKEN() { echo ht_broken > ht.nextstep; exit "$HT_V1_EXIT_BROKEN"; }

# HT_TASK_STORE_VAR NAME VALUE: NAME=VALUE in ht.vars (replacing an earlier NAME), read by HT_TASK_INIT.
HT_TASK_STORE_VAR() {
    {
        if [ -e ht.vars ]; then
            grep -v -E "^ *$1 *=" ht.vars
        fi
        echo "$1=$2"
    } > ht.tmp.vars
    mv ht.tmp.vars ht.vars
}

HT_TASK_CLEANUP() {
    rm -f ht.vars ht.controlled.msgs
    rm -rf ht.tmp.*
}

# Every regular file not named ht.* is bzip2-compressed (and ht.RUNLOG).
HT_TASK_COMPRESS() {
    find . -type f ! -name 'ht.*' ! -name '*.bz2' -exec bzip2 -- {} +
    if [ -e ht.RUNLOG ]; then bzip2 -- ht.RUNLOG; fi
}

HT_TASK_UNCOMPRESS() { find . -type f -name '*.bz2' -exec bunzip2 -- {} +; }

# ---------------------------------------------------------------- atomic sections
# A section collects its results in ht.tmp.atomic.<n> (the current directory while it is open,
# the run directory being ..). Ending it renames that directory ht.atomic.<n>: the one step that
# commits it. HT_TASK_ATOMIC_EXEC then moves its files into place; an interrupted section is
# completed by the next HT_TASK_INIT (and by the runner before a step), an unended one discarded.
HT_TASK_ATOMIC_SECTION_START() {
    local opened
    opened=$(HT_PATH_PREFIX -d ht.tmp.atomic.) || exit 1
    cd "$opened" || exit 1
}

HT_TASK_ATOMIC_SECTION_END() {
    local section
    section=$(basename -- "$(pwd -P)")
    cd .. || exit 1
    HT_PATH_PREFIX "$section" ht.atomic. > /dev/null
}

__ht_atomic_end() {
    HT_TASK_ATOMIC_SECTION_END
    HT_TASK_ATOMIC_EXEC
}

HT_TASK_ATOMIC_SECTION_END_NEXT() { echo "$1" > ht.nextstep; __ht_atomic_end; HT_TASK_NEXT "$1"; }
HT_TASK_ATOMIC_SECTION_END_SUBTASKS() { echo "$1" > ht.nextstep; __ht_atomic_end; HT_TASK_SUBTASKS "$1"; }
HT_TASK_ATOMIC_SECTION_END_FINISHED() { echo ht_finished > ht.nextstep; __ht_atomic_end; HT_TASK_FINISHED; }
HT_TASK_ATOMIC_SECTION_END_BROKEN() { echo ht_broken > ht.nextstep; __ht_atomic_end; HT_TASK_BROKEN; }

# HT_TASK_ATOMIC_MV FROM TO (inside a section): when the section commits, FROM (in the run
# directory) is renamed TO.
HT_TASK_ATOMIC_MV() { echo "$2" > "ht.atommv.$1"; }

HT_TASK_ATOMIC_EXEC() {
    local section order entry name
    rm -rf ht.tmp.atomic.*
    for section in $(find . -mindepth 1 -maxdepth 1 -type d -name 'ht.atomic.*' -printf '%f\n' 2>/dev/null \
        | sort -t. -k3,3n); do
        for order in "$section"/ht.atommv.*; do
            [ -e "$order" ] || continue
            name=${order#"$section"/ht.atommv.}
            if [ -e "$name" ]; then
                mv -f -- "$name" "$(cat -- "$order")"
            fi
            rm -f -- "$order"
        done
        for entry in "$section"/* "$section"/.[!.]*; do
            [ -e "$entry" ] || continue
            rm -rf -- "./$(basename -- "$entry")"
            mv -- "$entry" .
        done
        rmdir -- "$section"
    done
    # A section may have moved files to ht.tmp.atomic.* to delete them.
    rm -rf ht.tmp.atomic.*
}

# ---------------------------------------------------------------- the run log
__ht_runlog_base() {
    if [ -e ht.RUNLOG ]; then cat ht.RUNLOG; elif [ -e ../ht.RUNLOG ]; then cat ../ht.RUNLOG; fi
}

HT_TASK_ATOMIC_RUNLOG_APPEND() {
    local file rule="====================================================="
    {
        __ht_runlog_base
        for file in "$@"; do
            [ -e "$file" ] || continue
            printf '%s\n%s\n%s\n' "$rule" "$(basename -- "$file")" "$rule"
            cat -- "$file"
            printf '%s\n\n' "$rule"
        done
    } > ht.tmp.RUNLOG
    mv ht.tmp.RUNLOG ht.RUNLOG
}

HT_TASK_ATOMIC_RUNLOG_HEADLINE() {
    local rule="*****************************************************"
    { __ht_runlog_base; printf '%s\n%s: %s\n%s\n\n' "$rule" "$(date -R)" "$*" "$rule"; } > ht.tmp.RUNLOG
    mv ht.tmp.RUNLOG ht.RUNLOG
}

HT_TASK_ATOMIC_RUNLOG_NOTE() {
    { __ht_runlog_base; echo "$*"; } > ht.tmp.RUNLOG
    mv ht.tmp.RUNLOG ht.RUNLOG
}

# ---------------------------------------------------------------- subtasks
# HT_TASK_CREATE CALLBACK [LOCATION [STEP [TASKSET [PRIO]]]]: one subtask per line of stdin (its
# first word is the subtask id), as ht.task.<taskset>.<id>.<step>.0.none.<prio>.waitstart below
# LOCATION; CALLBACK runs in it with the line's words as arguments (without one, the line is
# written to task_data). A subtask that exists already is left alone. The step then ends with
# HT_TASK_SUBTASKS (exit 3); the runner spawns each subtask as a job and gathers them.
HT_TASK_CREATE() {
    local callback="$1" location="${2:-./}" step="${3:-start}" taskset="${4:-any}" prio="${5:-3}"
    local line taskid name existing
    while read -r line; do
        taskid=$(awk '{ print $1 }' <<< "$line")
        [ -n "$taskid" ] || continue
        existing=$(find "$location" -mindepth 1 -maxdepth 1 -name "ht.task.${taskset}.${taskid}.*" -print -quit)
        [ -z "$existing" ] || continue
        name="ht.task.${taskset}.${taskid}.${step}.0.none.${prio}.waitstart"
        rm -rf -- "$location/ht.tmp.${name#ht.}"
        mkdir -p -- "$location/ht.tmp.${name#ht.}" || exit 1
        (
            cd "$location/ht.tmp.${name#ht.}" || exit 1
            if [ -n "$callback" ]; then
                eval "$callback $line"
            else
                echo "$line" > task_data
            fi
        )
        mv -- "$location/ht.tmp.${name#ht.}" "$location/$name" || exit 1
    done
}

# ---------------------------------------------------------------- supervised runs
# HT_TASK_RUN_CONTROLLED TIMEOUT [STDOUTCHECKER] [CHECKER...] -- COMMAND ARGS...
# Runs COMMAND in its own session with its output in stdout.out. Each checker runs as
# `CHECKER MSGFILE PID` beside it (the stdout checker reading the output on stdin); a checker
# that exits 2 stops the run. All checkers' messages end up in ht.controlled.msgs. Returns the
# command's status, 2 when a checker stopped it, 99 when TIMEOUT seconds passed.
HT_TASK_RUN_CONTROLLED() {
    local timeout="$1" stdoutchecker="" checkers=() arg
    shift
    if [ "${1:-}" != "--" ]; then stdoutchecker="$1"; shift; fi
    while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do checkers+=("$1"); shift; done
    if [ "${1:-}" != "--" ]; then
        echo "HT_TASK_RUN_CONTROLLED need one argument named '--' to separate CHECKERS and command to run."
        return 1
    fi
    shift
    rm -f ht.tmp.msgs.* ht.tmp.controlled.stop
    : > stdout.out
    setsid "$@" > stdout.out 2>&1 &
    local pid=$! watcher=() index=0 stopped=0 status
    if [ -n "$stdoutchecker" ]; then
        ( tail -n +1 --pid="$pid" -f stdout.out | "$stdoutchecker" ht.tmp.msgs.stdout "$pid"
          if [ "${PIPESTATUS[1]}" = 2 ]; then : > ht.tmp.controlled.stop; kill -TERM -- "-$pid" 2>/dev/null; fi ) &
        watcher+=("$!")
    fi
    for arg in "${checkers[@]}"; do
        index=$((index + 1))
        ( "$arg" "ht.tmp.msgs.$index" "$pid"
          if [ "$?" = 2 ]; then : > ht.tmp.controlled.stop; kill -TERM -- "-$pid" 2>/dev/null; fi ) &
        watcher+=("$!")
    done
    # The watchdog: its sleep is killed with it, and it holds none of the caller's output open.
    ( trap 'kill "$nap" 2>/dev/null; exit 0' TERM
      sleep "$timeout" & nap=$!; wait "$nap"
      : > ht.tmp.controlled.timeout; kill -TERM -- "-$pid" 2>/dev/null
      sleep 10 & nap=$!; wait "$nap"; kill -KILL -- "-$pid" 2>/dev/null ) > /dev/null 2>&1 &
    local clock=$!
    wait "$pid"
    status=$?
    kill "$clock" 2>/dev/null
    wait "$clock" 2>/dev/null
    kill -TERM -- "-$pid" 2>/dev/null
    for arg in "${watcher[@]}"; do wait "$arg" 2>/dev/null; done
    if [ -e ht.tmp.controlled.timeout ]; then
        echo "TIMEOUT" > ht.tmp.msgs.timeout
        status=99
    elif [ -e ht.tmp.controlled.stop ]; then
        stopped=1
        status=2
    fi
    find . -maxdepth 1 -name 'ht.tmp.msgs.*' -exec cat {} + > ht.controlled.msgs 2>/dev/null
    rm -f ht.tmp.msgs.* ht.tmp.controlled.stop ht.tmp.controlled.timeout
    [ "$stopped" = 1 ] && echo "HT_TASK_RUN_CONTROLLED: Run was STOPPED." >&2
    return "$status"
}

# HT_TASK_FOLLOW_FILE FILE [PID]: print FILE as it grows, until PID (when given) has exited.
HT_TASK_FOLLOW_FILE() {
    while [ ! -e "$1" ]; do
        if [ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null; then return 0; fi
        sleep 1
    done
    if [ -n "${2:-}" ]; then tail -n +1 --pid="$2" -f "$1"; else tail -n +1 -f "$1"; fi
}

# The number of nodes an `mpirun` reaches (1 without one).
HT_FIND_NBR_NODES() {
    local count
    count=$(mpirun -q echo x 2>/dev/null | grep -c x)
    if [ -n "$count" ] && [ "$count" -gt 1 ] 2>/dev/null; then echo "$count"; else echo 1; fi
}
