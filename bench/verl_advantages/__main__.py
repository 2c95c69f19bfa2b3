import sys

from bench.verl_advantages.main import main

sys.exit(main())
