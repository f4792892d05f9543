"""The Megatron actor: the model in megatron's DDP with its optimizer, log-probs, the RL and SFT train steps
(`megatron_actor`), and what they need: micro-batches, vocab-parallel log-probs, collectives, offload."""
