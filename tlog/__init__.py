"""tlog: the wire and file formats of transparency logs, pure and exact.

One module per concept, each module docstring being the format's definition:

* :mod:`tlog.encoding` — the strict decimal, base64 and hash spellings every format shares;
* :mod:`tlog.merkle` — RFC 6962 hashing, stored hashes, inclusion and consistency proofs;
* :mod:`tlog.note` — C2SP signed-note: keys, key IDs, signing and opening notes;
* :mod:`tlog.checkpoint` — C2SP tlog-checkpoint note texts;
* :mod:`tlog.cosignature` — C2SP tlog-cosignature (Ed25519 cosignature/v1, ML-DSA-44 subtree/v1);
* :mod:`tlog.keys` — verifier keys (vkeys) and signer key files of every supported type;
* :mod:`tlog.proof` — C2SP tlog-proof@v1 files;
* :mod:`tlog.policy` — C2SP tlog-policy files and their evaluation;
* :mod:`tlog.tiles` — C2SP tlog-tiles paths and tile math.

Nothing here does I/O except the command-line layer :mod:`tlog.cli`, which no format module
imports: the ``tlog`` command (:mod:`tlog.cli.command`), and :mod:`tlog.cli.run` and
:mod:`tlog.cli.files`, the plumbing (verbs declared once, one error line on stderr, the exit
statuses, input files, atomic output files) that all four commands share.
Errors are the small hierarchy of :mod:`tlog.errors`.
"""
