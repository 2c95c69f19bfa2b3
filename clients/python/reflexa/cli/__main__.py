"""``python -m reflexa.cli``: the same as the ``reflexa`` command."""

import sys

from reflexa.cli import main

sys.exit(main())
