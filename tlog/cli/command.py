"""The ``tlog`` command: keys, signed notes, Merkle roots and proofs from the shell.

This module and its command-line plumbing (:mod:`tlog.cli.run`, shared with the other
commands) are the only modules of package :mod:`tlog` that do I/O; every format is parsed and
produced by the pure modules it calls. Verbs::

    tlog keygen NAME --out FILE|- [--type ed25519|cosignature/v1|mldsa44]
    tlog vkey KEYFILE
    tlog sign --key KEYFILE [--time T] [--text] [FILE]
    tlog open (--vkey VKEY | --vkey-file FILE)... [--checkpoint] [--json] [FILE]
    tlog root [--hex] [--size N] [--json] [FILE]
    tlog prove (--index I | --old M) [--size N] [--hex] [--json] [FILE]
    tlog check inclusion --index I --size N --leaf HASH --root ROOT [PROOF_FILE]
    tlog check consistency --old M --old-root ROOT --size N --root ROOT [PROOF_FILE]

A FILE that is absent or ``-`` is standard input; at most one input of a command may be.
``keygen`` creates the key file with mode 0600 and never overwrites one (``--out -`` prints the
key instead of the vkey). ``sign`` adds a signature to its input when that parses as a signed
note and signs it as note text otherwise; input that does not parse but whose last paragraph
starts with ``"— "`` is refused as a damaged note unless ``--text`` is given. Cosignature keys
sign checkpoint texts only.

Input formats (read as bytes and parsed strictly: LF is the only line end, CR is an error;
a line file has no empty lines, and its last line ends in LF too):

* key file: the Go ``PRIVATE+KEY+<name>+<key ID>+<base64>`` text (:mod:`tlog.keys`), with or
  without one final LF;
* vkey file (``--vkey-file``): one vkey per line, each line ending in LF;
* note: a C2SP signed note (:mod:`tlog.note`); note text: lines ending in LF, no signatures;
* leaf hash file (``root``, ``prove``): one RFC 6962 leaf hash per line, each line ending in LF,
  written as canonical padded base64 (44 characters) or, with ``--hex``, as 64 lowercase hex
  digits; the line number is the leaf index plus one; an empty file is the empty tree;
* proof file (``check``): one base64 hash per line, each ending in LF, in RFC 6962 order (the
  lines of a tlog-witness request or a tlog-proof file); an empty file is an empty proof;
* numbers (``--index``, ``--size``, ``--old``, ``--time``): canonical decimal, at most 2^63-1;
  hashes (``--leaf``, ``--root``, ``--old-root``): canonical padded base64 of 32 bytes.

Outputs go to standard output: a vkey line (``keygen``, ``vkey``), the signed note (``sign``),
``size``/``root`` lines (``root``), one base64 hash per line (``prove``), ``ok`` (``check``).
``open`` prints one header line per signature (``verified <name>+<id> <type>[ time <T>]`` for
trusted keys, ``unknown <name>+<id>`` for the others), with ``--checkpoint`` the lines
``origin``, ``size`` and ``root``, then an empty line, then the note text byte for byte.
``--json`` prints one JSON object instead.

Exit status: 0 success; 1 the input is well formed but does not verify (no trusted signature,
a trusted key's signature is invalid, a proof does not verify, a size-0 checkpoint without the
empty-tree root); 2 bad input or usage (malformed data, unreadable file, bad arguments).
Every failure prints exactly one line on standard error, ``tlog: <verb>: <message>``, and never
a traceback: :func:`main` is the one place that maps exceptions to exit statuses. A closed
standard output (``tlog ... | head``) ends the command silently with status 2. Exceptions
other than :class:`tlog.errors.TlogError`, :class:`OSError` and :class:`UnicodeDecodeError`
are bugs and are left to surface.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tlog.checkpoint import Checkpoint
from tlog.cli import files as clifiles
from tlog.cli import run as clirun
from tlog.cli.files import create_private, input_name, is_stdin, read_input, read_key_file
from tlog.cli.run import Command, Verb, utf8_arg, write_stdout
from tlog.cosignature import (
    TYPE_COSIGNATURE_V1,
    TYPE_SUBTREE_V1,
    CosignatureV1Signer,
    SubtreeV1Signer,
    timestamp_of,
)
from tlog.encoding import b64encode, parse_decimal, parse_hash
from tlog.errors import MalformedError, UsageError
from tlog.keys import TYPE_NAMES, AnySigner, format_vkey, generate_key, parse_vkey
from tlog.merkle import (
    MemoryHashStore,
    consistency_proof,
    inclusion_proof,
    root,
    verify_consistency,
    verify_inclusion,
)
from tlog.note import (
    MAX_NOTE_SIZE,
    SIG_PREFIX,
    Note,
    Signature,
    Signer,
    Verifier,
    open_note,
    parse_note,
    sign_note,
)

EXIT_OK = clirun.EXIT_OK
EXIT_UNVERIFIED = clirun.EXIT_UNVERIFIED
EXIT_BAD_INPUT = clirun.EXIT_BAD_INPUT

MAX_KEY_FILE_SIZE = clifiles.MAX_KEY_FILE_SIZE

_TYPES_BY_NAME = {name: t for t, name in TYPE_NAMES.items()}
_COSIGNATURE_TYPES = (TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1)
_HEX_HASH = re.compile(rb"[0-9a-f]{64}")
_SIG_PREFIX = SIG_PREFIX.encode("utf-8")


# --- input -----------------------------------------------------------------------------------


def _one_stdin(*uses: bool) -> None:
    """Refuse commands that would read standard input twice (``uses``: which inputs would)."""
    if sum(uses) > 1:
        raise UsageError("only one input can be standard input ('-')")


def _lines(data: bytes, what: str) -> list[bytes]:
    """Split a line file: every line ends in LF; an empty file has no lines."""
    if not data:
        return []
    if not data.endswith(b"\n"):
        raise MalformedError(f"{what} does not end in a newline")
    return data[:-1].split(b"\n")


def _hash_lines(data: bytes, what: str, hex_hashes: bool = False) -> list[bytes]:
    """Parse a file of hashes, one per line (base64, or lowercase hex)."""
    hashes = []
    for i, line in enumerate(_lines(data, what), 1):
        where = f"{what} line {i}"
        if hex_hashes:
            if not _HEX_HASH.fullmatch(line):
                raise MalformedError(f"{where} is not 64 lowercase hex digits")
            hashes.append(bytes.fromhex(line.decode("ascii")))
        else:
            hashes.append(parse_hash(line, where))
    return hashes


def _number(text: str, what: str) -> int:
    return parse_decimal(text, what)


def _hash_arg(text: str, what: str) -> bytes:
    return parse_hash(utf8_arg(text, what), what)


# --- output ----------------------------------------------------------------------------------


def _write_json(obj: object) -> None:
    write_stdout(json.dumps(obj, indent=2) + "\n")


# --- keygen, vkey ----------------------------------------------------------------------------


def _read_key(path: str) -> AnySigner:
    return read_key_file(path).signer()


def _cmd_keygen(args: argparse.Namespace) -> int:
    name = utf8_arg(args.name, "key name")
    key = generate_key(name, _TYPES_BY_NAME[args.type])
    text = key.format() + "\n"
    if args.out == "-":
        write_stdout(text)
    else:
        try:
            create_private(args.out, text.encode("utf-8"))
        except FileExistsError:
            raise UsageError(f"{args.out} already exists; refusing to overwrite it") from None
        write_stdout(key.vkey() + "\n")
    return EXIT_OK


def _cmd_vkey(args: argparse.Namespace) -> int:
    s = _read_key(args.keyfile)
    v = s.verifier()
    write_stdout(format_vkey(v) + "\n")
    return EXIT_OK


# --- sign --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FixedTimeSigner:
    """A cosignature signer that signs at a fixed timestamp instead of the clock's."""

    inner: CosignatureV1Signer | SubtreeV1Signer
    timestamp: int

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def key_id(self) -> int:
        return self.inner.key_id

    def sign(self, text: bytes) -> bytes:
        return self.inner.sign_at(text, self.timestamp)


def _split_input(data: bytes, force_text: bool) -> tuple[bytes, list[Signature]]:
    """Tell note text from a signed note: (text to sign, existing signatures).

    The input is a signed note when it parses as one. Input that does not parse but whose last
    paragraph starts like a signature line is refused rather than signed as text: it is most
    likely a damaged note, and signing it would bury the damage inside the signed text.
    ``force_text`` signs the input as text, whatever it looks like.
    """
    if force_text:
        return data, []
    try:
        return parse_note(data)
    except MalformedError as e:
        split = data.rfind(b"\n\n")
        if split >= 0 and data[split + 2 :].startswith(_SIG_PREFIX):
            raise MalformedError(
                f"input looks like a signed note but is malformed: {e} "
                "(use --text to sign it as note text)"
            ) from None
    return data, []


def _cmd_sign(args: argparse.Namespace) -> int:
    _one_stdin(args.key == "-", is_stdin(args.file))
    signer = _read_key(args.key)
    data = read_input(args.file, MAX_NOTE_SIZE)
    if not data:
        raise MalformedError(f"nothing to sign: {input_name(args.file)} is empty")
    text, existing = _split_input(data, args.text)
    chosen: Signer = signer
    if isinstance(signer, CosignatureV1Signer | SubtreeV1Signer):
        # Cosignatures are statements about checkpoints (tlog-cosignature); refuse other texts.
        Checkpoint.parse(text)
        if args.time is not None:
            chosen = _FixedTimeSigner(signer, _number(args.time, "--time"))
    elif args.time is not None:
        raise UsageError("--time applies to cosignature keys only (cosignature/v1, mldsa44)")
    write_stdout(sign_note(text, [chosen], existing))
    return EXIT_OK


# --- open ----------------------------------------------------------------------------------------


def _verifiers(vkeys: Sequence[str], vkey_files: Sequence[str]) -> list[Verifier]:
    texts = [(utf8_arg(v, "--vkey"), "--vkey") for v in vkeys]
    for vkey_file in vkey_files:
        what = f"vkey file {input_name(vkey_file)}"
        for i, line in enumerate(_lines(read_input(vkey_file, MAX_NOTE_SIZE), what), 1):
            try:
                texts.append((line.decode("utf-8"), f"{what} line {i}"))
            except UnicodeDecodeError:
                raise MalformedError(f"{what} line {i} is not UTF-8") from None
    if not texts:
        raise UsageError("no trusted key: give --vkey or --vkey-file")
    found: dict[str, Verifier] = {}
    for text, where in texts:
        try:
            v = parse_vkey(text)
        except MalformedError as e:
            raise MalformedError(f"{where}: {e}") from None
        # The same key given twice (flag and file) is one key, not an ambiguous pair.
        found.setdefault(format_vkey(v), v)
    return list(found.values())


def _describe(note: Note, verifiers: Sequence[Verifier]) -> dict[str, Any]:
    types = {(v.name, v.key_id): v.key_type for v in verifiers}
    verified = []
    for sig in note.sigs:
        key_type = types[(sig.name, sig.key_id)]
        entry: dict[str, Any] = {
            "name": sig.name,
            "key_id": f"{sig.key_id:08x}",
            "type": TYPE_NAMES[key_type],
        }
        if key_type in _COSIGNATURE_TYPES:
            entry["timestamp"] = timestamp_of(sig)
        verified.append(entry)
    unknown = [{"name": s.name, "key_id": f"{s.key_id:08x}"} for s in note.unverified]
    return {"verified": verified, "unknown": unknown}


def _cmd_open(args: argparse.Namespace) -> int:
    _one_stdin(*(f == "-" for f in args.vkey_file), is_stdin(args.file))
    verifiers = _verifiers(args.vkey, args.vkey_file)
    note = open_note(read_input(args.file, MAX_NOTE_SIZE), verifiers)
    result = _describe(note, verifiers)
    if args.checkpoint:
        cp = Checkpoint.parse(note.text)
        result["checkpoint"] = {
            "origin": cp.origin,
            "size": cp.size,
            "root": b64encode(cp.root),
            "extensions": list(cp.extensions),
        }
    if args.json:
        result["text"] = note.text.decode("utf-8")
        _write_json(result)
        return EXIT_OK
    lines = []
    for v in result["verified"]:
        line = f"verified {v['name']}+{v['key_id']} {v['type']}"
        if "timestamp" in v:
            line += f" time {v['timestamp']}"
        lines.append(line)
    lines += [f"unknown {u['name']}+{u['key_id']}" for u in result["unknown"]]
    if args.checkpoint:
        c = result["checkpoint"]
        lines += [f"origin {c['origin']}", f"size {c['size']}", f"root {c['root']}"]
    write_stdout("".join(line + "\n" for line in lines).encode("utf-8") + b"\n" + note.text)
    return EXIT_OK


# --- root, prove -------------------------------------------------------------------------------


def _read_leaves(args: argparse.Namespace) -> tuple[list[bytes], int]:
    """The leaf hashes of FILE and the tree size asked for (default: all of them)."""
    what = f"leaf hash file {input_name(args.file)}"
    leaves = _hash_lines(read_input(args.file), what, args.hex)
    if args.size is None:
        return leaves, len(leaves)
    size = _number(args.size, "--size")
    if size > len(leaves):
        raise UsageError(f"--size {size} is larger than the {len(leaves)} leaves of {what}")
    return leaves, size


def _cmd_root(args: argparse.Namespace) -> int:
    leaves, size = _read_leaves(args)
    r = b64encode(root(leaves[:size]))
    if args.json:
        _write_json({"size": size, "root": r})
    else:
        write_stdout(f"size {size}\nroot {r}\n")
    return EXIT_OK


def _cmd_prove(args: argparse.Namespace) -> int:
    leaves, size = _read_leaves(args)
    store = MemoryHashStore()
    store.extend(leaves[:size])
    result: dict[str, Any]
    if args.index is not None:
        index = _number(args.index, "--index")
        if index >= size:
            raise UsageError(f"--index {index} is not in a tree of size {size}")
        proof = inclusion_proof(index, size, store)
        result = {"index": index, "leaf": b64encode(leaves[index])}
    else:
        old = _number(args.old, "--old")
        if old == 0:
            raise UsageError(
                "no consistency proof exists from size 0 (a witness takes 'old 0' with no proof)"
            )
        if old > size:
            raise UsageError(f"--old {old} is larger than the tree size {size}")
        proof = consistency_proof(old, size, store)
        result = {"old": old, "old_root": b64encode(store.root(old))}
    result |= {"size": size, "root": b64encode(store.root(size))}
    result["proof"] = [b64encode(h) for h in proof]
    if args.json:
        _write_json(result)
    else:
        write_stdout("".join(h + "\n" for h in result["proof"]))
    return EXIT_OK


# --- check ---------------------------------------------------------------------------------------


def _read_proof(path: str | None) -> list[bytes]:
    return _hash_lines(read_input(path), f"proof file {input_name(path)}")


def _cmd_check_inclusion(args: argparse.Namespace) -> int:
    index = _number(args.index, "--index")
    size = _number(args.size, "--size")
    if index >= size:
        raise UsageError(f"--index {index} is not in a tree of size {size}")
    leaf = _hash_arg(args.leaf, "--leaf")
    root_hash = _hash_arg(args.root, "--root")
    verify_inclusion(index, size, leaf, _read_proof(args.file), root_hash)
    write_stdout("ok\n")
    return EXIT_OK


def _cmd_check_consistency(args: argparse.Namespace) -> int:
    old = _number(args.old, "--old")
    size = _number(args.size, "--size")
    if old == 0:
        raise UsageError("no consistency proof exists from size 0")
    if old > size:
        raise UsageError(f"--old {old} is larger than --size {size}")
    old_root = _hash_arg(args.old_root, "--old-root")
    new_root = _hash_arg(args.root, "--root")
    verify_consistency(old, size, old_root, new_root, _read_proof(args.file))
    write_stdout("ok\n")
    return EXIT_OK


# --- argument parsing ----------------------------------------------------------------------------


_EPILOG_MAIN = """\
Run 'tlog VERB --help' for the formats and examples of a verb. FILE arguments that are absent
or - are standard input. Exit status: 0 ok, 1 does not verify, 2 bad input or usage; every
failure prints one line on standard error.

examples:
  tlog keygen example.com/log --out log.key > log.vkey
  tlog sign --key log.key checkpoint.txt > checkpoint
  tlog open --vkey "$(cat log.vkey)" --checkpoint checkpoint
  tlog root leaves.txt
  tlog prove --index 7 leaves.txt | tlog check inclusion --index 7 --size 100 \\
      --leaf LEAF= --root ROOT=
"""

_EPILOG_KEYGEN = """\
The key file is the golang.org/x/mod/sumdb/note private key text, PRIVATE+KEY+<name>+<id>+<key>,
created with mode 0600; an existing file is never overwritten. The vkey (the public key text
c2sp.org/signed-note defines) is printed on standard output. With --out - the private key is
printed on standard output instead, and nothing else (get the vkey with 'tlog vkey -').

Key types: ed25519 (0x01) signs notes and checkpoints as a log; cosignature/v1 (0x04,
Ed25519) and mldsa44 (0x06, ML-DSA-44 subtree/v1) cosign checkpoints as a witness.

examples:
  tlog keygen example.com/log --out log.key > log.vkey
  tlog keygen witness.example/w1 --type cosignature/v1 --out w1.key
"""

_EPILOG_VKEY = """\
examples:
  tlog vkey log.key
  tlog vkey - < log.key
"""

_EPILOG_SIGN = """\
FILE (standard input if absent or -) is either note text -- lines ending in a newline, such as
a checkpoint -- or a signed note. A signed note gets the new signature after its existing ones
(an existing line of the same key is replaced); note text becomes a note with one signature.
Input that is not a valid note but whose last paragraph starts with a signature line ('— ')
is refused as a damaged note; --text signs the whole input as text regardless.

Cosignature keys (cosignature/v1, mldsa44) sign checkpoints only, at the current time, or at
--time T (POSIX seconds). The signed note goes to standard output.

examples:
  printf 'example.com/log\\n0\\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\\n' |
      tlog sign --key log.key > checkpoint
  tlog sign --key w1.key checkpoint > cosigned
"""

_EPILOG_OPEN = """\
Signatures from keys not given are ignored (listed as 'unknown'); every signature from a given
key must verify. Exit status 0 when at least one given key signed and all of their signatures
verify; 1 when none did, or one is invalid; 2 when the note or a key is malformed.

Output: one line per signature -- 'verified <name>+<id> <type>' (cosignatures add
' time <T>') or 'unknown <name>+<id>' -- then with --checkpoint the lines 'origin',
'size' and 'root', then an empty line, then the verified note text exactly.

vkey file: one vkey per line, every line ending in a newline.

examples:
  tlog open --vkey "$(cat log.vkey)" checkpoint
  tlog open --vkey-file trusted.vkeys --checkpoint --json < cosigned
"""

_EPILOG_ROOT = """\
FILE (standard input if absent or -) holds one RFC 6962 leaf hash per line -- SHA-256(0x00 ||
entry), line i being leaf i-1 -- as 44-character padded base64, or with --hex as 64 lowercase
hex digits. Every line ends in a newline; an empty file is the empty tree. Prints 'size N'
and 'root <base64>'.

examples:
  tlog root leaves.txt
  tlog root --size 40 --json leaves.txt
"""

_EPILOG_PROVE = """\
FILE is a leaf hash file as for 'tlog root'. The tree is its first --size leaves (default: all).
Prints the proof, one base64 hash per line, in RFC 6962 order -- the line format of
tlog-witness requests and tlog-proof files; --json adds the sizes, roots and leaf hash.

examples:
  tlog prove --index 7 leaves.txt > proof
  tlog prove --old 40 --size 100 leaves.txt > proof
"""

_EPILOG_CHECK = """\
PROOF_FILE (standard input if absent or -) holds one base64 hash per line, each ending in a
newline, as 'tlog prove' prints. Prints 'ok' and exits 0 when the proof verifies; exits 1 when
it does not, 2 when the input is malformed.

examples:
  tlog check inclusion --index 7 --size 100 --leaf LEAF= --root ROOT= proof
  tlog check consistency --old 40 --old-root R1= --size 100 --root R2= < proof
"""


def _leaf_file_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", metavar="FILE", help="leaf hash file (default: stdin)")
    p.add_argument("--hex", action="store_true", help="leaf hashes are lowercase hex")
    p.add_argument("--size", metavar="N", help="use the first N leaves only")
    p.add_argument("--json", action="store_true", help="print a JSON object")


def _keygen_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", metavar="NAME", help="key name, e.g. example.com/log")
    p.add_argument("--type", choices=list(_TYPES_BY_NAME), default="ed25519", help="key type")
    p.add_argument("--out", required=True, metavar="FILE", help="new key file, or - for stdout")


def _vkey_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("keyfile", metavar="KEYFILE", help="signer key file, or - for stdin")


def _sign_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--key", required=True, metavar="KEYFILE", help="signer key file")
    p.add_argument("--time", metavar="T", help="cosignature timestamp (cosignature keys only)")
    p.add_argument("--text", action="store_true", help="sign the input as note text")
    p.add_argument("file", nargs="?", metavar="FILE", help="text or note (default: stdin)")


def _open_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--vkey", action="append", default=[], metavar="VKEY", help="a trusted key")
    p.add_argument(
        "--vkey-file",
        action="append",
        default=[],
        metavar="FILE",
        help="trusted keys, one vkey per line",
    )
    p.add_argument("--checkpoint", action="store_true", help="the text must be a checkpoint")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    p.add_argument("file", nargs="?", metavar="FILE", help="signed note (default: stdin)")


def _prove_args(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--index", metavar="I", help="inclusion proof of leaf I")
    which.add_argument("--old", metavar="M", help="consistency proof from size M")
    _leaf_file_args(p)


def _check_inclusion_args(q: argparse.ArgumentParser) -> None:
    q.add_argument("--index", required=True, metavar="I", help="leaf index")
    q.add_argument("--size", required=True, metavar="N", help="tree size")
    q.add_argument("--leaf", required=True, metavar="HASH", help="leaf hash (base64)")
    _root_and_proof_args(q)


def _check_consistency_args(q: argparse.ArgumentParser) -> None:
    q.add_argument("--old", required=True, metavar="M", help="old tree size")
    q.add_argument("--old-root", required=True, metavar="ROOT", help="root at size M (base64)")
    q.add_argument("--size", required=True, metavar="N", help="new tree size")
    _root_and_proof_args(q)


def _root_and_proof_args(q: argparse.ArgumentParser) -> None:
    """The arguments both ``check`` verbs end with: the root at size N and the proof file."""
    q.add_argument("--root", required=True, metavar="ROOT", help="root at size N (base64)")
    q.add_argument("file", nargs="?", metavar="PROOF_FILE", help="proof (default: stdin)")


def command() -> Command:
    """The ``tlog`` command, each verb declared once; it has no exit rule of its own.

    Built on each call, so that the handlers are looked up when the command runs (a test
    replaces one to check that a bug is not reported as an input error).
    """
    return Command(
        prog="tlog",
        description="Transparency-log tools: keys, signed notes, Merkle roots and proofs.",
        epilog=_EPILOG_MAIN,
        verbs=(
            Verb("keygen", "generate a signer key", _EPILOG_KEYGEN, _cmd_keygen, _keygen_args),
            Verb("vkey", "print the vkey of a signer key", _EPILOG_VKEY, _cmd_vkey, _vkey_args),
            Verb("sign", "sign note text or add a signature", _EPILOG_SIGN, _cmd_sign, _sign_args),
            Verb("open", "verify a signed note", _EPILOG_OPEN, _cmd_open, _open_args),
            Verb(
                "root", "Merkle tree root of leaf hashes", _EPILOG_ROOT, _cmd_root, _leaf_file_args
            ),
            Verb("prove", "inclusion or consistency proof", _EPILOG_PROVE, _cmd_prove, _prove_args),
            Verb(
                "check",
                "verify a proof",
                _EPILOG_CHECK,
                None,
                subverbs=(
                    Verb(
                        "inclusion",
                        "verify an inclusion proof",
                        _EPILOG_CHECK,
                        _cmd_check_inclusion,
                        _check_inclusion_args,
                    ),
                    Verb(
                        "consistency",
                        "verify a consistency proof",
                        _EPILOG_CHECK,
                        _cmd_check_consistency,
                        _check_consistency_args,
                    ),
                ),
            ),
        ),
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``tlog`` command."""
    return command().parser()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``tlog`` command with ``argv`` (default: ``sys.argv[1:]``); return the status.

    This is the one place where exceptions become exit statuses (:func:`tlog.cli.run.run`, with
    no rule of its own): VerificationError → 1; TlogError (MalformedError, UsageError), OSError
    and UnicodeDecodeError → 2; each with one line on standard error. ``--help`` exits 0
    through SystemExit, as argparse does.
    """
    return command().main(argv)


if __name__ == "__main__":
    sys.exit(main())
