import sys

from bench.freshness.main import main

sys.exit(main())
