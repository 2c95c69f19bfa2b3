import sys

from bench.ingest.main import main

sys.exit(main())
