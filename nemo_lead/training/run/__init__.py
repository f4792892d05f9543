"""A training run's life, shared by SFT and RL: its folder, lock and settings, start / resume / checkpoint /
stop (`lifecycle`, `resume`), the training state in a checkpoint (`train_state`), the data order, the plot."""
