"""The durable journal of runs and its per-tenant RFC 6962 Merkle log.

Not yet implemented: see the project's issue on the journal store.
"""
