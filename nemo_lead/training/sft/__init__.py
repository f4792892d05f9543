"""`nemo-lead sft`: the SFT loop (`loop`), its config, and packing traces into the actor's batches."""
