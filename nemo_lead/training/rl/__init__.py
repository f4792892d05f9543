"""`nemo-lead rl`: the RL loop (`loop`, one function per phase of the paper's step), phases 1-5
(`phases`), rollouts and grading, the lag queue, the split layout, the no-signal warning."""
