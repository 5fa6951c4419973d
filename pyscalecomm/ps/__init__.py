"""A parameter server: sharded push/pull with sync, async and stale-synchronous
consistency, used from a training loop like DDP.

    model = pyscalecomm.ps.ParameterServer(net, servers=2, mode="ssp:4", optimizer="sgd", lr=0.1)
    for x, y in loader:
        loss_fn(model(x), y).backward()  # pushes the gradients as backward produces them
    model.close()

Roles. Every rank of the group is a worker; ranks ``0..servers-1`` (or the
list given) also serve, on a thread of their own. Keys are the model's
parameters, each held by one server (largest first onto the least loaded
server, so shards balance by size). A server keeps its shard as one flat
float32 tensor, a version per key (the updates applied to it) and the
update rule's state: ``sgd`` (momentum, weight decay, nesterov) or ``adam``
(torch.optim on the shard), or ``sum`` (the server averages the gradients
and returns them; the worker's own optimizer steps).

Consistency (``mode``):
- ``sync``: a version takes every worker's gradient (their mean, as
  allreduce SGD); a worker's pull waits for it. Equals DDP within float
  tolerance.
- ``async``: each gradient is applied on arrival (scaled by 1/workers, so a
  round of pushes moves the parameters as one synchronous step would); the
  pull returns the shard at once.
- ``ssp:K``: applied on arrival as async, but no worker starts a step more
  than K steps ahead of the slowest: its pull waits until the slowest has
  pushed enough.
Every applied gradient's staleness (versions applied since the worker read
the parameters it computed it on) and every released pull's lead over the
slowest worker are recorded (``stats()``).

Wire. Per server and remote worker two groups of those two ranks:
requests (the worker sends, one thread of the server receives) and replies
(the server sends). Each group has one sender and one receiver side per
process, so a rank that serves and works never queues its worker's
messages behind its server's wait, and a worker's death touches only its
own pair of groups. A worker's own server is called directly. Pushes go out while
backward runs (a post-accumulate hook per parameter, the rest at the end of
backward); the pull for the next step is asked with the push and waited for
at the next forward. Pushes may be encoded with a codec (``compression``),
with error feedback per shard.

Memory. A worker keeps each shard's float32 parameters as views of one flat
buffer, and has a spare of the same size: a pull lands in the spare, and
taking it makes the spare the parameters' storage (``p.data``) and the old
storage the next spare, so no step copies the parameters. Hold a copy, not a
view, of a parameter across steps (``state_dict()`` returns copies).
Parameters of other dtypes are copied in. A server reuses its receive
buffer per worker and a worker's reply buffer once its last reply is sent.

Faults. Under ``async`` and ``ssp:K`` a worker whose requests fail (its
process died, its links closed, or it sent nothing for the group's timeout)
is dropped by every server, which says so once (log warning, ``stats()``
``dropped``); the slowest-worker bound then counts the live workers only,
and training goes on. Under ``sync`` a version needs every worker, so a dead
worker ends the others with an error naming it. A dead server ends every
worker with an error naming it: its shard is gone.

CPU tensors; parameters are exchanged as float32.

Rooms: ``shards`` (which server holds each key, and a worker's buffers),
``server`` (one shard, its update rule and the loop serving a worker),
``wire`` (the pair groups and the push codec), ``module`` (the
``ParameterServer`` that ties them to a training loop).
"""

from pyscalecomm.ps.module import ParameterServer
from pyscalecomm.ps.server import parse_mode
from pyscalecomm.ps.shards import assign_keys

__all__ = ["ParameterServer", "assign_keys", "parse_mode"]
