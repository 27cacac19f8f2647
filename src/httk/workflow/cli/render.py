"""Output and error conventions shared by every command.

``--json`` prints exactly one canonical JSON value (sorted keys, compact) and a
newline, so a script can parse it; text output is for people. An anticipated
error prints one line ``error: ...`` on stderr and exits 2; an error in our own
code still shows its traceback, because hiding it would hide a bug.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

import click

from .. import codec

EXIT_OK = 0
EXIT_NEEDS_OPERATOR = 1
EXIT_REFUSED = 2


def anticipated() -> tuple[type[BaseException], ...]:
    """Errors a user can cause and fix; anything else is a bug and keeps its traceback.

    Imported when an error is classified, not with this module: the modules that define
    them (the debugger and its engine, submission, requests) would otherwise be part of
    every command's start-up. Also importable as ``ANTICIPATED``.
    """
    from ..domain.model import ValidationError
    from ..operations.debug import DebugError
    from ..operations.inspection import SelectorError
    from ..operations.registry import RegistryError
    from ..operations.remotes import RemoteError
    from ..operations.requests import RequestError
    from ..operations.submission import SubmissionError
    from ..ports import BatchSystemError, TransportError
    from ..store.policy import PolicyError
    from ..store.runners import RunnerStoreError
    from ..store.store import JobDamage
    from ..store.workspaces import WorkspaceError

    return (
        WorkspaceError,
        SubmissionError,
        RunnerStoreError,
        PolicyError,
        codec.DocumentError,
        ValidationError,
        JobDamage,
        SelectorError,
        RequestError,
        DebugError,
        RegistryError,
        RemoteError,
        TransportError,
        BatchSystemError,
        OSError,
    )


def __getattr__(name: str) -> Any:
    if name == "ANTICIPATED":
        return anticipated()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

# ``\b`` keeps click from re-wrapping the lines of an epilog.
EXIT_CODES = "\b\nExit status:\n  0  success\n  2  refused or bad input (one 'error: ...' line on stderr)"


def exit_codes_damage(what: str) -> str:
    """The epilog of an inspection command that exits 1 when it reported ``what`` as damaged."""
    return (
        f"\b\nExit status:\n  0  success\n  1  a damaged {what} was reported: see 'workspace fsck'\n"
        "  2  refused or bad input (one 'error: ...' line on stderr)"
    )


EXIT_CODES_RUN = (
    "\b\nExit status:\n  0  the manager exited idle or drained cleanly\n"
    "  *  otherwise the manager's own exit status\n"
    "  2  refused or bad input before the manager started (one 'error: ...' line on stderr)"
)


class CliError(click.ClickException):
    """A refusal rendered as one ``error: ...`` line on stderr with exit status 2."""

    exit_code = EXIT_REFUSED

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def refuse(message: str) -> NoReturn:
    raise CliError(message)


def _one_line(error: BaseException) -> str:
    if isinstance(error, OSError) and error.strerror:
        where = f": {error.filename}" if error.filename else ""
        return f"{error.strerror}{where}"
    return " ".join(str(error).split()) or type(error).__name__


class Group(click.Group):
    """A group that turns anticipated errors of its commands into one ``error:`` line and exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # A reader such as `head` went away: not an error of ours. Point stdout at
            # /dev/null so the interpreter's final flush does not complain again.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            ctx.exit(0)
        except Exception as error:
            if not isinstance(error, anticipated()):
                raise
            raise CliError(_one_line(error)) from error


def emit_json(value: Any) -> None:
    """Print one canonical JSON value."""
    click.echo(codec.dumps(value))


def value_text(value: Any) -> str:
    """A JSON value as it is shown in text output (strings bare, the rest as JSON)."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def timestamp(value: Any) -> str:
    """Epoch seconds as UTC ISO 8601; ``-`` when absent, and the number itself when no date can hold it."""
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(value, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):  # a frame's created_at of 1e308: shown, never a traceback
        return f"{value!r} (out of range)"
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def emit_pairs(pairs: Iterable[tuple[str, Any]], indent: str = "") -> None:
    """``key: value`` lines, keys aligned."""
    items = list(pairs)
    width = max((len(key) for key, _ in items), default=0)
    for key, value in items:
        click.echo(f"{indent}{key.ljust(width)}  {value_text(value) if value is not None else '-'}")


def emit_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain aligned table with a header line."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(header), *(len(row[i]) for row in cells)]) for i, header in enumerate(headers)]
    click.echo("  ".join(header.ljust(width) for header, width in zip(headers, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def flatten(value: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Nested objects as dotted ``(name, value)`` pairs; an empty object stays one pair."""
    out: list[tuple[str, Any]] = []
    for key in sorted(value):
        item = value[key]
        name = f"{prefix}{key}"
        if isinstance(item, dict) and item:
            out.extend(flatten(item, f"{name}."))
        else:
            out.append((name, item))
    return out
