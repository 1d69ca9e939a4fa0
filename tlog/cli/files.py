"""Files for ``tlog``, ``tlog-store`` and ``tlog-witness``: inputs, key files, outputs.

An input is named by a path, ``-`` or ``None`` meaning standard input, and read whole with a
size limit (:func:`read_input`). Messages name it as ``stdin`` or by its path
(:func:`input_name`). A signer key file is UTF-8 text in the format of :mod:`tlog.keys`, at
most :data:`MAX_KEY_FILE_SIZE` bytes (:func:`read_key_file`).

Two ways of writing a file, both synced to disk before they return:

* :func:`create_private` makes a new file of mode 0600 (a secret key, a configuration next to
  it) and never overwrites one;
* :func:`output_file` replaces a file atomically (temporary file in the same directory, fsync,
  rename): a failed or interrupted write leaves the old file, never a truncated one.

Errors are the exceptions of :mod:`tlog.errors` and OSError, which :func:`tlog.cli.run.run`
turns into exit statuses. Like :mod:`tlog.cli.run`, it imports neither a database driver nor a
network library.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import BinaryIO

from tlog.errors import MalformedError
from tlog.keys import SignerKey, parse_signer_key

MAX_KEY_FILE_SIZE = 1 << 16
"""Largest key file read; a signer key is well under 100 bytes."""


# --- input -------------------------------------------------------------------------------------


def is_stdin(path: str | None) -> bool:
    """Whether ``path`` names standard input: ``None`` (no argument given) or ``-``."""
    return path is None or path == "-"


def input_name(path: str | None) -> str:
    """The name of an input in messages: ``stdin``, else the path as given."""
    return "stdin" if is_stdin(path) else str(path)


def read_input(path: str | None, limit: int | None = None) -> bytes:
    """Read a whole input: standard input when :func:`is_stdin`, else the file ``path``.

    More than ``limit`` bytes (when given) is a MalformedError naming :func:`input_name`, found
    without reading further than ``limit + 1`` bytes. OSError from opening or reading the file
    (FileNotFoundError, ...) propagates unchanged.
    """
    n = -1 if limit is None else limit + 1
    if is_stdin(path):
        data = sys.stdin.buffer.read(n)
    else:
        assert path is not None
        with open(path, "rb") as f:
            data = f.read(n)
    if limit is not None and len(data) > limit:
        raise MalformedError(f"{input_name(path)} is larger than {limit} bytes")
    return data


def read_key_file(path: str) -> SignerKey:
    """The signer key in file ``path`` (``-``: standard input), of any type.

    Messages name the file ``key file PATH``, ``-`` included. Larger than
    :data:`MAX_KEY_FILE_SIZE`, not UTF-8 or not a key is a MalformedError; OSError from reading
    propagates unchanged (FileNotFoundError: no such key yet). The caller checks the key type.
    """
    data = read_input(path, MAX_KEY_FILE_SIZE)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedError(f"key file {path} is not UTF-8") from None
    try:
        return parse_signer_key(text)
    except MalformedError as e:
        raise MalformedError(f"key file {path}: {e}") from None


# --- output ------------------------------------------------------------------------------------


def create_private(path: str, data: bytes) -> None:
    """Create ``path`` with mode 0600, write ``data`` and fsync it; never overwrite a file.

    Precondition: ``path`` does not exist (not even as a dangling link), else FileExistsError
    and nothing is touched. Its directory must exist. On any failure after creating it, the
    file is removed again and the exception propagates.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # exactly 0600, whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(path)
        raise
    os.close(fd)


def _about(path: str, e: OSError) -> OSError:
    """``e`` as an error about ``path`` (same errno, hence same OSError subclass)."""
    if e.errno is None:
        return OSError(f"{path}: {e}")
    return OSError(e.errno, e.strerror or os.strerror(e.errno), path)


@contextlib.contextmanager
def output_file(path: str, prefix: str, *, name_path: bool = False) -> Iterator[BinaryIO]:
    """Write ``path`` atomically: a temporary file in its directory, renamed when complete.

    The temporary file is ``PREFIX<random>.tmp`` in the directory of ``path``, which must exist
    and be writable; the body of the ``with`` writes to it. When the body completes, the file
    gets the mode ``open()`` would give it (0666 less the umask), is fsynced and renamed over
    ``path``. On any failure, or an exception from the body, the temporary file is removed and
    ``path`` is left as it was: never a truncated file that looks complete.

    With ``name_path``, an OSError about the temporary file (or about no file: a failed write
    or fsync) is raised again as one about ``path``, the name the operator chose, and a
    temporary file that is already gone is no error; without it, such errors propagate as
    they are.
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=".tmp")
    except OSError as e:
        if name_path:
            raise _about(path, e) from None
        raise
    try:
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                umask = os.umask(0)
                os.umask(umask)
                os.fchmod(f.fileno(), 0o666 & ~umask)
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as e:
            if name_path and (e.filename is None or e.filename == tmp):
                raise _about(path, e) from None
            raise
    except BaseException:
        if name_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        else:
            os.unlink(tmp)
        raise
