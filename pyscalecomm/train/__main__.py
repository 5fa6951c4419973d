import sys

from pyscalecomm.train.cli import main

sys.exit(main())
