"""nccl-tests-style benchmark of scalecomm's collectives against gloo, MPI and NCCL.

``python -m pyscalecomm.bench --help`` for the tool. The package:

- :mod:`~pyscalecomm.bench.specs`: one spec per collective (buffers, inputs,
  closed-form result, busbw factor, torch's and MPI's calls);
- :mod:`~pyscalecomm.bench.timing`: one measurement (back-to-back calls
  between barriers, statistics across ranks, the check), auto's settling;
- :mod:`~pyscalecomm.bench.rows`: the row record and its renderers (table,
  JSON lines, plot);
- :mod:`~pyscalecomm.bench.ps`: the parameter server's rows;
- :mod:`~pyscalecomm.bench.cli`: options, implementations, the run.
"""

from pyscalecomm.bench.cli import main, parse_args, parse_size, parse_sizes, sizes
from pyscalecomm.bench.timing import settle_auto

__all__ = ["main", "parse_args", "parse_size", "parse_sizes", "settle_auto", "sizes"]
