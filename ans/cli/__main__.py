"""``python -m ans.cli``: the same as the ``ans`` command."""

import sys

from . import main

sys.exit(main())
