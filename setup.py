"""The one thing pyproject.toml cannot declare without a warning: the optional C extension.

``tlog._speedups`` (tlog/_speedups.c) is the export verifiers' record fast path: canonical-body
check, base64 hash and the SHA-256 chain through OpenSSL's libcrypto. It is optional: without a C
compiler or the OpenSSL headers the install goes on and the pure-Python paths decide alone (slower,
same verdicts). Declared here rather than as ``[tool.setuptools.ext-modules]``, which setuptools
still calls experimental and warns about on every build. Everything else is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tlog._speedups",
            sources=["tlog/_speedups.c"],
            libraries=["crypto"],
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Werror=implicit-function-declaration"],
            optional=True,
        )
    ]
)
