"""Tests of tlog: one file per concept (test_note.py, test_checkpoint.py, test_cosignature.py,
test_witnessproto.py, test_merkle*.py, test_tiles.py, test_proof.py, test_policy.py,
test_journal.py, test_export_*.py), the tlog command (test_cli.py), properties across them
(test_properties.py) and the C accelerator (test_speedups.py).

The edge cases an implementation most often gets wrong are numbered; a test named
``test_edge_NN_*`` (here, in tests/witness/ and elsewhere) checks case NN, and a comment
"edge case NN" points here. Each case is a rule of the spec named with it:

1. em dash prefix of signature lines; 2. a note splits at its last blank line, a witness
request at its first; 3. the signed bytes (final LF in, separator out); 4. the key ID preimage;
5. vkeys split on the first two '+'; 6. a vkey's declared ID is checked; 7. unknown vs known
keys — all signed-note (https://c2sp.org/signed-note).
8. one key as 0x01 and 0x04 has two IDs and two messages; 9. Ed25519 cosignatures cover
extension lines, ML-DSA ones do not; 10. timestamps: 8 bytes, at most 2^63-1, non-zero in
add-checkpoint responses, zero for sign-subtree — tlog-cosignature
(https://c2sp.org/tlog-cosignature).
11. the add-checkpoint statuses (404 unknown origin, 403, 400, 409, 422); 12. the 409 body and
its Content-Type; 13. size 0: library vs witness semantics; 14. equal sizes; 15. the atomic
compare-and-swap; 16. durability after a 200; 17. strict integers; 18. strict hashes; 19. at
most 63 proof lines — tlog-witness (https://c2sp.org/tlog-witness), the proofs RFC 6962
(https://www.rfc-editor.org/rfc/rfc6962).
20. the power-of-two prepend of consistency verification; 21. the inner shift loop — RFC 6962
as RFC 9162 verifies it (https://www.rfc-editor.org/rfc/rfc9162).
22. canonical tile indexes; 23. partial tile widths; 24. path schemes; 25. publish order;
26. entry bundles — tlog-tiles (https://c2sp.org/tlog-tiles).
27. the empty tree's root is not the empty leaf's hash — RFC 6962.
28. strict checkpoint parsing — tlog-checkpoint (https://c2sp.org/tlog-checkpoint).
29. signature count and size limits — signed-note; 30. the monitoring path; 31. keys chosen
by origin, whatever their name — tlog-witness.
32. control characters, no CRLF normalisation; 33. duplicate signature lines — signed-note.
34. duplicate keys in a policy — tlog-policy (https://c2sp.org/tlog-policy).
"""
