"""PyTorch's generic distributed test suite, run against scalecomm.

    BACKEND=scalecomm WORLD_SIZE=2 TEMP_DIR=$(mktemp -d) python tests/torch_suite/run_suite.py [-k PATTERN]

(tests/torch_suite/run.sh sets the environment.) The suite lives in the torch
wheel (torch.testing._internal.distributed.distributed_test) and reads BACKEND
at import, when its skip decorators are evaluated. So this module, in this
order: registers scalecomm (the ranks are spawned and re-import this module),
declares scalecomm's features in DistTestCases, then imports the suite and
defines the test class. scalecomm declares no collective skipped
(DistTestCases.skip_collective): every collective the suite tests runs. The
only tests skipped on purpose are listed in expected_skips.txt, each with the
reason it still holds, so any new failure shows. Tests that the suite gates on the literal name "gloo" (or
"mpi") but that any CPU backend should pass are listed in reenabled.txt and
run here. Private torch API: pinned to torch 2.14.1.
"""

import os
import sys
import unittest

from torch.testing._internal.common_distributed import DistTestCases
from torch.testing._internal.common_utils import run_tests

import pyscalecomm  # noqa: F401  (registers the backend in every spawned rank)

for feature in ("plugin", "ddp", "subgroup"):
    DistTestCases.backend_feature[feature].add("scalecomm")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


def _expected_skips():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "expected_skips.txt")
    out = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, reason = line.partition(" ")
            out[name] = reason.strip() or "not supported by scalecomm yet"
    return out


class TestScalecomm(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


def _reenabled():
    """Tests gated on the literal backend name that any CPU backend should pass."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reenabled.txt")
    return [ln.split()[0] for ln in open(path) if ln.strip() and not ln.startswith("#")]


for _name in _reenabled():
    _fn = getattr(TestScalecomm, _name, None)
    if _fn is not None and getattr(_fn, "__unittest_skip__", False):
        _fn.__unittest_skip__ = False

for _name, _reason in _expected_skips().items():
    if hasattr(TestScalecomm, _name):
        setattr(TestScalecomm, _name, unittest.skip(_reason)(getattr(TestScalecomm, _name)))

if __name__ == "__main__":
    assert os.environ.get("BACKEND") == "scalecomm", "run through tests/torch_suite/run.sh"
    sys.exit(run_tests())
