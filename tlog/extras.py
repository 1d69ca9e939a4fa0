"""The optional parts of the install (pyproject.toml's extras) and the line for a missing one.

``pip install tlog-toolkit`` alone gives the formats (:mod:`tlog`, the ``tlog`` command) and the
offline verifier (``tlog-verify``): cryptography, PyNaCl and orjson, nothing that talks to a
network or a database server. Every other role adds an extra, which :data:`EXTRAS` lists with
the top-level modules it provides (pyproject.toml's ``[project.optional-dependencies]`` is the
install side of the same table; tests/test_install.py checks that they agree):

===========  =================================  ===============================================
extra        modules                            what needs them
===========  =================================  ===============================================
``witness``  aiohttp, uvloop, requests          ``tlog-witness serve`` (aiohttp, and uvloop's
                                                event loop where it installs),
                                                ``pull-logs URL`` and ``conformance``
                                                (requests)
``store``    requests, aiohttp                  ``tlog-store publish --witness`` (the witness
                                                client) and ``deliver`` (the outbox's
                                                pushes), ``serve`` (the tile server,
                                                aiohttp); the journal itself needs only SQLite
``postgres`` psycopg                            ``--postgres`` of ``tlog-store`` and
                                                ``tlog-witness``
``all``      all of the above
===========  =================================  ===============================================

The modules are imported where they are used, never when a command or a package is imported,
so that a command runs every verb its install allows. One that is missing surfaces as a
:class:`ModuleNotFoundError`; :func:`missing_extra` turns it into the one line that says which
extra to install, and :func:`tlog.cli.run.run` prints it (exit status 2). Pure: no import, no
I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DISTRIBUTION", "EXTRAS", "missing_extra"]

DISTRIBUTION = "tlog-toolkit"
"""The name ``pip install`` knows the project by."""

EXTRAS: dict[str, frozenset[str]] = {
    "witness": frozenset({"aiohttp", "uvloop", "requests"}),
    "store": frozenset({"requests", "aiohttp"}),
    "postgres": frozenset({"psycopg"}),
}
"""Each extra (but ``all``, which is all of them) and the top-level modules it installs."""


def missing_extra(error: ModuleNotFoundError, extras: Sequence[str]) -> str | None:
    """The one-line message for ``error`` when one of ``extras`` provides the missing module.

    ``extras`` are the extras a command may need, in the order of preference: a module two of
    them provide (requests) is named by the first. None when the module is none of theirs: a
    broken install or a bug, which the caller lets surface. The message::

        this command needs the 'witness' extra: pip install 'tlog-toolkit[witness]'
        (missing module aiohttp)

    (one line).
    """
    module = (error.name or "").partition(".")[0]
    for extra in extras:
        if module in EXTRAS[extra]:
            return (
                f"this command needs the {extra!r} extra: "
                f"pip install '{DISTRIBUTION}[{extra}]' (missing module {module})"
            )
    return None
