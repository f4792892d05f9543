"""runtime layer (docs/design.md): what a running job needs from its environment, below the loops that use it.

- `signals`: stop requests (SIGUSR1 / SIGTERM / SIGINT / SIGHUP, a lost output pipe) recorded by handlers and
  agreed on by all ranks after a step, so loops checkpoint and exit 0;
- `requeue`: ask SLURM to requeue the current job after such a stop.

`nemo_lead.launch` (SLURM submission, above the pipeline) and `nemo_lead.training` (the loops) both build on
it; it imports nothing of nemo_lead's but the standard library.
"""
