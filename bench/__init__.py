"""Benchmarks of tlog-toolkit against plain-hashlib floors and peer libraries (``make bench``)."""
