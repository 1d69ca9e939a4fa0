"""tlog.extras and the one line a command prints for a missing extra (tlog.cli.run.run).

The real commands in an install without the extras: tests/test_install.py.
"""

from __future__ import annotations

import argparse

import pytest

from tests.clirunner import call_main, one_error_line
from tlog.cli.run import Command, Verb
from tlog.extras import EXTRAS, missing_extra


def _missing(name: str) -> ModuleNotFoundError:
    return ModuleNotFoundError(f"No module named {name!r}", name=name)


def test_the_message_names_the_extra_the_pip_command_and_the_module() -> None:
    assert missing_extra(_missing("aiohttp"), ("witness", "postgres")) == (
        "this command needs the 'witness' extra: pip install 'tlog-toolkit[witness]'"
        " (missing module aiohttp)"
    )


@pytest.mark.parametrize(
    ("module", "extras", "extra"),
    [
        ("psycopg", ("witness", "postgres"), "postgres"),
        ("psycopg.pq", ("store", "postgres"), "postgres"),  # a submodule: its distribution
        ("requests", ("store", "postgres"), "store"),  # in two extras: the command's first
        ("requests", ("witness", "postgres"), "witness"),
        ("uvloop", ("witness",), "witness"),
    ],
)
def test_the_first_of_the_commands_extras_that_provides_the_module(
    module: str, extras: tuple[str, ...], extra: str
) -> None:
    message = missing_extra(_missing(module), extras)
    assert message is not None
    assert f"the '{extra}' extra: pip install 'tlog-toolkit[{extra}]'" in message
    assert message.endswith(f"(missing module {module.partition('.')[0]})")


@pytest.mark.parametrize(
    ("module", "extras"),
    [
        ("nacl", ("witness", "store", "postgres")),  # a base dependency: a broken install
        ("uvloop", ("store", "postgres")),  # not one of this command's extras
        ("aiohttp", ()),
        ("", ("witness",)),
    ],
)
def test_a_module_of_none_of_the_extras_is_not_an_extra(
    module: str, extras: tuple[str, ...]
) -> None:
    assert missing_extra(_missing(module), extras) is None


def test_every_extra_lists_modules() -> None:
    assert set(EXTRAS) == {"witness", "store", "postgres"}
    assert all(EXTRAS.values())


def _command(missing: str, extras: tuple[str, ...]) -> Command:
    def handler(args: argparse.Namespace) -> int:
        raise _missing(missing)

    return Command("prog", "", "", (Verb("go", "", "", handler),), extras=extras)


def test_the_command_prints_one_line_and_exits_2() -> None:
    result = call_main(_command("aiohttp", ("witness",)).main, ["go"])
    line = one_error_line(result, 2, "prog: go: ")
    assert line == (
        "prog: go: this command needs the 'witness' extra: pip install 'tlog-toolkit[witness]'"
        " (missing module aiohttp)\n"
    )


def test_another_missing_module_is_a_bug_and_surfaces() -> None:
    with pytest.raises(ModuleNotFoundError, match="nacl"):
        call_main(_command("nacl", ("witness",)).main, ["go"])
    with pytest.raises(ModuleNotFoundError, match="aiohttp"):
        call_main(_command("aiohttp", ()).main, ["go"])
