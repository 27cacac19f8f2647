"""What a Slurm site lets this user submit: argv builders and pure parsers of its reports.

``read_submit_limits`` runs, through the transport, ``id -un``, ``scontrol show
partition --oneliner`` (state and ``MaxTime`` of the partition the managers go
to), ``squeue -h -r -u USER -o %i`` (the user's queued jobs, one line per array
task) and, where accounting is configured, ``sacctmgr --parsable2 show assoc``,
``show user`` (the default account) and ``show qos``: the user's association and
QOS limits (``MaxSubmit``, ``MaxJobs``, ``MaxWall``); then ``show assoc
account=A`` for the account association's own ``GrpSubmit``, and, when an
account-level submit limit applies (that one, or a QOS's ``MaxSubmitPA``),
``squeue -h -r -A A -o %i``: the account's queued jobs, every user's, which
such a limit counts. A parent account's ``GrpSubmit`` and a QOS's own
``GrpSubmit`` are not read (their usage spans accounts this user cannot list).
The QOS is ``slurm.qos`` when set, else the association's default. Without slurmdbd
``sacctmgr`` refuses ("not running a supported accounting_storage plugin"):
that, and any report that cannot be read, becomes a note, never an error, since
``sbatch`` still enforces every limit itself. The limits are conservative where
the reports are ambiguous: every queued job of the user is counted, and the
smallest limit among the association rows that may apply is taken. The rule
that turns them into a count is ``domain.submit_limits``. Spec: 000 "Running on
a remote".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs

from ...domain.submit_limits import SubmitLimits
from ...ports import CommandResult, RemoteTransport

T = TypeVar("T")

#: What sacctmgr prints when slurmctld keeps no accounting database.
NO_ACCOUNTING = "not running a supported accounting_storage plugin"
#: Association fields read; sacctmgr prints ``DefaultQOS`` as ``Def QOS``.
ASSOC_FORMAT = "Account,Partition,QOS,DefaultQOS,MaxSubmit,MaxJobs,MaxWall,GrpSubmit,GrpJobs"
QOS_FORMAT = "Name,MaxSubmitPU,MaxSubmitPA,MaxJobsPU,MaxJobsPA,MaxWall"
#: The account association's fields (its row is the one without a user).
ACCOUNT_FORMAT = "Account,User,Partition,GrpSubmit,GrpJobs"
_UNLIMITED = frozenset({"", "UNLIMITED", "INFINITE", "NONE", "N/A", "(NULL)"})
_DURATION = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?")
_ARRAY = re.compile(r"\d+_\[([0-9,\-%]+)\]")


@attrs.frozen
class Partition:
    """One line of ``scontrol show partition --oneliner``."""

    name: str
    state: str
    default: bool
    max_time_seconds: int | None
    qos: str


# -- argv ----------------------------------------------------------------------------------------
def user_argv() -> list[str]:
    return ["id", "-un"]


def partitions_argv() -> list[str]:
    return ["scontrol", "show", "partition", "--oneliner"]


def queued_argv(user: str) -> list[str]:
    return ["squeue", "-h", "-r", "-u", user, "-o", "%i"]


def account_queued_argv(account: str) -> list[str]:
    return ["squeue", "-h", "-r", "-A", account, "-o", "%i"]


def account_assoc_argv(account: str) -> list[str]:
    return ["sacctmgr", "--parsable2", "show", "assoc", f"account={account}", f"format={ACCOUNT_FORMAT}"]


def assoc_argv(user: str) -> list[str]:
    return ["sacctmgr", "--parsable2", "show", "assoc", f"user={user}", f"format={ASSOC_FORMAT}"]


def default_account_argv(user: str) -> list[str]:
    return ["sacctmgr", "--parsable2", "show", "user", f"name={user}", "format=DefaultAccount"]


def qos_argv() -> list[str]:
    return ["sacctmgr", "--parsable2", "show", "qos", f"format={QOS_FORMAT}"]


# -- pure parsers --------------------------------------------------------------------------------
def parse_duration(text: str) -> int | None:
    """Seconds of a Slurm time (``M``, ``M:S``, ``H:M:S``, ``D-H``, ``D-H:M``, ``D-H:M:S``); ``None``: unlimited.

    Raises ``ValueError`` for anything else.
    """
    value = text.strip()
    if value.upper() in _UNLIMITED:
        return None
    match = _DURATION.fullmatch(value)
    if not match:
        raise ValueError(f"not a Slurm time: {text!r}")
    days, first, second, third = match.groups()
    numbers = [int(part) for part in (first, second, third) if part is not None]
    if days is not None:  # D-H, D-H:M, D-H:M:S
        hours, minutes, seconds = (numbers + [0, 0])[:3]
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(numbers) == 1:  # minutes
        return numbers[0] * 60
    if len(numbers) == 2:  # minutes:seconds
        return numbers[0] * 60 + numbers[1]
    return (numbers[0] * 60 + numbers[1]) * 60 + numbers[2]


def job_wall_seconds(settings: Mapping[str, Any]) -> int | None:
    """The time limit ``slurm.time_limit`` asks for (an integer is minutes); ``None`` when unset or unlimited."""
    value = settings.get("slurm.time_limit")
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * 60
    try:
        return parse_duration(str(value))
    except ValueError:
        return None  # compose_script refuses it, naming the setting


def parse_partitions(stdout: str) -> list[Partition]:
    """Every partition of ``scontrol show partition --oneliner`` (one ``Key=Value ...`` line each)."""
    found: list[Partition] = []
    for line in stdout.splitlines():
        fields = dict(word.split("=", 1) for word in line.split() if "=" in word)
        name = fields.get("PartitionName")
        if not name:
            continue
        try:
            max_time = parse_duration(fields.get("MaxTime", ""))
        except ValueError:
            max_time = None
        qos = fields.get("QoS", "")
        found.append(Partition(name, fields.get("State", "").upper(), fields.get("Default") == "YES", max_time,
                               "" if qos.upper() in _UNLIMITED else qos))
    return found


def parse_queued(stdout: str) -> int:
    """How many jobs ``squeue -h -r -o %i`` listed; an array still printed as ``ID_[1-3,5]`` counts each task."""
    count = 0
    for line in stdout.splitlines():
        word = line.strip()
        if not word:
            continue
        match = _ARRAY.fullmatch(word)
        count += _array_tasks(match[1]) if match else 1
    return count


def _array_tasks(spec: str) -> int:
    tasks = 0
    for part in spec.split("%", 1)[0].split(","):
        low, _, high = part.partition("-")
        if low.isdigit():
            tasks += int(high) - int(low) + 1 if high.isdigit() else 1
    return tasks


def parse_parsable(stdout: str) -> list[dict[str, str]]:
    """Rows of ``sacctmgr --parsable2`` (or ``-p``, with its closing ``|``) output with its header line.

    Keys are the header's words lower-cased without spaces (``Def QOS`` is ``defqos``).
    """
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return []
    trailing = lines[0].endswith("|")
    header = [_key(word) for word in (lines[0][:-1] if trailing else lines[0]).split("|")]
    rows: list[dict[str, str]] = []
    for line in lines[1:]:
        values = (line[:-1] if trailing and line.endswith("|") else line).split("|")
        rows.append({key: values[index].strip() if index < len(values) else "" for index, key in enumerate(header)})
    return rows


def _key(word: str) -> str:
    return word.strip().lower().replace(" ", "")


def _count(text: str) -> int | None:
    """A limit from a sacctmgr field: ``None`` when empty (not set)."""
    value = text.strip()
    return int(value) if value.isdigit() else None


def _duration(text: str) -> int | None:
    try:
        return parse_duration(text)
    except ValueError:
        return None


def applicable_associations(
    rows: Sequence[Mapping[str, str]], account: str, partitions: Sequence[str]
) -> list[Mapping[str, str]]:
    """The association rows a job of ``account`` on ``partitions`` falls under.

    A row for one of the partitions wins over the account's row without a partition.
    An empty ``account`` (unknown) keeps every account's rows: the smallest limit then applies.
    """
    mine = [row for row in rows if not account or row.get("account", "").lower() == account.lower()]
    wanted = {name.lower() for name in partitions}
    specific = [row for row in mine if row.get("partition", "").lower() in wanted]
    return specific or [row for row in mine if not row.get("partition")]


def job_qos(row: Mapping[str, str], requested: str = "") -> str:
    """The QOS a job of this association gets: ``requested`` (``--qos``), else its default, else ``normal``.

    ``normal`` only where the association allows it (or lists no QOS); a requested
    QOS the association does not allow is still its QOS: sbatch refuses that job.
    """
    if requested:
        return requested
    default = row.get("defqos") or row.get("defaultqos") or ""
    if default:
        return default
    allowed = [name for name in row.get("qos", "").split(",") if name]
    return "normal" if not allowed or "normal" in allowed else (allowed[0] if len(allowed) == 1 else "")


@attrs.define
class _Smallest:
    """The smallest of several limits, with the name of the one that set it."""

    value: int | None = None
    source: str = ""

    def offer(self, value: int | None, source: str) -> None:
        if value is not None and (self.value is None or value < self.value):
            self.value, self.source = value, source


def limits_from_reports(
    *,
    partitions: Sequence[Partition],
    wanted: Sequence[str],
    queued: int,
    associations: Sequence[Mapping[str, str]] | None,
    account: str,
    qos_rows: Sequence[Mapping[str, str]] | None,
    job_wall: int | None,
    account_rows: Sequence[Mapping[str, str]] | None = None,
    qos: str = "",
    notes: Sequence[str] = (),
) -> SubmitLimits:
    """Fold the parsed reports into one :class:`SubmitLimits` (pure).

    ``wanted`` are the partitions the managers go to (empty: the default one);
    ``associations``/``qos_rows``/``account_rows`` (``show assoc account=A``) are
    ``None`` when accounting reported nothing; ``qos`` is the QOS asked for
    (``slurm.qos``), empty for the association's default. The account's queued
    jobs are counted afterwards, only when a per-account limit is found.
    """
    notes = list(notes)
    chosen = [p for p in partitions if p.name in wanted] if wanted else [p for p in partitions if p.default]
    missing = [name for name in wanted if name not in {p.name for p in partitions}]
    if missing and partitions:
        notes.append(f"scontrol lists no partition {', '.join(missing)}")
    names = [p.name for p in chosen] or list(wanted)
    states = {p.state for p in chosen}
    submit, account_submit, jobs, wall = _Smallest(), _Smallest(), _Smallest(), _Smallest()
    # Several partitions: the job may go to the one allowing the longest time.
    if chosen and all(p.max_time_seconds is not None for p in chosen):
        longest = max(chosen, key=lambda p: p.max_time_seconds or 0)
        wall.offer(longest.max_time_seconds, f"partition {longest.name}'s MaxTime")
    qos_names: set[str] = {p.qos for p in chosen if p.qos}
    if associations is not None:
        for row in applicable_associations(associations, account, names):
            where = f"account {row.get('account', '?')}" + (f", partition {row['partition']}" if row.get("partition")
                                                              else "")
            submit.offer(_count(row.get("maxsubmit", "")), f"the association's MaxSubmitJobs ({where})")
            # A user association's Grp limit counts that association's jobs, all of them this user's:
            # held against every queued job of the user, it errs low.
            submit.offer(_count(row.get("grpsubmit", "")), f"the association's GrpSubmitJobs ({where})")
            jobs.offer(_count(row.get("maxjobs", "")), f"the association's MaxJobs ({where})")
            jobs.offer(_count(row.get("grpjobs", "")), f"the association's GrpJobs ({where})")
            wall.offer(_duration(row.get("maxwall", "")), f"the association's MaxWall ({where})")
            if job_qos(row, qos):
                qos_names.add(job_qos(row, qos))
    if qos:
        qos_names.add(qos)
    if account_rows is not None:
        for row in account_rows:  # the account's own association: the row without a user
            if row.get("user") or (account and row.get("account", "").lower() != account.lower()):
                continue
            where = f"account {row.get('account', '?')}" + (f", partition {row['partition']}" if row.get("partition")
                                                              else "")
            account_submit.offer(_count(row.get("grpsubmit", "")), f"the account's GrpSubmitJobs ({where})")
            jobs.offer(_count(row.get("grpjobs", "")), f"the account's GrpJobs ({where})")
    if qos_rows is not None:
        for row in qos_rows:
            name = row.get("name", "")
            if name in qos_names:
                submit.offer(_count(row.get("maxsubmitpu", "")), f"QOS {name}'s MaxSubmitJobsPerUser")
                # Per account: the account's other users' jobs count too.
                account_submit.offer(_count(row.get("maxsubmitpa", "")), f"QOS {name}'s MaxSubmitJobsPerAccount")
                jobs.offer(_count(row.get("maxjobspu", "")), f"QOS {name}'s MaxJobsPerUser")
                jobs.offer(_count(row.get("maxjobspa", "")), f"QOS {name}'s MaxJobsPerAccount")
                wall.offer(_duration(row.get("maxwall", "")), f"QOS {name}'s MaxWall")
    return SubmitLimits(
        max_submit=submit.value,
        max_submit_source=submit.source,
        max_jobs=jobs.value,
        max_jobs_source=jobs.source,
        queued=queued,
        account=account,
        account_max_submit=account_submit.value,
        account_max_submit_source=account_submit.source,
        partition=",".join(names),
        # Several partitions are closed only when all are; one open one takes the jobs.
        partition_state=states.pop() if len(states) == 1 else "",
        max_wall_seconds=wall.value,
        max_wall_source=wall.source,
        job_wall_seconds=job_wall,
        notes=tuple(notes),
        unknown_partitions=tuple(missing) if partitions else (),
        site_partitions=tuple(p.name for p in partitions),
        partition_setting="slurm.partition",
    )


# -- reading them through a transport -------------------------------------------------------------
def read_submit_limits(transport: RemoteTransport, settings: Mapping[str, Any], *,
                       timeout: float | None) -> SubmitLimits:
    """Ask the site (through ``transport``) for the limits that apply to managers of these settings."""
    notes: list[str] = []

    def run(argv: list[str]) -> CommandResult:
        return transport.run(argv, timeout=timeout)

    def ask(argv: list[str], parse: Callable[[str], T], unread: str) -> T | None:
        """The parsed answer, or ``None`` after noting ``unread`` and what the command said."""
        result = run(argv)
        if result.returncode == 0:
            return parse(result.stdout)
        notes.append(f"{unread} ({argv[0]}: {_first_line(result)})")
        return None

    who = run(user_argv())
    user = who.stdout.strip() if who.returncode == 0 else ""
    wanted = [name for name in str(settings.get("slurm.partition") or "").split(",") if name]
    partitions = ask(partitions_argv(), parse_partitions, "partition state not read") or []
    queued = 0
    if user:
        queued = ask(queued_argv(user), parse_queued, "queued jobs not counted") or 0
    else:
        notes.append(f"user name not read (id -un: {_first_line(who)}): no association limits read")
    associations: list[dict[str, str]] | None = None
    qos_rows: list[dict[str, str]] | None = None
    account_rows: list[dict[str, str]] | None = None
    account = str(settings.get("slurm.account") or "")
    if user:
        assoc = run(assoc_argv(user))
        if assoc.returncode == 0:
            associations = parse_parsable(assoc.stdout)
            if not account:
                shown = run(default_account_argv(user))
                rows = parse_parsable(shown.stdout) if shown.returncode == 0 else []
                # sacctmgr heads the DefaultAccount column "Def Acct".
                account = (rows[0].get("defacct") or rows[0].get("defaultaccount") or "") if rows else ""
            qos_rows = ask(qos_argv(), parse_parsable, "QOS limits not read")
            if account:
                account_rows = ask(account_assoc_argv(account), parse_parsable, "account limits not read")
            else:
                notes.append("the account is not known, so no account limits read")
        elif NO_ACCOUNTING in (assoc.stderr + assoc.stdout):
            notes.append("the site keeps no accounting (sacctmgr: no slurmdbd), so no association or QOS limits")
        else:
            notes.append(f"association limits not read (sacctmgr: {_first_line(assoc)})")
    limits = limits_from_reports(
        partitions=partitions, wanted=wanted, queued=queued, associations=associations, account=account,
        qos_rows=qos_rows, account_rows=account_rows, qos=str(settings.get("slurm.qos") or ""),
        job_wall=job_wall_seconds(settings), notes=notes,
    )
    if limits.account_max_submit is None or not account:
        return limits
    # A per-account limit counts every user's jobs of the account, not only this user's.
    account_queued = ask(account_queued_argv(account), parse_queued, "the account's queued jobs not counted")
    if account_queued is None:
        return attrs.evolve(limits, notes=(*limits.notes, notes[-1]))
    return attrs.evolve(limits, account_queued=account_queued)


def _first_line(result: CommandResult) -> str:
    if result.returncode == 127 and not result.stdout.strip():
        return "not found"
    for text in (result.stderr, result.stdout):
        for line in text.splitlines():
            if line.strip():
                return line.strip()
    return f"exit status {result.returncode}"
