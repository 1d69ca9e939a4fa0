"""tlog: the wire and file formats of transparency logs, pure and exact.

One module per concept, each module docstring being the format's definition. ``import tlog``
loads none of them (import the module you use); ``__all__`` lists them, and the key names of
each are:

* :mod:`tlog.encoding` — the strict decimal, base64 and hash spellings every format shares:
  ``parse_decimal``, ``b64decode``, ``b64encode``, ``parse_hash``, ``MAX_INT63``;
* :mod:`tlog.merkle` — RFC 6962 hashing, stored hashes, inclusion and consistency proofs:
  ``leaf_hash``, ``node_hash``, ``root``, ``MemoryHashStore``, ``inclusion_proof``,
  ``consistency_proof``, ``verify_inclusion``, ``verify_consistency``, ``EMPTY_ROOT``;
* :mod:`tlog.note` — C2SP signed-note: ``Verifier``, ``Signer``, ``Ed25519Signer``,
  ``Signature``, ``Note``, ``parse_note``, ``open_note``, ``sign_note``, ``add_signatures``;
* :mod:`tlog.checkpoint` — C2SP tlog-checkpoint note texts: ``Checkpoint``,
  ``SignedCheckpoint``, ``open_checkpoint``;
* :mod:`tlog.cosignature` — C2SP tlog-cosignature (Ed25519 cosignature/v1, ML-DSA-44
  subtree/v1): ``CosignatureV1Signer``, ``CosignatureV1Verifier``, ``SubtreeV1Signer``,
  ``SubtreeV1Verifier``, ``timestamp_of``;
* :mod:`tlog.keys` — verifier keys (vkeys) and signer key files of every supported type:
  ``parse_vkey``, ``format_vkey``, ``cosigner_from_vkey``, ``parse_signer_key``,
  ``generate_key``, ``SignerKey``;
* :mod:`tlog.proof` — C2SP tlog-proof@v1 files: ``TlogProof``, ``build_proof``,
  ``verify_proof``;
* :mod:`tlog.policy` — C2SP tlog-policy files: ``Policy``, ``Log``, ``Witness``, ``Group``;
  and :mod:`tlog.quorum`, what a policy says of a signed checkpoint (``tlog.policy`` exports
  its names too): ``TimePolicy``, ``PolicyResult``, ``QuorumError``, ``Policy.evaluate``;
* :mod:`tlog.tiles` — C2SP tlog-tiles paths and tile math: ``Tile``, ``Bundle``,
  ``parse_tile_path``, ``tiles_for_size``, ``hash_from_tile``;
* :mod:`tlog.witnessproto` — C2SP tlog-witness request and response bodies:
  ``AddCheckpointRequest``, ``SignSubtreeRequest``, ``ConflictError``, ``check_request``;
* :mod:`tlog.journal` — the journal's record format and hash chain (this toolkit's own):
  ``Body``, ``Record``, ``make_record``, ``chain_hash``, ``verify_chain``, ``canonical_json``,
  ``ChainError``, ``GENESIS``;
* :mod:`tlog.export` — the journal export file format: writing it, reading and checking it;
* :mod:`tlog.errors` — the small hierarchy every module raises: ``TlogError``, its
  ``MalformedError`` (does not parse), ``VerificationError`` (parses, does not verify: its
  ``UnverifiedNoteError``, ``InvalidSignatureError``, ``ProofError``, ``PolicyError``) and
  ``UsageError`` (a broken precondition).

Nothing here does I/O except the command-line layer :mod:`tlog.cli`, which no format module
imports: the ``tlog`` command (:mod:`tlog.cli.command`), and :mod:`tlog.cli.run` and
:mod:`tlog.cli.files`, the plumbing (verbs declared once, one error line on stderr, the exit
statuses, input files, atomic output files) that all four commands share.
"""

__all__ = [
    "checkpoint",
    "cli",
    "cosignature",
    "encoding",
    "errors",
    "export",
    "journal",
    "keys",
    "merkle",
    "note",
    "policy",
    "proof",
    "quorum",
    "tiles",
    "witnessproto",
]
