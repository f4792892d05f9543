"""Training (docs/design.md, Layers): the Megatron actor (`actor/`), a run's life shared by SFT and RL
(`run/`: start, resume, checkpoints, stop, the run folder), the RL loop (`rl/`) and the SFT loop (`sft/`)."""
