"""A job's processes and their life, below the loops that use them: atomic files and JSON lines (`files`),
helper processes that die with their parent (`processes`), import-noise filters (`quiet`), the progress
display (`progress`), stop requests agreed on by all ranks after a step (`signals`), the job's end and
requeue under SLURM (`deadline`, `requeue`), Weights & Biases tracking (`tracking`, a level above the rest:
its settings are a config section)."""
