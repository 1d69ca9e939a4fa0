"""The witness's add-checkpoint and sign-subtree handlers and their checks (:mod:`witness.server`).

The steps of add-checkpoint, the caches that make a resend cheap (configurations for
``config_ttl`` seconds, notes verified once, each log's stored checkpoint as this process last
saw it), the quota, the compare-and-swap through :mod:`witness.commit`, and the evidence of a
split view are described in the module docstring of :mod:`witness.server`, the one map of the
protocol. :class:`Cosigning` is the server's request handler object, built on the read-only
endpoints (:mod:`witness.monitoring`) and the request plumbing (:mod:`witness.plumbing`);
:func:`~witness.server.make_app` routes to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import math
import time
from collections.abc import Sequence
from typing import Any, Protocol

from aiohttp import web

from tlog.checkpoint import Checkpoint, SignedCheckpoint, open_checkpoint, origin_of
from tlog.cosignature import (
    TYPE_SUBTREE_V1,
    Subtree,
    SubtreeV1Signer,
    timestamp_of,
)
from tlog.encoding import b64encode
from tlog.errors import (
    MalformedError,
    ProofError,
    TlogError,
    UnverifiedNoteError,
    UsageError,
)
from tlog.keys import parse_vkey, verifier_for
from tlog.merkle import proven_prefix_root, verify_subtree_consistency
from tlog.note import Signature, Signer, Verifier, format_note, open_note
from tlog.witnessproto import (
    AddCheckpointRequest,
    ConflictError,
    SignSubtreeRequest,
    check_request,
    check_update,
    format_cosignature_response,
    origin_hash,
)
from witness.commit import GroupCommit
from witness.errors import (
    TEXT_CONTENT_TYPE,
    QuotaExceededError,
    UnknownLogError,
)
from witness.monitoring import MonitoringEndpoints
from witness.plumbing import INFO_KEY, LOG_FIELD, LOGGER_NAME, Clock
from witness.sqlstate import could_be_configured
from witness.state import Cosigned, LogConfig, WitnessState

__all__ = ["Cosigner", "Cosigning"]

_DAY = 86400
_MAX_SUBTREE_ORIGIN = 255  # bytes: the subtree/v1 struct's length prefix is one byte
_MAX_SWAPS = 3  # compare-and-swaps one request tries, each lost to another process, before 409
_MAX_CACHED_CONFIGS = 4096  # log configurations remembered (see Cosigning.log_config); each
# key is an origin of at most MAX_ORIGIN_BYTES (longer ones are refused before the cache), so
# the cache holds at most about 4096 * (512 + a configuration) bytes
_MAX_OPENED_BYTES = 8 << 20  # verified notes remembered (see Cosigning.open_checkpoint)
_MAX_CACHED_NOTE = 16384  # bytes: larger notes are verified every time


class Cosigner(Signer, Protocol):
    """A witness cosignature key: :class:`~tlog.cosignature.CosignatureV1Signer` (0x04) or
    :class:`~tlog.cosignature.SubtreeV1Signer` (0x06): a note signer that also tells its key
    and signs with a given timestamp."""

    @property
    def key_type(self) -> int: ...

    @property
    def public_key(self) -> bytes: ...

    def sign_at(self, text: bytes, timestamp: int) -> bytes: ...


@functools.lru_cache(maxsize=4096)
def _log_verifiers(keys: tuple[str, ...]) -> tuple[Verifier, ...]:
    """Parse a log's configured vkeys once; a key that does not parse is logged and skipped
    (it is the operator's mistake, not the client's: requests then get 403, not 400)."""
    out: dict[tuple[str, int, bytes], Verifier] = {}
    for vkey in keys:
        try:
            v = parse_vkey(vkey)
        except MalformedError as e:
            logging.getLogger(LOGGER_NAME).error(
                json.dumps({"event": "bad-configured-key", "vkey": vkey[:120], "error": str(e)})
            )
            continue
        # One key configured twice must not make open_note see an ambiguous (name, ID).
        out.setdefault((v.name, v.key_id, v.public_key), v)
    return tuple(out.values())


class _Latest:
    """A log's stored checkpoint as this process knows it, with this witness's cosignature
    lines on it and their timestamp ``cosig_ts`` (0 when none). ``floor`` is the least
    timestamp a new cosignature may carry: the later of ``cosig_ts`` and the stored state's
    time."""

    __slots__ = ("cosig_ts", "cosigs", "floor", "stored")

    def __init__(
        self, stored: Cosigned | None, cosigs: tuple[Signature, ...], cosig_ts: int
    ) -> None:
        self.stored = stored
        self.cosigs = cosigs
        self.cosig_ts = cosig_ts
        self.floor = max(cosig_ts, 0 if stored is None else stored.updated_at)

    def check(self, req: AddCheckpointRequest, cp: Checkpoint) -> None:
        """:func:`~tlog.witnessproto.check_update` against this state."""
        stored = self.stored
        if stored is None:
            check_update(0, None, req, cp)
        else:
            check_update(stored.size, stored.root, req, cp)


def _replayed(entry: _Latest, text: bytes, size: int, ts: int, signers: Sequence[Cosigner]) -> bool:
    """Whether checkpoint ``text`` of ``size``, to be cosigned at ``ts`` by ``signers``, is
    the stored one re-submitted in the second of the cosignatures ``entry`` holds on it, by
    the same signers: those cosignatures are then the answer, byte for byte."""
    stored = entry.stored
    return (
        stored is not None
        and ts == entry.cosig_ts
        and size == stored.size
        and [(c.name, c.key_id) for c in entry.cosigs] == [(s.name, s.key_id) for s in signers]
        and stored.note.startswith(text)
        and stored.note[len(text) : len(text) + 1] == b"\n"
    )


class Cosigning(MonitoringEndpoints):
    """The add-checkpoint and sign-subtree handlers and the per-process state they keep around
    a :class:`WitnessState`: configurations, verified notes and stored checkpoints, each
    cache bounded, and the origins' locks."""

    def __init__(
        self,
        state: WitnessState,
        signers: Sequence[Cosigner],
        *,
        name: str,
        clock: Clock,
        config_ttl: float,
        **plumbing: Any,
    ) -> None:
        self.signers = tuple(signers)
        super().__init__(
            state,
            name=name,
            own_verifiers=tuple(
                verifier_for(s.name, s.key_type, s.public_key) for s in self.signers
            ),
            config_ttl=config_ttl,
            **plumbing,
        )
        self.clock = clock
        self.subtree_signers = tuple(s for s in self.signers if isinstance(s, SubtreeV1Signer))
        self.locks: dict[str, asyncio.Lock] = {}
        self.configs: dict[str, tuple[LogConfig | None, float]] = {}  # origin -> (config, read at)
        self.latest: dict[str, _Latest] = {}  # origin -> what this process last saw stored
        self.opened: dict[tuple[bytes, tuple[str, ...]], SignedCheckpoint] = {}
        self.opened_bytes = 0  # note bytes held by self.opened (bounded: _MAX_OPENED_BYTES)
        self.commits = GroupCommit(state)

    async def log_config(self, origin: str) -> LogConfig:
        """The configuration of an enabled log (404 otherwise), read at most every
        ``config_ttl`` seconds per origin: ``add-key``, ``disable-log`` and the like, run by
        the operator while the server runs, take effect within that time."""
        if not could_be_configured(origin):
            # Longer than any configurable origin, or with a control character: no log can
            # have it, so no lookup and no cache entry (a 1 MB origin must cost nothing kept).
            raise UnknownLogError(origin)
        now = time.monotonic()
        cached = self.configs.get(origin)
        if cached is not None and now - cached[1] < self.config_ttl:
            config = cached[0]
        else:
            config = await self.call(self.state.log, origin)
            if len(self.configs) >= _MAX_CACHED_CONFIGS:
                self.configs.clear()  # unknown origins from a hostile client: start over
            self.configs[origin] = (config, now)
            if config is not None:
                self.origins[origin_hash(origin)] = origin
        if config is None:
            raise UnknownLogError(origin)
        if config.disabled:
            raise UnknownLogError(origin, disabled=True)
        return config

    def open_checkpoint(self, note: bytes, config: LogConfig) -> SignedCheckpoint:
        """:func:`~tlog.checkpoint.open_checkpoint` with the log's keys, remembered for the
        exact note bytes and key set: the verdict is a pure function of the two, and a client
        re-submitting its checkpoint should not cost a signature verification each time."""
        key = (note, config.keys)
        signed = self.opened.get(key)
        if signed is None:
            signed = open_checkpoint(note, _log_verifiers(config.keys))
            if len(note) <= _MAX_CACHED_NOTE:
                if self.opened_bytes + len(note) > _MAX_OPENED_BYTES:
                    self.opened.clear()
                    self.opened_bytes = 0
                self.opened[key] = signed
                # The note is held twice (the key and the parsed checkpoint's note).
                self.opened_bytes += 2 * len(note)
        return signed

    async def stored(self, origin: str, *, fresh: bool = False) -> tuple[_Latest, bool]:
        """The stored checkpoint of a log as this process last saw it, and whether that was
        read just now; ``fresh`` re-reads it.

        Caller holds the origin's lock. The kept value may be behind the database only when
        another process wrote it (workers, two servers on one state, an import): every decision
        taken from it that writes is checked again by the compare-and-swap, and every refusal
        is taken again on a fresh read (:meth:`accepting`).
        """
        entry = None if fresh else self.latest.get(origin)
        if entry is not None:
            return entry, False
        return self.remember(origin, await self.call(self.state.latest, origin)), True

    def remember(self, origin: str, stored: Cosigned | None) -> _Latest:
        """Keep ``stored`` (None: nothing stored) as ``origin``'s state, with this witness's
        own cosignature lines on it — verified: an imported note may carry lines in this
        witness's name that it never signed — and their latest timestamp."""
        cosigs: tuple[Signature, ...] = ()
        cosig_ts = 0
        if stored is not None:
            try:
                cosigs = open_note(stored.note, self.own_verifiers).sigs
            except UnverifiedNoteError:
                pass  # no line of ours (an imported checkpoint): the clock decides
            except TlogError as e:
                # A line in our name that does not verify, or a note that does not parse: none
                # of it is ours to repeat or to take a time from. The operator hears about it.
                self.logger.error(
                    json.dumps({"event": "stored-note-not-ours", "origin": origin, "error": str(e)})
                )
            for sig in cosigs:
                with contextlib.suppress(MalformedError):
                    cosig_ts = max(cosig_ts, timestamp_of(sig))
        entry = _Latest(stored, cosigs, cosig_ts)
        self.latest[origin] = entry
        return entry

    async def accepting(
        self, kept: tuple[_Latest, bool], req: AddCheckpointRequest, cp: Checkpoint, body: bytes
    ) -> _Latest:
        """The log's state (``kept``: as known, and whether just read), or a fresh read of it,
        if the request may update it; else the 409 or 422 (with evidence when the checkpoint
        contradicts the stored one), always decided on a fresh read. Caller holds the
        origin's lock."""
        entry, fresh = kept
        if not fresh:
            try:
                entry.check(req, cp)
                return entry
            except (ConflictError, ProofError):
                entry, _ = await self.stored(cp.origin, fresh=True)
        try:
            entry.check(req, cp)
        except (ConflictError, ProofError):
            if entry.stored is not None:
                await self.keep_if_proven(entry.stored, req, cp, body)
            raise
        return entry

    async def keep_if_proven(
        self, stored: Cosigned, req: AddCheckpointRequest, cp: Checkpoint, body: bytes
    ) -> None:
        """Keep the request as evidence when, with the stored note, it proves a split view by
        itself; anything else refused (a junk or wrong-length proof, a stale client) is the
        submitter's error and leaves no trace but its log line.

        Both notes carry valid signatures of the log's trusted keys (the request's was just
        opened with them; the stored one was, when it was accepted). Then either they name
        one size with two roots, or the request's consistency proof folds exactly to its own
        root from another root at the stored size (:func:`tlog.merkle.proven_prefix_root`).
        ``proves`` names that fork, so resending it (in either order, to any worker) adds
        nothing."""
        if cp.size == stored.size and cp.root != stored.root:
            low, high = sorted((cp.root, stored.root))
            reason = f"two different roots for size {cp.size}"
            proves = hashlib.sha256(b"same size\n%d\n" % cp.size + low + high).digest()
        elif (
            req.old == stored.size < cp.size
            and (prefix := proven_prefix_root(stored.size, cp.size, cp.root, req.proof)) is not None
            and prefix != stored.root
        ):
            # The root the proof gives is in the reason: with it, anyone can check the proof
            # (tlog check consistency --old-root <it>) and see it is not the stored root.
            reason = (
                f"the consistency proof from size {stored.size} to {cp.size} leads to the"
                f" request's root from root {b64encode(prefix)} at size {stored.size}"
            )
            proves = hashlib.sha256(
                b"inconsistent\n%d\n%d\n" % (stored.size, cp.size) + stored.root + cp.root
            ).digest()
        else:
            return
        await self.record_evidence(cp.origin, reason, body, stored, proves)

    async def check_quota(self, config: LogConfig) -> None:
        if config.qpd is None:
            return
        now = self.clock()
        day = int(now // _DAY)
        count = await self.call(self.state.count_request, config.origin, day)
        if count > config.qpd:
            retry_after = math.ceil((day + 1) * _DAY - now)
            raise QuotaExceededError(config.origin, config.qpd, retry_after)

    async def record_evidence(
        self, origin: str, reason: str, body: bytes, stored: Cosigned, proves: bytes
    ) -> None:
        at = int(self.clock())
        try:
            evidence_id = await asyncio.to_thread(
                functools.partial(
                    self.state.add_evidence, origin, reason, body, stored.note, at, proves=proves
                )
            )
        except Exception:
            self.logger.exception(json.dumps({"event": "evidence-not-stored", "origin": origin}))
            return
        if evidence_id is None:
            self.metrics.evidence_skipped += 1
        else:
            self.metrics.evidence += 1
        self.logger.warning(
            json.dumps(
                {
                    "event": "split-view",
                    "origin": origin,
                    "reason": reason,
                    # None: the same fork is kept already, or the log's evidence is full.
                    "evidence": evidence_id,
                }
            )
        )

    # --- handlers ------------------------------------------------------------------------

    async def add_checkpoint(self, request: web.Request) -> web.Response:
        info = request[INFO_KEY]
        body = await self.read_body(request)
        cosigs = await self.cosign(body, info)
        return web.Response(
            body=format_cosignature_response(cosigs),
            headers={"Content-Type": TEXT_CONTENT_TYPE},
        )

    async def cosign(self, body: bytes, info: dict[str, Any]) -> list[Signature]:
        """add-checkpoint after the body is read: every step of :mod:`witness.server` from the
        parse to the durable compare-and-swap, then this witness's cosignature lines (already
        committed). The one path to a cosignature of a log's checkpoint, for a POST as for
        ``tlog-witness feed`` (:mod:`witness.feed`), which hands it the body a client would
        have sent. Refusals raise what :mod:`witness.errors` maps to a status (a 409 is a
        :class:`~tlog.witnessproto.ConflictError`, a 422 a ProofError, 404 UnknownLogError,
        ...); ``info`` receives the log fields of the request."""
        req = AddCheckpointRequest.parse(body)
        info["old"] = req.old
        origin = origin_of(req.checkpoint)
        info["origin"] = origin[:LOG_FIELD]
        config = await self.log_config(origin)
        signed = self.open_checkpoint(req.checkpoint, config)
        cp = signed.checkpoint
        info["size"] = cp.size
        check_request(req, cp)
        signers = self._signers_for(origin)
        lock = self.locks.setdefault(origin, asyncio.Lock())
        counted = False
        async with lock:
            kept = await self.stored(origin)
            for _ in range(_MAX_SWAPS):
                entry = await self.accepting(kept, req, cp, body)
                if not counted and (entry.stored is None or cp.size > entry.stored.size):
                    # Only a checkpoint that moves the log on uses its quota: a resend of the
                    # stored one, a 409 or a 422 costs little, and anyone can replay the public
                    # checkpoint, which must not spend the log's quota for it.
                    counted = True
                    await self.check_quota(config)
                ts = max(int(self.clock()), entry.floor)
                if ts <= 0:
                    raise UsageError("the clock reads a time at or before 1970: refusing to cosign")
                text = signed.note.text
                stored = entry.stored
                if _replayed(entry, text, cp.size, ts, signers):
                    # The stored checkpoint re-submitted in the second of our cosignatures on
                    # it: they are the answer (Ed25519 would sign the same bytes again),
                    # already durable; no signing, no write. (If another process has moved the
                    # log on since this one cached it, the answer is still a cosignature this
                    # witness gave, byte for byte: what a client that kept it has anyway.)
                    info["replay"] = True
                    cosigs = list(entry.cosigs)
                    break
                cosigs = [Signature(s.name, s.key_id, s.sign_at(text, ts)) for s in signers]
                note = format_note(text, [*signed.note.sigs, *cosigs])
                new = Cosigned(origin, cp.size, cp.root, note, ts)
                try:
                    swapped = await self.commits.swap(stored, new)
                except BaseException:
                    self.latest.pop(origin, None)  # whether it landed is unknown: re-read
                    raise
                if swapped:
                    self.latest[origin] = _Latest(new, tuple(cosigs), ts)
                    break
                # Another process moved this log (or its time) between our read and our write:
                # decide again on what is stored now.
                info["lost_race"] = info.get("lost_race", 0) + 1
                kept = await self.stored(origin, fresh=True)
            else:
                latest = kept[0].stored
                raise ConflictError(0 if latest is None else latest.size)
        self.metrics.cosignatures += len(cosigs)
        return cosigs

    def _signers_for(self, origin: str) -> list[Cosigner]:
        """This witness's signers that can cosign ``origin`` (ML-DSA-44 subtree/v1 names
        origins of at most 255 bytes); UsageError when none can."""
        signers = [
            s
            for s in self.signers
            if s.key_type != TYPE_SUBTREE_V1 or len(origin.encode("utf-8")) <= _MAX_SUBTREE_ORIGIN
        ]
        if not signers:
            raise UsageError(
                f"no signer of this witness can cosign origin {origin[:80]!r} "
                "(ML-DSA-44 subtree/v1 names origins of at most 255 bytes)"
            )
        return signers

    async def sign_subtree(self, request: web.Request) -> web.Response:
        info = request[INFO_KEY]
        body = await self.read_body(request)
        req = SignSubtreeRequest.parse(body)
        info["start"], info["end"] = req.start, req.end
        origin = origin_of(req.checkpoint)
        info["origin"] = origin[:LOG_FIELD]
        await self.log_config(origin)
        if len(origin.encode("utf-8")) > _MAX_SUBTREE_ORIGIN:
            raise MalformedError("a subtree/v1 cosignature names origins of at most 255 bytes")
        # Stateless: the reference checkpoint is trusted through this witness's own signature.
        signed = open_checkpoint(req.checkpoint, self.own_verifiers)
        cp = signed.checkpoint
        info["size"] = cp.size
        if req.end > cp.size:
            raise MalformedError(f"subtree end {req.end} is beyond the checkpoint's size {cp.size}")
        verify_subtree_consistency(req.start, req.end, cp.size, req.proof, req.hash, cp.root)
        subtree = Subtree(origin, req.start, req.end, req.hash)
        sigs = [
            Signature(s.name, s.key_id, s.sign_subtree(subtree, 0)) for s in self.subtree_signers
        ]
        return web.Response(
            body=format_cosignature_response(sigs),
            headers={"Content-Type": TEXT_CONTENT_TYPE},
        )
