"""``python -m tlog.cli``: the ``tlog`` command (as before the command-line layer was one
subpackage), the same as ``python -m tlog.cli.command``."""

import sys

from tlog.cli.command import main

sys.exit(main())
