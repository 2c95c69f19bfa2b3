import sys

from bench.reflect.main import main

sys.exit(main())
