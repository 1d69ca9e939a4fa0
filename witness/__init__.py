"""The C2SP tlog-witness server, its state, its operator CLI and its client.

Not yet implemented: see the project's issue on the witness.
"""
