"""Allreduce of NumPy arrays (CuPy works the same on a GPU), in place, no copies.

mpirun -n 2 python examples/allreduce_arrays.py       # (as root: --allow-run-as-root)
torchrun --nproc-per-node 2 examples/allreduce_arrays.py
"""

import numpy as np
import torch.distributed as dist

import pyscalecomm  # under mpirun: reads the rank and world size from MPI

dist.init_process_group("scalecomm")
rank, world = dist.get_rank(), dist.get_world_size()

x = np.full(4, rank + 1, dtype=np.float32)
pyscalecomm.allreduce(x)  # the sum, written into x
assert x.tolist() == [world * (world + 1) / 2] * 4

best = np.array([rank], dtype=np.int64)
pyscalecomm.allreduce(best, op="max")

grad = np.random.default_rng(rank).standard_normal(1 << 16).astype(np.float32)
# 1 % of the values travel; what was left out is added to the next call (error feedback)
pyscalecomm.allreduce(grad, "topk:0.01", op="avg")

if rank == 0:
    print(f"{world} ranks: sum {x.tolist()}, max rank {int(best[0])}, top-k average {grad[:3]}")
dist.destroy_process_group()
