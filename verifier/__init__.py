"""The offline auditor: exports, tlog-proof files, checkpoints and policies.

Not yet implemented: see the project's issue on the verifier.
"""
