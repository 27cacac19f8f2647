# shellcheck shell=bash
# httk-vasp.sh: the VASP functions of the Bash runner SDK of httk-workflow.
#
# Source it after httk-workflow.sh, from the same directory:
#
#     source "$HTTK_WORKFLOW_SHELL_LIB"
#     source "${HTTK_WORKFLOW_SHELL_LIB%/*}/httk-vasp.sh"
#
# Each function is a thin call into httk.workflow.shell_vasp, which calls the Python
# helper of httk.workflow.vasp named beside it, on the current directory. The guide is
# docs/sdks/native_bash_api.md, "VASP".
#
# Statuses: 0/1/2 as every function of httk-workflow.sh. httk_vasp_run reports the class
# of the run instead: 0 converged; 20 VASP ended normally but the result is not converged
# and nothing was diagnosed; 21 a diagnosed VASP error (the run report's "diagnosis");
# 22 a nonzero exit without a diagnosis; 124 a timeout; 125 stopped, or could not start;
# 3 a workdir VASP cannot use (nothing is run or written). httk_vasp_validate_workdir
# returns 3 for the same workdirs.

if ! declare -F _httk_call >/dev/null; then
    echo 'httk-vasp.sh: source httk-workflow.sh first: source "$HTTK_WORKFLOW_SHELL_LIB"' >&2
    return 2
fi

# httk_vasp_run [--workdir DIR] [--timeout S] [--inactivity S] [--checker CMD]... [--checker-argv JSON]...
#     [--stdout vasp.out] [--stderr vasp.err] [-- ARGV...]: run_vasp (ARGV, else $HTTK_VASP_COMMAND).
httk_vasp_run() { _httk_call vasp_run "$@" || return; }
# httk_vasp_validate_workdir [DIR]: validate_vasp_workdir; prints the absolute directory.
httk_vasp_validate_workdir() { _httk_call vasp_validate_workdir "$@" || return; }
# httk_vasp_report [FIELD] [--path FILE]: read_vasp_run_report; no report yet is status 1.
httk_vasp_report() { _httk_call vasp_report "$@" || return; }
# httk_vasp_kpoints (N1 N2 N3 | --density L [--poscar F] [--rounding R]) [--centering C] [--comment T] [--output F]:
#     write_automatic_kpoints, from DEFAULT_KPOINT_CENTERING (Monkhorst-Pack) unless --centering says otherwise.
httk_vasp_kpoints() { _httk_call vasp_kpoints "$@" || return; }
# httk_vasp_incar_set TAG=VALUE... [--unset TAG]... [--path INCAR]: update_incar.
httk_vasp_incar_set() { _httk_call vasp_incar_set "$@" || return; }
# httk_vasp_incar_get [TAG] [--path INCAR]: read_incar; an unset tag is status 1.
httk_vasp_incar_get() { _httk_call vasp_incar_get "$@" || return; }
