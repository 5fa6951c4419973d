"""DDP on scalecomm: a small regression, trained exactly as with gloo.

    torchrun --nproc-per-node 2 examples/ddp_train.py

(Under mpirun, add `import pyscalecomm`: it reads the rank and world size from MPI.)
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("scalecomm")  # installed: no `import pyscalecomm` needed
rank, world = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)  # the same initial weights on every rank
model = DDP(nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
data = torch.Generator().manual_seed(rank)  # each rank its own shard of the data
for _ in range(200):
    x = torch.randn(32, 8, generator=data)
    loss = nn.functional.mse_loss(model(x), x.sum(dim=1, keepdim=True))
    opt.zero_grad()
    loss.backward()  # gradients are averaged over the ranks by scalecomm
    opt.step()
if rank == 0:
    print(f"{world} ranks, backend {dist.get_backend()}: final loss {loss.item():.4f}")
dist.destroy_process_group()
