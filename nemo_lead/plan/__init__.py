"""plan layer: the memory and time plan of an SFT / RL job from its configuration alone (no weights, no GPU,
no megatron import): `nemo-lead plan`, and the check `nemo-lead sft / rl / run / submit` make before a job
starts on GPUs.

    parameters.py      the static bytes of an actor rank, exactly as megatron lays them out
    activations.py     the update phase's working memory (saved activations, the loss's logits temporaries)
    engine_memory.py   the generation phase's: the megatron engine's KV cache and temporaries
    job.py             one job: per GPU and phase, each component, what is left, the step time
    timing.py          the step time from FLOPs and bytes at efficiencies measured on an H200, the GPUs'
                       datasheet figures, response lengths around a stated mean in a continuous batch
    engine_stage.py    a stage that only generates (distill, eval): the engine's memory and the stage's time
    fixes.py           the smallest changes of the settings that make a job fit, ranked
    search.py          the layouts that fit, ranked by their step time (the fastest, the configured one's rank)
    report.py          the plan as text and as JSON; check.py: the check before a job starts
    settings.py        `PlanSettings`, the `plan` section of the commands' configs
    host.py            what a job needs besides its GPUs: host memory, cores, checkpoint bytes, disk, time
    stop_times.py      when a job must begin to stop before its time limit (SLURM's warning, the deadline
                       margin); apart from host.py so that `nemo-lead submit` imports it without torch
                       (host.py reads the model's shapes through `models/`)

Imports models (the HF config reader), parallel (layouts, the launcher's world size) and config. Recipes are
read by the pipeline layer (`nemo_lead.pipeline.recipe_plan`, the `nemo-lead plan` command).
"""
