"""pipeline layer (docs/design.md): multi-stage recipes (recipes/*.yaml) run in order in one run folder.

    nemo-lead run recipes/lead-14b.yaml --out runs/lead-14b paths.base_model=/models/R1-14B
    nemo-lead demo                                  # = nemo-lead run recipes/demo.yaml --out runs/demo

recipe.py reads recipe files (also for `nemo-lead submit`); kinds.py is the registry of stage kinds (schema,
outputs, GPU or not, run function); config.py resolves each stage's settings through its kind's schema;
stages.py holds one function per stage kind; runner.py orders them, skips finished ones and resumes
interrupted ones; report.py writes the summary table and figures.
"""

from nemo_lead.pipeline.config import RunConfig
from nemo_lead.pipeline.kinds import KINDS
from nemo_lead.pipeline.runner import run_recipe

__all__ = ["KINDS", "RunConfig", "run_recipe"]
