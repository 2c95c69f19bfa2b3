import sys

from bench.advantages.main import main

sys.exit(main())
