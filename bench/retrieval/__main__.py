import sys

from bench.retrieval.main import main

sys.exit(main())
