"""scalecomm: collective communication for PyTorch.

``import pyscalecomm`` registers the ``"scalecomm"`` backend with
``torch.distributed``; afterwards ``dist.init_process_group("scalecomm")`` (or
``"cpu:scalecomm"``) runs collectives with scalecomm's own algorithms over
shared memory (same host) and TCP (across hosts).

Per-group settings: pass ``pyscalecomm.Options(...)`` as ``pg_options``, or set
the ``SCALECOMM_*`` environment variables listed by :func:`params`.
"""

import torch  # noqa: F401  (loads libc10 and libtorch before our extension)
import torch.distributed  # noqa: F401

from pyscalecomm import _C
from pyscalecomm._options import Options
from pyscalecomm._registration import BACKEND_NAME, register

__version__ = "0.1.0"

register()


def params() -> list[tuple[str, str, str]]:
    """Every ``SCALECOMM_*`` environment variable as ``(name, default, doc)``."""
    return list(_C.params())


def allreduce_algorithms() -> list[str]:
    """Allreduce algorithms this build implements."""
    return list(_C.allreduce_algorithms())


__all__ = ["BACKEND_NAME", "Options", "__version__", "allreduce_algorithms", "params"]
