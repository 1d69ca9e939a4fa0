"""The journal store's signed checkpoints: signing, merging cosignatures, importing.

A tenant's log keeps signed checkpoint notes (table ``checkpoint``, one per size). The log
signs with its key (:meth:`CheckpointNotes.sign_checkpoint`); witnesses' cosignature lines
are merged in (:meth:`CheckpointNotes.add_cosignatures`) only from keys the caller declares
and only when they verify, so that a kept note holds only lines an export can carry; restore
brings notes back as they were (:meth:`CheckpointNotes.import_checkpoint`).

The witness keys of the kept lines are remembered (table ``witness_key``,
:mod:`store.schema`): ``add_cosignatures`` remembers, in its transaction, every declared key
that has a line in the merged note (a line kept by an earlier call counts when it verifies under
the key declared now, so that merging again teaches a store from before the table the keys of
its old lines); restore remembers the export's declared keys
(:meth:`CheckpointNotes.remember_witness_keys`); an export declares every remembered key
(:meth:`CheckpointNotes.remembered_witness_keys`).
"""

from __future__ import annotations

from collections.abc import Sequence

from store.api import declared_keys
from store.db import Tx
from store.errors import CorruptError
from store.schema import stored_int, stored_note, stored_text
from store.sqlcore import SQLCore
from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.errors import InvalidSignatureError, MalformedError, UsageError
from tlog.keys import cosigner_from_vkey, format_vkey, parse_vkey
from tlog.note import (
    MAX_SIGNATURES,
    TYPE_ED25519,
    Signature,
    Verifier,
    add_signatures,
    key_id,
    parse_note,
    sign_note,
)


def _witness_verifiers(witness_keys: Sequence[str]) -> dict[tuple[str, int], Verifier]:
    """(key name, key ID) -> cosignature verifier, for the witness vkeys a caller declares."""
    declared = declared_keys(witness_keys, "witness", cosigner_from_vkey)
    return {(v.name, v.key_id): v for v in declared.values()}


def _unkeepable(s: Signature, witness_keys: Sequence[str]) -> str:
    """Why a signature line that is neither the log's nor a declared witness's is refused."""
    for vkey in witness_keys:
        v = parse_vkey(vkey)
        if v.name == s.name and key_id(v.name, TYPE_ED25519, v.public_key) == s.key_id:
            return (
                f"the signature line of {s.name}+{s.key_id:08x} is a plain Ed25519 signature "
                f"(type 0x01) by the key of witness {format_vkey(cosigner_from_vkey(vkey))}: a "
                "witness must cosign with cosignature/v1 (type 0x04) or subtree/v1 (0x06); an "
                "export could not carry this line, so it is not kept"
            )
    return (
        f"the signature line of {s.name}+{s.key_id:08x} is from no declared witness key: "
        "declare the witness's vkey (tlog-store publish --witness-key VKEY, or witness_keys= "
        "in Python) to keep it"
    )


class CheckpointNotes(SQLCore):
    """The checkpoint notes of :class:`store.sql.SQLStore`."""

    # --- published checkpoints -----------------------------------------------------------------

    def sign_checkpoint(self) -> bytes:
        """Sign the current checkpoint with the log key (name = origin), keep it, return the
        note as kept (an already kept note for that size, with its cosignatures, wins).

        Requires: the store was opened with its log key (UsageError otherwise). A kept note of
        the same size with another text is CorruptError: a log never signs two roots for one
        size.
        """
        signer = self._log_signer
        if signer is None:
            raise UsageError("signing a checkpoint needs the log key: open the store with it")
        tenant = self._tenant

        def work(tx: Tx) -> bytes:
            size = self._log_size(tx)
            text = Checkpoint(self._origin, size, merkle.tree_hash(size, self._reader(tx))).format()
            note = sign_note(text, [signer])
            if tx.execute(
                "INSERT INTO checkpoint (tenant, size, note) VALUES (?, ?, ?)"
                " ON CONFLICT (tenant, size) DO NOTHING",
                (tenant, size, note),
            ):
                return note
            row = tx.one(
                "SELECT note FROM checkpoint WHERE tenant = ? AND size = ?", (tenant, size)
            )
            assert row is not None
            kept, kept_text, _ = stored_note(row[0], f"checkpoint {size}")
            if kept_text != text:
                raise CorruptError(
                    f"the kept checkpoint of size {size} has another text: the log would sign"
                    " two roots for one size"
                )
            return kept

        return self._write(work)

    def _cosignature_lines(
        self, text: bytes, sigs: Sequence[Signature], witnesses: dict[tuple[str, int], Verifier]
    ) -> list[Signature]:
        """The lines of a note to merge (:meth:`add_cosignatures`): all but the log's, which
        must verify; a declared witness's must verify too; another key under the log's name
        is refused."""
        log = self._log_verifier
        others: list[Signature] = []
        for s in sigs:
            if s.name == log.name and s.key_id == log.key_id:
                if not log.verify(text, s.sig):
                    raise InvalidSignatureError(s.name, s.key_id)
                continue
            w = witnesses.get((s.name, s.key_id))
            if w is not None:
                if not w.verify(text, s.sig):
                    raise InvalidSignatureError(s.name, s.key_id)
            elif s.name == log.name:
                raise UsageError(f"the note has a line for {s.name} from another key")
            others.append(s)
        return others

    def add_cosignatures(self, note: bytes, *, witness_keys: Sequence[str]) -> bytes:
        """Merge the signature lines of ``note`` into the kept note with the same text.

        ``note`` must parse as a checkpoint of this log (MalformedError / UsageError) whose text
        equals a kept note's (UsageError otherwise). A line under the log's key name must be
        the log's valid signature (InvalidSignatureError, or UsageError for another key ID).
        ``witness_keys`` are the vkeys of the witnesses whose cosignatures may be kept (0x04 or
        0x06; a 0x01 vkey is read as its cosignature/v1 form, :func:`tlog.keys.cosigner_from_vkey`).
        Every other line that is not already in the kept note byte for byte must be from one of
        them and verify (InvalidSignatureError); a line of any other key — a plain Ed25519
        (0x01) signature of a witness key included, which no export could carry — is refused
        (UsageError). So the kept note holds only lines an export can carry and that verify. A
        key that already has a line in the kept note keeps it. Nothing is written when it
        raises. Returns the note as kept.
        """
        if not isinstance(note, bytes):
            raise UsageError("a note is bytes")
        witnesses = _witness_verifiers(witness_keys)
        text, sigs = parse_note(note)
        cp = Checkpoint.parse(text)
        if cp.origin != self._origin:
            raise UsageError(f"the note is a checkpoint of {cp.origin!r}, not of {self._origin!r}")
        log = self._log_verifier
        others = self._cosignature_lines(text, sigs, witnesses)
        tenant = self._tenant

        def work(tx: Tx) -> bytes:
            row = tx.one(
                "SELECT note FROM checkpoint WHERE tenant = ? AND size = ?"  # noqa: S608
                + self._d.lock_suffix,
                (tenant, cp.size),
            )
            if row is None:
                raise UsageError(f"no checkpoint of size {cp.size} was signed by this store")
            kept, kept_text, kept_sigs = stored_note(row[0], f"checkpoint {cp.size}")
            if kept_text != text:
                raise UsageError(
                    f"the note's text is not that of the kept checkpoint of size {cp.size}"
                )
            have = {(s.name, s.key_id) for s in kept_sigs}
            extra: list[Signature] = []
            for s in others:
                if s in kept_sigs:
                    continue  # kept already (verified when it was kept)
                if (s.name, s.key_id) not in witnesses:
                    raise UsageError(_unkeepable(s, witness_keys))
                if (s.name, s.key_id) not in have:
                    have.add((s.name, s.key_id))
                    extra.append(s)
            # The witnesses of the merged note's lines: the new lines verified above, a kept
            # line when it verifies under the key declared now.
            signed = [
                w
                for s in [*kept_sigs, *extra]
                if (w := witnesses.get((s.name, s.key_id))) is not None
                and (s.name, s.key_id) != (log.name, log.key_id)
                and (s in extra or w.verify(text, s.sig))
            ]
            if signed:
                self._remember(tx, signed)
            if not extra:
                return kept
            if len(kept_sigs) + len(extra) > MAX_SIGNATURES:
                raise UsageError(f"the merged note would carry more than {MAX_SIGNATURES} lines")
            merged = add_signatures(kept, extra)
            tx.execute(
                "UPDATE checkpoint SET note = ? WHERE tenant = ? AND size = ?",
                (merged, tenant, cp.size),
            )
            return merged

        return self._write(work)

    def import_checkpoint(self, note: bytes) -> None:
        """Keep ``note`` as given: a checkpoint of this log, signed by its key, whose text is
        this store's checkpoint text at its size (the root from the stored hashes).

        Malformed notes raise MalformedError. A note of another origin, with two lines for one
        key, without the log's line, with a log-name line of another key, of a size beyond
        the log, or whose text is not this log's at its size is a UsageError; an invalid log
        signature is an InvalidSignatureError. When a note of that size is kept already, the
        same bytes change nothing and different bytes are a UsageError. Cosignature lines are
        not verified (the caller did). Nothing is written when it raises.
        """
        if not isinstance(note, bytes):
            raise UsageError("a note is bytes")
        text, sigs = parse_note(note)
        cp = Checkpoint.parse(text)
        if cp.origin != self._origin:
            raise UsageError(f"the note is a checkpoint of {cp.origin!r}, not of {self._origin!r}")
        if note.count(b"\n") - text.count(b"\n") - 1 != len(sigs):
            # parse_note returns byte-identical repeated lines once; keep no such note.
            raise UsageError(f"checkpoint of size {cp.size}: the note repeats a signature line")
        log = self._log_verifier
        keys: set[tuple[str, int]] = set()
        for s in sigs:
            k = (s.name, s.key_id)
            if k in keys:
                raise UsageError(
                    f"checkpoint of size {cp.size}: two lines for the key {s.name}+{s.key_id:08x}"
                )
            keys.add(k)
            if s.name == log.name:
                if s.key_id != log.key_id:
                    raise UsageError(f"the note has a line for {s.name} from another key")
                if not log.verify(text, s.sig):
                    raise InvalidSignatureError(s.name, s.key_id)
        if (log.name, log.key_id) not in keys:
            raise UsageError(f"checkpoint of size {cp.size} carries no signature of the log key")
        tenant = self._tenant

        def work(tx: Tx) -> None:
            size = self._log_size(tx)
            if cp.size > size:
                raise UsageError(f"checkpoint of size {cp.size} is beyond the log's size {size}")
            own = Checkpoint(self._origin, cp.size, merkle.tree_hash(cp.size, self._reader(tx)))
            if own.format() != text:
                raise UsageError(
                    f"the note's text is not this log's checkpoint of size {cp.size}"
                    " (another root, or extension lines)"
                )
            if tx.execute(
                "INSERT INTO checkpoint (tenant, size, note) VALUES (?, ?, ?)"
                " ON CONFLICT (tenant, size) DO NOTHING",
                (tenant, cp.size, note),
            ):
                return
            row = tx.one(
                "SELECT note FROM checkpoint WHERE tenant = ? AND size = ?", (tenant, cp.size)
            )
            assert row is not None
            kept, _, _ = stored_note(row[0], f"checkpoint {cp.size}")
            if kept != note:
                raise UsageError(f"another note of size {cp.size} is kept already")

        self._write(work)

    # --- remembered witness keys --------------------------------------------------------------

    def _remember(self, tx: Tx, witnesses: Sequence[Verifier]) -> None:
        """Remember each of ``witnesses`` (cosignature verifiers); UsageError when one has the
        (key name, key ID) of another key remembered already."""
        now = self._now(tx)
        for v in witnesses:
            text = format_vkey(v)
            if tx.execute(
                "INSERT INTO witness_key (tenant, name, key_id, vkey, first_seen)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, name, key_id) DO NOTHING",
                (self._tenant, v.name, v.key_id, text, now),
            ):
                continue
            row = tx.one(
                "SELECT vkey FROM witness_key WHERE tenant = ? AND name = ? AND key_id = ?",
                (self._tenant, v.name, v.key_id),
            )
            assert row is not None
            held = stored_text(row[0], "witness key")
            if held != text:
                raise UsageError(
                    f"witness key {text} has the name and key ID of the remembered witness key"
                    f" {held}"
                )

    def remember_witness_keys(self, vkeys: Sequence[str]) -> None:
        """Remember ``vkeys`` as this tenant's witness keys (see :mod:`store.api`): read as
        :meth:`add_cosignatures` reads them, refused (UsageError, nothing written) when
        malformed, with the log key's name and key ID, or with the name and key ID of another
        key given or remembered."""
        declared = declared_keys(vkeys, "witness", cosigner_from_vkey)
        log = self._log_verifier
        for text, v in declared.items():
            if (v.name, v.key_id) == (log.name, log.key_id):
                raise UsageError(f"witness key {text} has the log key's name and key ID")
        if declared:
            self._write(lambda tx: self._remember(tx, list(declared.values())))

    def remembered_witness_keys(self) -> list[str]:
        """The remembered witness vkeys (canonical, 0x04 or 0x06), by key name and key ID; a
        stored key that does not parse, or is not its row's name and key ID, is CorruptError."""
        rows = self._read(
            lambda tx: tx.all(
                "SELECT name, key_id, vkey FROM witness_key WHERE tenant = ? ORDER BY name, key_id",
                (self._tenant,),
            )
        )
        out: list[str] = []
        for name, kid, vkey in rows:
            text = stored_text(vkey, "witness key")
            try:
                v = cosigner_from_vkey(text)
            except MalformedError as e:
                raise CorruptError(f"stored witness key {text[:60]!r}: {e}") from None
            if format_vkey(v) != text or (v.name, v.key_id) != (
                stored_text(name, "witness key name"),
                stored_int(kid, "witness key ID"),
            ):
                raise CorruptError(f"stored witness key {text!r} is not its row's key")
            out.append(text)
        return out

    def published(self) -> list[bytes]:
        """Every kept checkpoint note, by increasing size."""
        rows = self._read(
            lambda tx: tx.all(
                "SELECT size, note FROM checkpoint WHERE tenant = ? ORDER BY size",
                (self._tenant,),
            )
        )
        return [stored_note(note, f"checkpoint {size}")[0] for size, note in rows]


__all__ = ["CheckpointNotes"]
