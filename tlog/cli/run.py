"""Command-line plumbing shared by ``tlog``, ``tlog-store``, ``tlog-witness`` and ``tlog-verify``.

Each command is one :class:`Command`: its verbs, each declared once as a :class:`Verb` (name,
help, the function that adds its arguments, the handler that runs it), and its table of exit
rules. ``Command.main`` is one call of :func:`run`, which parses the arguments, runs the verb
and is the one place where exceptions become exit statuses. The convention:

===  ========================================================================================
  0  success
  1  well-formed input that does not verify (:class:`tlog.errors.VerificationError`)
  2  unusable input or usage: malformed data, bad arguments, an unreadable file
     (:class:`tlog.errors.TlogError`, :class:`UnicodeDecodeError`, :class:`OSError`, argparse
     errors); also a closed standard output (:class:`BrokenPipeError`), which prints nothing;
     and a verb that needs an extra that is not installed (:mod:`tlog.extras`: a
     :class:`ModuleNotFoundError` for one of its modules), which names the extra to install
  3  refused by the store's rules (``tlog-store`` only)
  4  backend trouble: the database or the network failed (``tlog-store``, ``tlog-witness``)
130  interrupted by SIGINT, the shell's 128 + 2 (``tlog-witness``, ``tlog-verify``)
===  ========================================================================================

Statuses 0 to 2 are common to every command. A command states the others, and any exception
it maps differently, in its own table of :class:`Exit` rules, which :func:`run` checks in order
before the common rules; and the extras its verbs may need (``extras``, in the order in which
a missing module names them). A ModuleNotFoundError for any other module is a broken install
and surfaces with its traceback. Every failure prints exactly one line on standard error,
``PROG: VERB: MESSAGE`` (``PROG: MESSAGE`` before a verb is known), with CR and LF escaped as
``\\r`` and ``\\n`` and encoded as UTF-8 with backslash escapes for what does not encode.
``--help`` exits 0 through SystemExit, as argparse does. Any other exception is a bug and is
left to surface with its traceback.

It also holds the argument helpers the commands share (:func:`utf8_arg`, :func:`decimal_arg`)
and :func:`write_stdout`; the file helpers are in :mod:`tlog.cli.files`. Its only I/O is on the
standard streams, and it imports neither a database driver nor a network library:
``tlog-verify`` stays free of them.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from tlog.encoding import parse_decimal
from tlog.errors import MalformedError, TlogError, UsageError, VerificationError
from tlog.extras import missing_extra

EXIT_OK = 0
EXIT_UNVERIFIED = 1
EXIT_BAD_INPUT = 2


class ArgumentError(UsageError):
    """A command line argparse refuses."""


class ArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are exceptions, reported by :func:`run` in one line."""

    def error(self, message: str) -> NoReturn:
        raise ArgumentError(message)


def command_parser(prog: str, description: str, epilog: str) -> tuple[ArgumentParser, Any]:
    """A command's parser and its required ``VERB`` subparsers (``args.verb``)."""
    parser = ArgumentParser(
        prog=prog,
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    return parser, verbs


def add_verb(
    subparsers: Any,
    name: str,
    help_text: str,
    epilog: str,
    func: Callable[[argparse.Namespace], object] | None,
) -> argparse.ArgumentParser:
    """Add verb ``name`` to ``subparsers``; ``func`` (``args.func``) runs it."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    if func is not None:
        p.set_defaults(func=func)
    return p


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """A verb without arguments of its own."""


@dataclass(frozen=True)
class Verb:
    """One verb of a command, declared once.

    ``arguments`` adds the verb's own arguments to its parser; ``handler`` runs the parsed
    arguments and returns the exit status (or what the command's ``call`` expects). A verb
    with ``subverbs`` (``tlog check inclusion``) has no handler of its own: its KIND picks one
    of them. ``options`` are names the command's ``common`` hook reads to decide which shared
    options the verb gets (for example ``tlog-store``'s ``"key"``).
    """

    name: str
    help: str
    epilog: str
    handler: Callable[[argparse.Namespace], Any] | None
    arguments: Callable[[argparse.ArgumentParser], None] = _no_arguments
    subverbs: tuple[Verb, ...] = ()
    options: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Command:
    """A command: its verbs and how its own exceptions map to exit statuses.

    ``common(parser, verb)``, when given, adds the options every verb of the command shares
    (after the verb's own). ``call`` runs the parsed arguments (see :func:`run`). ``extras``
    are the extras of :mod:`tlog.extras` its verbs may need (see :func:`run`).
    """

    prog: str
    description: str
    epilog: str
    verbs: tuple[Verb, ...]
    statuses: tuple[Exit, ...] = ()
    common: Callable[[argparse.ArgumentParser, Verb], None] | None = None
    call: Callable[[argparse.Namespace], int] | None = None
    extras: tuple[str, ...] = ()

    @property
    def verb_names(self) -> tuple[str, ...]:
        """The names of the verbs, in declaration order."""
        return tuple(v.name for v in self.verbs)

    def parser(self) -> ArgumentParser:
        """The command's argument parser, built from its verbs."""
        parser, subparsers = command_parser(self.prog, self.description, self.epilog)
        for verb in self.verbs:
            self._add(subparsers, verb)
        return parser

    def _add(self, subparsers: Any, verb: Verb) -> None:
        p = add_verb(subparsers, verb.name, verb.help, verb.epilog, verb.handler)
        verb.arguments(p)
        if verb.subverbs:
            kinds = p.add_subparsers(dest="kind", metavar="KIND", required=True)
            for sub in verb.subverbs:
                self._add(kinds, sub)
        elif self.common is not None:
            self.common(p, verb)

    def main(self, argv: Sequence[str] | None = None) -> int:
        """Run the command with ``argv`` (default: ``sys.argv[1:]``); return its exit status."""
        call = _run_verb if self.call is None else self.call
        return run(self.prog, self.verb_names, self.parser, argv, self.statuses, call, self.extras)


def utf8_arg(text: str, what: str, error: type[TlogError] = MalformedError) -> str:
    """``text``, a command-line string that must be valid UTF-8, else ``error`` naming ``what``.

    Python decodes argv with surrogateescape, so undecodable bytes arrive as lone surrogates:
    those are what this refuses (message ``WHAT is not valid UTF-8``). An empty string passes.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{what} is not valid UTF-8") from None
    return text


def decimal_arg(text: str, what: str, minimum: int = 0, maximum: int | None = None) -> int:
    """``text`` as a number of at least ``minimum`` (and at most ``maximum``, when given), else
    a MalformedError naming ``what``.

    ``text`` must pass :func:`utf8_arg`, then be a canonical decimal in the range of
    :func:`tlog.encoding.parse_decimal` (no sign, no leading zero, at most 2^63-1).
    """
    n = parse_decimal(utf8_arg(text, what), what)
    if n < minimum:
        raise MalformedError(f"{what} must be at least {minimum}")
    if maximum is not None and n > maximum:
        raise MalformedError(f"{what} must be at most {maximum}")
    return n


def write_stdout(data: bytes | str) -> None:
    """Write ``data`` (``str``: as UTF-8, which must encode) to standard output and flush it."""
    out = sys.stdout.buffer
    out.write(data.encode("utf-8") if isinstance(data, str) else data)
    out.flush()


def one_line(message: str) -> str:
    """``message`` with CR and LF escaped, so that it stays one line."""
    return message.replace("\r", "\\r").replace("\n", "\\n")


def write_error(prog: str, verb: str | None, message: str) -> None:
    """Print ``PROG: VERB: MESSAGE`` (``PROG: MESSAGE`` without a verb) as one line on stderr."""
    prefix = f"{prog}: {verb}: " if verb else f"{prog}: "
    line = prefix + one_line(message) + "\n"
    sys.stderr.buffer.write(line.encode("utf-8", "backslashreplace"))
    sys.stderr.flush()


def os_message(e: OSError) -> str:
    """``FILE: reason`` for an OSError about a file, its own text otherwise."""
    if e.filename is not None and e.strerror:
        return f"{os.fsdecode(e.filename)}: {e.strerror}"
    return str(e)


@dataclass(frozen=True)
class Exit:
    """One rule of a command's table: an exception of ``catch`` exits with ``status``.

    The line on standard error is ``message(e)``: by default the exception's own text.
    """

    catch: type[BaseException] | tuple[type[BaseException], ...]
    status: int
    message: Callable[[BaseException], str] = str


def _classes(rules: Sequence[Exit]) -> tuple[type[BaseException], ...]:
    out: list[type[BaseException]] = []
    for rule in rules:
        out.extend(rule.catch if isinstance(rule.catch, tuple) else (rule.catch,))
    return tuple(out)


def _run_verb(args: argparse.Namespace) -> int:
    status: int = args.func(args)
    return status


def run(
    prog: str,
    verbs: Sequence[str],
    build_parser: Callable[[], argparse.ArgumentParser],
    argv: Sequence[str] | None,
    statuses: Sequence[Exit] = (),
    call: Callable[[argparse.Namespace], int] = _run_verb,
    extras: Sequence[str] = (),
) -> int:
    """Run command ``prog`` with ``argv`` (default: ``sys.argv[1:]``); return its exit status.

    ``verbs`` names the verbs, so that an error of the argument parser still names the verb;
    ``call`` runs the parsed arguments (by default ``args.func(args)``, which returns the
    status). An exception is matched against ``statuses`` in order, then against the common
    rules of the module docstring; a ModuleNotFoundError, against ``extras``
    (:func:`report_missing_extra`).
    """
    args_list = list(sys.argv[1:] if argv is None else argv)
    # Options may come before the verb (tlog-store --db PATH VERB): the first verb name is the
    # guess for an error of the parser itself, the parsed verb is the answer once there is one.
    verb = next((a for a in args_list if a in verbs), None)
    try:
        args = build_parser().parse_args(args_list)
        verb = getattr(args, "verb", verb)
        return call(args)
    except _classes(statuses) as e:
        rule = next(r for r in statuses if isinstance(e, r.catch))
        write_error(prog, verb, rule.message(e))
        return rule.status
    except VerificationError as e:
        write_error(prog, verb, str(e))
        return EXIT_UNVERIFIED
    except BrokenPipeError:
        # The reader went away (PROG ... | head): not an input error, nothing to report. Point
        # stdout at /dev/null so that the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BAD_INPUT
    except OSError as e:
        write_error(prog, verb, os_message(e))
        return EXIT_BAD_INPUT
    except ArgumentError as e:
        write_error(prog, verb, f"{e} (see '{prog} {verb + ' ' if verb else ''}--help')")
        return EXIT_BAD_INPUT
    except (TlogError, UnicodeDecodeError) as e:
        write_error(prog, verb, str(e))
        return EXIT_BAD_INPUT
    except ModuleNotFoundError as e:
        return report_missing_extra(prog, verb, e, extras)


def report_missing_extra(
    prog: str, verb: str | None, error: ModuleNotFoundError, extras: Sequence[str]
) -> int:
    """Print which extra ``error``'s module comes with (:func:`tlog.extras.missing_extra`) and
    return the status, 2; re-raise ``error`` when it is none of ``extras``' modules (a bug).

    For a command's code outside :func:`run` (``tlog-witness conformance``, which has its own
    parser); :func:`run` calls it for its commands.
    """
    message = missing_extra(error, extras)
    if message is None:
        raise error
    write_error(prog, verb, message)
    return EXIT_BAD_INPUT
