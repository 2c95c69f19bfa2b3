import sys

from bench.distill.main import main

sys.exit(main())
