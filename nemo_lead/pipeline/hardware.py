"""What a recipe is sized for, as the plan reads it (`nemo-lead plan RECIPE` without `--gpus` / `--gpu`, and
`nemo-lead submit`): the GPU kind of its `hardware:` entry, each stage's GPUs from its `slurm:` entry (nodes x
GPUs per node), and the conf/model presets that stand in for model folders not readable here (`presets:`).

    gpus = stage_gpus(recipe)                        # {"sft": 16, "stage1": 16, ...}
    paths, notes = preset_paths(recipe, {"base_model": "/lustre/m"})

A stage's GPUs: `slurm.nodes` (1 when unset) x `slurm.gpus_per_node` (else the recipe's
`hardware.gpus_per_node`, else DEFAULT_GPUS_PER_NODE, `nemo-lead submit`'s default size).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nemo_lead.config.loading import ConfigError
from nemo_lead.pipeline.recipe import Recipe

DEFAULT_GPUS_PER_NODE = 8  # `nemo_lead.launch.submit_config.DEFAULT_SIZE`: one node of 8 GPUs


def stage_gpus(recipe: Recipe) -> dict[str, int]:
    """Each stage's GPUs as its SLURM job asks for them: nodes x GPUs per node."""
    per_node = int(recipe.hardware.get("gpus_per_node") or DEFAULT_GPUS_PER_NODE)
    return {s.name: int(s.slurm.get("nodes") or 1) * int(s.slurm.get("gpus_per_node") or per_node)
            for s in recipe.stages}


def preset_paths(recipe: Recipe, paths: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`paths` (the command line's `paths.*`) with each key of the recipe's `presets` whose value (given, else
    the recipe's) is neither a conf/model preset nor readable here replaced by its preset, and a note per
    replacement: the plan reads the preset's config.json, of the same shape."""
    from nemo_lead.models.hf_config import preset_names  # (torch)

    out, notes = dict(paths), []
    known = set(preset_names())
    for key, preset in recipe.presets.items():
        value = str(out.get(key, recipe.paths.get(key)))
        if preset not in known:
            raise ConfigError(f"{recipe.path.name}: presets.{key}={preset!r} is not a conf/model preset; presets: "
                              f"{', '.join(sorted(known))}")
        if value in known or Path(value).expanduser().exists():
            continue
        out[key] = preset
        notes.append(f"paths.{key}={value} is not readable here: planned with the shape of preset {preset} "
                     f"(presets.{key} in {recipe.path.name}); the job reads the folder")
    return out, notes
