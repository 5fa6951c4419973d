"""The training driver: data-parallel training experiments with measured
speedup, scaling efficiency, communication overhead and accuracy.

    python -m pyscalecomm.train --sweep world=1,2 backend=gloo,scalecomm compress=none,topk:0.01

See :mod:`pyscalecomm.train.cli` for the options and docs/training.md for
what each number means.
"""
