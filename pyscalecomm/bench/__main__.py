import sys

from pyscalecomm.bench.cli import main

sys.exit(main())
