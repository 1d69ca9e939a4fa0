"""A tour of the tlog core, run by ``make run``: every step prints what it does and what it got.

1. keys: a log key (Ed25519) and two witness keys (Ed25519 cosignature/v1, ML-DSA-44 subtree/v1),
   in the Go ``PRIVATE+KEY+…`` format, with their vkeys;
2. a log of 1,000 entries kept as stored hashes, and its signed checkpoint;
3. the two witnesses cosign it;
4. a tlog-policy asks for both witnesses, and the checkpoint is verified against it;
5. an inclusion proof is written as a tlog-proof@v1 file and verified offline;
6. the log grows, a new checkpoint is signed, and a consistency proof between the two is checked
   the way a witness does;
7. tampering is caught: a changed byte, a proof for the wrong entry.

It exits 0 when every check came out as expected, 1 otherwise.
"""

from __future__ import annotations

import sys
import time

from tlog import merkle
from tlog.checkpoint import Checkpoint
from tlog.cosignature import TYPE_COSIGNATURE_V1, TYPE_SUBTREE_V1, timestamp_of
from tlog.errors import TlogError
from tlog.keys import generate_key
from tlog.note import TYPE_ED25519, Signature, add_signatures, parse_note, sign_note
from tlog.policy import Policy
from tlog.proof import TlogProof, build_proof, verify_proof
from tlog.witnessproto import AddCheckpointRequest, check_update

ORIGIN = "example.com/tour/log"


def step(title: str) -> None:
    print(f"\n== {title}")


def show(label: str, value: object) -> None:
    print(f"   {label:<22} {value}")


def main() -> int:
    started = time.perf_counter()

    step("1. keys (Go note key format)")
    log_key = generate_key(ORIGIN, TYPE_ED25519)
    w1_key = generate_key("witness.example/w1", TYPE_COSIGNATURE_V1)
    w2_key = generate_key("witness.example/w2", TYPE_SUBTREE_V1)
    log_signer, w1, w2 = log_key.signer(), w1_key.signer(), w2_key.signer()
    show("log key file", log_key.format()[:48] + "…")
    show("log vkey", log_key.vkey())
    show("witness 1 vkey", w1_key.vkey())
    show("witness 2 vkey", w2_key.vkey()[:60] + f"… ({len(w2_key.vkey())} chars)")

    step("2. a log of 1,000 entries and its signed checkpoint")
    entries = [f"entry {i}\n".encode() for i in range(1000)]
    store = merkle.MemoryHashStore()
    store.extend(merkle.leaf_hash(e) for e in entries)
    show("stored hashes", f"{len(store.hashes)} for {store.size} leaves")
    cp = Checkpoint(ORIGIN, store.size, store.root())
    note = sign_note(cp.format(), [log_signer])
    print("   " + note.decode().replace("\n", "\n   ").rstrip())

    step("3. two witnesses cosign it")
    text, _ = parse_note(note)
    cosigs = [Signature(s.name, s.key_id, s.sign(text)) for s in (w1, w2)]
    note = add_signatures(note, cosigs)
    for sig in cosigs:
        show(sig.name, f"timestamp {timestamp_of(sig)}, {len(sig.line())} bytes")

    step("4. verify against a tlog-policy")
    policy_text = (
        f"log {log_key.vkey()}\n"
        f"witness w1 {w1_key.vkey()}\n"
        f"witness w2 {w2_key.vkey()}\n"
        "group both all w1 w2\n"
        "quorum both\n"
    ).encode()
    policy = Policy.parse(policy_text)
    result = policy.verify(note)
    show("log signature", result.log.verifier.name)
    show("quorum 'both'", f"met by {', '.join(sorted(result.satisfied))}")

    step("5. an inclusion proof as a tlog-proof@v1 file, verified offline")
    index = 737
    proof = build_proof(index, note, store)
    data = proof.format()
    show("file", f"{len(data)} bytes, {len(proof.hashes)} proof hashes")
    verify_proof(
        TlogProof.parse(data),
        merkle.leaf_hash(entries[index]),
        policy.log_verifiers,
        origin=ORIGIN,
        cosigners=policy.witness_verifiers,
    )
    policy.verify(proof.checkpoint)
    show("entry 737", "is in the log at size 1000, and the checkpoint meets the quorum")

    step("6. the log grows; a witness checks consistency")
    more = [f"entry {i}\n".encode() for i in range(1000, 1300)]
    store.extend(merkle.leaf_hash(e) for e in more)
    new_cp = Checkpoint(ORIGIN, store.size, store.root())
    new_note = sign_note(new_cp.format(), [log_signer])
    cons = merkle.consistency_proof(1000, store.size, store)
    request = AddCheckpointRequest(1000, tuple(cons), new_note)
    check_update(1000, cp.root, AddCheckpointRequest.parse(request.format()), new_cp)
    show("consistency 1000→1300", f"{len(cons)} hashes, verified as a witness would")

    step("7. tampering is caught")
    failures = 0
    bad = note.replace(b"\n1000\n", b"\n1001\n")
    try:
        policy.verify(bad)
        failures += 1
        show("changed size", "NOT DETECTED")
    except TlogError as e:
        show("changed size", f"refused: {e}")
    try:
        verify_proof(proof, merkle.leaf_hash(entries[index + 1]), policy.log_verifiers)
        failures += 1
        show("wrong entry", "NOT DETECTED")
    except TlogError as e:
        show("wrong entry", f"refused: {e}")

    print(f"\nTour finished in {time.perf_counter() - started:.2f} s.")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
