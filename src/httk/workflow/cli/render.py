"""Output and error conventions shared by every command.

``--json`` prints exactly one canonical JSON value (sorted keys, compact) and a
newline, so a script can parse it; text output is for people. An anticipated
error prints one line ``error: ...`` on stderr and exits 2, and so does a usage
error of click's (an unknown option, a bad value), instead of click's usage block;
an error in our own code still shows its traceback, because hiding it would hide a bug.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NoReturn

import click
from click.exceptions import NoArgsIsHelpError

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
#: ``job submit``: a batch can fail after some of its jobs were made, which exit 2 would deny.
EXIT_CODES_SUBMIT = (
    "\b\nExit status:\n  0  success\n"
    "  1  a batch failed part way: the jobs made are printed, the error line says which were not\n"
    "  2  refused or bad input (one 'error: ...' line on stderr); nothing was written"
)


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

#: ``--log-level`` of every command that starts a manager (``run``, ``manager run``, ``job debug``).
#: Unset: the console shows warnings (``job debug``: errors only) and the file the info-level record;
#: ``--log-level LEVEL`` raises or lowers both to exactly LEVEL (spec 000 "Run").
LOG_LEVELS = ("debug", "info", "warning", "error")


def log_level_option(help_text: str) -> Any:
    """The one ``--log-level`` option, with the shared choices; unset means the command's default."""
    return click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), help=help_text)


def log_levels(requested: str | None, *, console: str = "warning") -> dict[str, str]:
    """``ManagerConfig`` keyword arguments for ``--log-level``: the console and the file level."""
    if requested is None:
        return {"console_log_level": console, "file_log_level": "info"}
    return {"console_log_level": requested.lower(), "file_log_level": requested.lower()}


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


#: A token that is a number, not an option, even though it starts with ``-`` (``-3``, ``-0.5``, ``-1e3``).
_NEGATIVE_NUMBER = re.compile(r"-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _usage_fix(error: click.UsageError) -> str:
    """What to do about a usage error of click's, by its kind (the message says what was wrong)."""
    possibilities = list(getattr(error, "possibilities", None) or ())
    if isinstance(error, click.NoSuchCommand) and not possibilities and error.ctx is not None \
            and isinstance(error.ctx.command, click.Group):
        import difflib  # only for this refusal

        possibilities = difflib.get_close_matches(error.command_name, error.ctx.command.list_commands(error.ctx))
    if isinstance(error, click.NoSuchOption | click.NoSuchCommand) and possibilities:
        return "did you mean " + " or ".join(f"'{name}'" for name in sorted(possibilities)) + "?"
    if isinstance(error, click.NoSuchOption):
        return "check its spelling (a value that starts with '-' goes after '--')"
    if isinstance(error, click.NoSuchCommand):
        return "use one of the commands its help lists"
    if isinstance(error, click.MissingParameter):
        return "add it"
    if isinstance(error, click.BadParameter):
        return "give a value it accepts"
    if isinstance(error, click.BadOptionUsage):
        return "fix how the option is given"
    return "check the command line"


def usage_line(error: click.UsageError, command_path: str) -> str:
    """A click usage error as one line: what was wrong, the fix, and the help page to read.

    Replaces click's four lines (usage, "Try ... --help", blank, ``Error: ...``) so every
    refusal, of click's or ours, is one ``error:`` line on stderr.
    """
    if isinstance(error, click.NoSuchOption):  # the message would repeat the suggestion
        what = f"no such option '{error.option_name}'"
    elif isinstance(error, click.NoSuchCommand):
        what = f"no such command '{error.command_name}'"
    else:
        what = " ".join(error.format_message().split()).rstrip(".")
        what = what[:1].lower() + what[1:]
    # One of our own errors may already name its fix after a ';' ("unknown action 'x'; use one of ...").
    fix = "" if "; " in what else f" — {_usage_fix(error)}"
    if error.ctx is not None:
        command_path = error.ctx.command_path
    return f"{what}{fix}; see '{command_path} --help'"


@contextlib.contextmanager
def _naming_context(ctx: click.Context) -> Iterator[None]:
    """Give a usage error raised while parsing ``ctx``'s arguments that context, so its line names this command."""
    try:
        yield
    except click.UsageError as error:
        if error.ctx is None:
            error.ctx = ctx
        raise


class Command(click.Command):
    """A command whose positional arguments may be negative numbers (``settings set ws manager.workers -3``).

    click reads any token that starts with ``-`` as an option and refuses ``-3`` as an
    unknown one, so a value argument could not be negative and the real validator never
    spoke. When a positional is such a number (and no option is spelled like it), the
    options are passed first and the positionals, in their order, after ``--``.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with _naming_context(ctx):
            return super().parse_args(ctx, self._numbers_as_values(ctx, args))

    def _numbers_as_values(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value: dict[str, bool] = {}
        for param in self.get_params(ctx):
            if isinstance(param, click.Option):
                for name in (*param.opts, *param.secondary_opts):
                    takes_value[name] = not (param.is_flag or param.count)
        options: list[str] = []
        positionals: list[str] = []
        tokens = iter(args)
        for token in tokens:
            if token == "--":
                positionals.extend(tokens)
            elif token in takes_value or (token.startswith("-") and len(token) > 1
                                          and not _NEGATIVE_NUMBER.fullmatch(token)):
                options.append(token)
                value = next(tokens, None) if takes_value.get(token) else None
                if value is not None:  # the option's value, whatever it looks like ("--value -3")
                    options.append(value)
            else:
                positionals.append(token)
        if not any(_NEGATIVE_NUMBER.fullmatch(token) for token in positionals):
            return args
        return [*options, "--", *positionals]


class Group(click.Group):
    """A group that turns anticipated errors of its commands into one ``error:`` line and exit 2.

    Usage errors (click's and ours) become the same one line (:func:`usage_line`), caught
    where the command line is parsed: in :meth:`make_context` for the group's own options
    and in :meth:`invoke` for its subcommands. Its commands are :class:`Command`.
    """

    command_class = Command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with _naming_context(ctx):
            return super().parse_args(ctx, args)

    def make_context(self, info_name: str | None, args: list[str], parent: click.Context | None = None,
                     **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except NoArgsIsHelpError:
            raise  # a bare group prints its help, as before
        except click.UsageError as error:
            path = click.Context(self, info_name=info_name, parent=parent).command_path
            raise CliError(usage_line(error, path)) from error

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except NoArgsIsHelpError:
            raise
        except click.UsageError as error:
            # A plain click.Command parsing its arguments raises without a context: name it anyway.
            path = " ".join(filter(None, (ctx.command_path, ctx.invoked_subcommand)))
            raise CliError(usage_line(error, path)) from error
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
    """Print one canonical JSON value; a file name's undecodable byte (a lone surrogate) as its ``\\udcXX`` escape.

    ``json.loads`` gives the same surrogate back (``os.fsencode`` then the byte), where the raw
    surrogate would be no text a UTF-8 stream or a JSON reader takes.
    """
    text = codec.dumps(value)
    if not text.isascii():
        text = _SURROGATE.sub(lambda found: f"\\u{ord(found[0]):04x}", text)
    click.echo(text)


_SURROGATE = re.compile("[\ud800-\udfff]")


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
