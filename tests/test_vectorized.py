"""The host reduction loops vectorise: csrc/comm/reducer.cc compiled as setup.py
builds it (-O3 -fno-trapping-math, baseline x86-64) with GCC's vectoriser report.
Every (dtype, op) instantiation of the reduction loops (in place, three-operand,
two outputs, and foldInto's two passes over a tile) must vectorise except int64
min, max and product, for which baseline x86-64 (SSE2) has no vector compare or
multiply. fp16 and bf16 are widened to fp32 by branch-free conversions
(core/half.h) so that they vectorise too."""

import os
import platform
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "csrc", "comm", "reducer.cc")
SCALAR_ONLY = 3  # int64 min, max, product per loop


@pytest.mark.skipif(
    shutil.which("g++") is None or platform.machine() != "x86_64", reason="needs g++ on x86_64"
)
def test_every_reduction_loop_vectorises(tmp_path):
    report = tmp_path / "vec.txt"
    subprocess.run(
        ["g++", "-std=c++20", "-O3", "-fno-trapping-math", f"-I{ROOT}/csrc", f"-fopt-info-vec-all={report}"]
        + ["-c", SOURCE, "-o", str(tmp_path / "reducer.o")],
        check=True,
    )
    lines = open(SOURCE).read().splitlines()
    loops = [
        i + 1
        for i, line in enumerate(lines)
        if "for (" in line and "reduceElement<Tag, Op>(" in line + "".join(lines[i + 1 : i + 2])
    ]
    assert len(loops) == 5, (
        loops
    )  # in place, three-operand, two outputs, and foldInto's first and later inputs
    text = report.read_text()
    for line in loops:
        here = [r for r in text.splitlines() if re.search(rf"reducer\.cc:{line}:\d+:", r)]
        done = sum("optimized: loop vectorized" in r for r in here)
        missed = sum("couldn't vectorize loop" in r for r in here)
        # reduceLoopTwice is instantiated twice (the second output is a or b)
        function = next(x for x in reversed(lines[:line]) if re.search(r"void (reduceLoop|fold)", x))
        allowed = SCALAR_ONLY * (2 if "void reduceLoopTwice" in function else 1)
        assert done > 0 and missed <= allowed, (
            f"reducer.cc:{line}: {done} vectorised, {missed} not:\n"
            + "\n".join(r for r in here if "not vectorized" in r)
        )
