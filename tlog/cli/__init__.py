"""The command-line layer: the four commands' shared plumbing and the ``tlog`` command.

This subpackage is the only part of :mod:`tlog` that does I/O, and no format module imports it:

* :mod:`tlog.cli.run` — a command as a table of :class:`~tlog.cli.run.Verb` declarations (name,
  help, arguments, handler), and :func:`~tlog.cli.run.run`, the one place where exceptions
  become exit statuses and one line on standard error;
* :mod:`tlog.cli.files` — input files and standard input, key files, private and atomic output
  files;
* :mod:`tlog.cli.command` — the ``tlog`` command itself (keys, notes, Merkle roots and proofs).

``tlog-store`` (:mod:`store.cli`), ``tlog-witness`` (:mod:`witness.cli`) and ``tlog-verify``
(:mod:`verifier.cli`) are built on :mod:`tlog.cli.run` and :mod:`tlog.cli.files` the same way.
"""

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Run the ``tlog`` command (:func:`tlog.cli.command.main`); kept so that ``tlog.cli:main``
    and ``python -m tlog.cli`` still work. Imported only when called: the plumbing modules do not
    load the command."""
    from tlog.cli.command import main as run  # noqa: PLC0415 - see the docstring

    return run(argv)
