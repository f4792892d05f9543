"""The Megatron actor: the model in megatron's DDP with its optimizer and log-probs (`megatron_actor`), the RL
and SFT updates (`rl_update`, `sft_update`), and what they need: micro-batches, vocab-parallel log-probs,
collectives, offload."""
