"""``python -m pyscalecomm doctor|info``: see pyscalecomm.doctor."""

import sys

from pyscalecomm.doctor import main

sys.exit(main())
