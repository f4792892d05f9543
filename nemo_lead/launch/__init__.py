"""`nemo-lead submit`: the SLURM jobs of a recipe or a command (`jobs`), their batch scripts and container
flags (`sbatch`), their sizes from the recipe's hardware and the plan (`sizes`)."""
