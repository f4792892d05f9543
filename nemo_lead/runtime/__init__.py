"""runtime layer (docs/design.md): what a running job needs from its environment, below the loops that use it.

- `signals`: stop requests (SIGUSR1 / SIGTERM / SIGINT / SIGHUP, a lost output pipe) recorded by handlers and
  agreed on by all ranks after a step, so loops checkpoint and exit 0;
- `requeue`: ask SLURM to requeue the current job after such a stop.

`nemo_lead.parallel.local` (the local launcher holds stop signals until its ranks run), `nemo_lead.training`
(the loops) and `nemo_lead.launch` (SLURM submission) build on it; it imports nothing but the standard library,
so it sits at level 0 of the layer table.
"""
