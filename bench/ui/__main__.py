import sys

from bench.ui.main import main

sys.exit(main())
