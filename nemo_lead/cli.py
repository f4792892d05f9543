"""The `nemo-lead` command.

Every subcommand takes `--config FILE` (repeatable; later files win) and `key=value` overrides, on top
of its defaults: the fields of its config dataclass (one place per default, with its comment). `--print-config` shows
the resolved configuration and exits; with `--explain` every key's default, allowed values and description
(`nemo_lead.config.reference`, also `nemo-lead config CMD`).
A few frequent keys also have flags (`nemo-lead eval --samples 32` is `sampling.n=32`); flags and overrides are the
same thing, so each `--help` lists which key a flag sets.

Subcommands are declared in `COMMANDS`: a schema dataclass and a runner function, both given as
"module:attribute" strings so that `nemo-lead --help` imports neither Megatron nor transformers.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import json
import sys
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from pathlib import Path

from omegaconf import OmegaConf

from nemo_lead.config.loading import ConfigError, load_config, to_yaml
from nemo_lead.config.reference import ReferenceConfig, explain, write_reference
from nemo_lead.runtime.processes import forked_children_die_with_us
from nemo_lead.runtime.quiet import hide_import_noise
from nemo_lead.runtime.signals import hold_stop_signals, release_stop_signals


@dataclass(frozen=True)
class Command:
    help: str
    schema: str | None  # "module:Class" of the config dataclass; None = not built yet
    runner: str | None  # "module:function" taking the config object; None = not built yet
    flags: dict[str, str] = field(default_factory=dict)  # --flag -> dotted config key
    list_flags: tuple[str, ...] = ()  # flags that take one or more values (a list key)
    comma_flags: tuple[str, ...] = ()  # flags that take one comma-separated value (a list key): --allow-change A,B
    # other spellings of a flag. `--n` stays for a bare `nemo-lead ...`; under torchrun it cannot be used, because
    # torchrun's parser reads it as an ambiguous abbreviation of its own --nnodes / --nproc-per-node / ...
    aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # dotted key(s) set by the bare arguments, in order (`nemo-lead run RECIPE`, `nemo-lead prepare deepscaler SRC`)
    positional: str | tuple[str, ...] | None = None
    switches: dict[str, str] = field(default_factory=dict)  # --flag without a value -> dotted key set to true
    epilog: str = ""


COMMANDS: dict[str, Command] = {
    "demo": Command(
        help="Run the demo: recipes/demo.yaml on the embedded tiny model from random initialisation (SFT -> RL "
        "stage 1 -> stage 2 -> evaluation) through the real stack, on a CPU in a few minutes.",
        schema="nemo_lead.pipeline.config:DemoConfig",
        runner="nemo_lead.pipeline.runner:run_recipe",
        flags={"--out": "out", "--only": "only"},
        switches={"--dry-run": "dry_run"},
        epilog="Same as `nemo-lead run demo --out runs/demo`: writes runs/demo/summary.md (the table),\n"
        "summary.json, validation.png and accuracy_vs_budget.png. Rerunning skips finished stages.\n"
        "Stage settings: stages.NAME.KEY=VALUE (e.g. stages.rl1.steps=20).",
    ),
    "sft": Command(
        help="Supervised fine-tuning on reasoning traces (packed sequences, validation, exact resume).",
        schema="nemo_lead.training.sft.config:SFTConfig",
        runner="nemo_lead.training.sft.loop:run_sft",
        flags={"--model": "actor.model", "--data": "data.path", "--val-data": "data.val_path", "--out": "out",
               "--steps": "steps", "--tp": "actor.tp", "--pp": "actor.pp", "--save-every": "save_every",
               "--seed": "seed", "--allow-change": "allow_change"},
        comma_flags=("--allow-change",),
        epilog="Rerunning into the same --out resumes from its latest checkpoint (--steps may grow; the learning\n"
        "rate, clipping and checkpoint / validation cadence may change with --allow-change KEY,...; other\n"
        "changed settings are refused). Under torchrun / srun it uses the ranks it is given; as one process\n"
        "with tp x pp > 1 it runs itself on tp x pp local ranks.",
    ),
    "rl": Command(
        help="GRPO-LEAD reinforcement learning on the Megatron actor (rollouts, verifier, LEAD, exact resume).",
        schema="nemo_lead.training.rl.config:RLConfig",
        runner="nemo_lead.training.rl.loop:run_rl",
        flags={"--model": "actor.model", "--data": "data.path", "--val-data": "validation.data", "--out": "out",
               "--steps": "steps", "--preset": "lead.preset", "--prompts-per-step": "prompts_per_step",
               "--samples": "rollout.n", "--max-tokens": "rollout.max_tokens", "--save-every": "save_every",
               "--seed": "seed", "--tp": "actor.tp", "--pp": "actor.pp", "--engine": "engine.kind",
               "--allow-change": "allow_change"},
        comma_flags=("--allow-change",),
        aliases={"--samples": ("--n",)},
        epilog="Defaults are the paper's (32 prompts x 8 samples, lr 1e-6, no KL). Rerunning into the same --out\n"
        "resumes from its latest checkpoint (--steps may grow; the learning rate, clipping and checkpoint /\n"
        "validation cadence may change with --allow-change KEY,...; other changed settings are refused).",
    ),
    "run": Command(
        help="Run a multi-stage recipe (distill -> SFT -> RL stages -> eval), skipping finished stages.",
        schema="nemo_lead.pipeline.config:RunConfig",
        runner="nemo_lead.pipeline.runner:run_recipe",
        flags={"--out": "out", "--only": "only"},
        switches={"--dry-run": "dry_run"},
        positional="recipe",
        epilog="RECIPE: a YAML file or the name of one in recipes/ (demo, lead-14b, ablation-7b-lead, ...).\n"
        "Rerunning into the same --out skips finished stages and resumes an interrupted one. Paths and stage\n"
        "settings: paths.KEY=VALUE, stages.NAME.KEY=VALUE; --print-config shows every stage resolved,\n"
        "--dry-run lists the stages and their status.",
    ),
    "prepare": Command(
        help="Problem files for the recipes from a public release: `prepare deepscaler SRC --out DIR` writes "
        "DIR/deepscaler.jsonl (paths.deepscaler) with problem / answer / difficulty, printing the counts.",
        schema="nemo_lead.data.deepscaler:PrepareDataConfig",
        runner="nemo_lead.data.deepscaler:run_prepare_deepscaler",
        flags={"--out": "out"},
        positional=("dataset", "source"),
        epilog="SRC: the folder of the DeepScaleR release's training files (deepscaler/data/train: amc.json,\n"
        "omni_math.json, aime.json, still.json, math.json), the files the GRPO-LEAD authors read. See docs/data.md.",
    ),
    "plan": Command(
        help="Memory and time plan of a recipe's SFT / RL stages (and the time of its distill / eval stages) or a "
        "command's config on N GPUs, per GPU and phase, with the smallest changes that make it fit and the layouts "
        "that fit ranked by step time, at the stated mean response length and with every response at max_tokens "
        "(no GPU or weights needed).",
        schema="nemo_lead.pipeline.recipe_plan:PlanConfig",
        runner="nemo_lead.pipeline.recipe_plan:run_plan",
        flags={"--gpus": "gpus", "--gpu": "plan.gpu", "--gpu-memory-gib": "plan.gpu_memory_gib", "--stage": "stage",
               "--json": "json", "--command": "command", "--fastest": "fastest"},
        positional="target",
        epilog="TARGET: a recipe (file or name in recipes/; paths.KEY=VALUE, stages.NAME.KEY=VALUE), or the config\n"
        "file of --command sft|rl (job.KEY=VALUE overrides its keys). The model may be a HF folder (its config.json),\n"
        "a checkpoint or a conf/model preset: nemo-lead plan lead-14b --stage stage1 --gpus 8 --gpu h100\n"
        "paths.base_model=r1-distill-qwen-14b. --gpu: h100 | h200 | h20 | a100 | a100-40 | b200 (memory, FLOP/s and\n"
        "bandwidth; --gpu-memory-gib overrides the memory). --fastest N: the fastest N layouts that fit (5).\n"
        "Exit 0 when everything fits, 1 when not.",
    ),
    "plot": Command(
        help="Validation Pass@1 and response length over RL steps for one or more run folders (a PNG).",
        schema="nemo_lead.training.run.plot:PlotConfig",
        runner="nemo_lead.training.run.plot:run_plot",
        flags={"--runs": "runs", "--out": "out"},
        list_flags=("--runs",),
        epilog="chain=true draws consecutive stages (stage 2 from stage 1's checkpoint) as one training.",
    ),
    "eval": Command(
        help="The paper's evaluation (Cons@k, Pass@1, Len_avg, accuracy vs budget) of a HF folder or a checkpoint, "
        "resumable; --compare RUN_A RUN_B ... tabulates finished runs.",
        schema="nemo_lead.eval.config:EvalConfig",
        runner="nemo_lead.eval.command:run_eval",
        flags={"--model": "model", "--data": "data", "--out": "out", "--samples": "sampling.n",
               "--temperature": "sampling.temperature", "--top-p": "sampling.top_p",
               "--max-tokens": "sampling.max_tokens", "--seed": "sampling.seed", "--limit": "limit",
               "--answer-region": "verify.answer_region", "--precision": "precision", "--engine": "engine.kind",
               "--tp": "tp", "--pp": "pp", "--compare": "compare"},
        list_flags=("--compare",),
        aliases={"--samples": ("--n",)},
        epilog="--data: comma-separated built-in names (aime24, aime25, math500) and/or JSONL/Parquet files.\n"
        "Defaults are the paper's protocol for the 14B models (AIME24+AIME25, T 0.6, top-p 0.95, 32 samples,\n"
        "14,336 tokens); use --max-tokens 8192 for the 7B ones. Rerunning into the same --out folder resumes.\n"
        "--compare takes one or more eval folders (put key=value overrides before it).",
    ),
    "generate": Command(
        help="Sample responses from a HF model folder or a checkpoint for prompts (prompts=[...] or --prompts-file F), "
        "as JSONL.",
        schema="nemo_lead.generation.command:GenerateConfig",
        runner="nemo_lead.generation.command:run_generate",
        flags={"--model": "model", "--prompts-file": "prompts_file", "--out": "out", "--samples": "sampling.n",
               "--temperature": "sampling.temperature", "--top-p": "sampling.top_p", "--max-tokens": "sampling.max_tokens",
               "--seed": "sampling.seed", "--engine": "engine.kind", "--tp": "tp", "--pp": "pp"},
        aliases={"--samples": ("--n",)},
        epilog="Prompt texts also as an override: prompts='[\"2+3=?\", \"7*6=?\"]'. --model takes a HF folder or a\n"
        "nemo-lead checkpoint (RUN/checkpoints/step_N, with its own tokenizer). With tp x pp > 1 a single process\n"
        "runs itself on tp x pp local ranks.",
    ),
    "submit": Command(
        help="Render sbatch scripts for a recipe (one job per GPU stage) or a command and submit them to SLURM "
        "(--dry-run prints them).",
        schema="nemo_lead.launch.submit:SubmitConfig",
        runner="nemo_lead.launch.submit:run_submit",
        flags={"--command": "command", "--out": "out", "--nodes": "nodes", "--gpus-per-node": "gpus_per_node",
               "--tasks-per-node": "tasks_per_node", "--time": "time", "--partition": "partition",
               "--account": "account", "--qos": "qos", "--container-image": "container_image",
               "--container-mounts": "container_mounts", "--stages": "stages", "--signal-seconds": "signal_seconds"},
        list_flags=("--stages",),
        switches={"--dry-run": "dry_run"},
        positional="target",
        epilog="TARGET: a recipe (file or name in recipes/: one job per GPU stage, chained with afterok, each sized by\n"
        "the stage's `slurm:`), or a config file for --command sft|rl|eval|generate|convert (one job).\n"
        "job.KEY=VALUE goes to the job's command line as KEY=VALUE. --dry-run prints the scripts.",
    ),
    "convert": Command(
        help="Convert a HF model folder to a nemo-lead checkpoint (--from-hf DIR --out CKPT) or back "
        "(--from-ckpt CKPT --to-hf DIR).",
        schema="nemo_lead.models.convert:ConvertConfig",
        runner="nemo_lead.models.convert:run_convert",
        flags={"--from-hf": "from_hf", "--out": "out", "--from-ckpt": "from_ckpt", "--to-hf": "to_hf",
               "--tp": "tp", "--pp": "pp", "--precision": "precision", "--dtype": "dtype"},
        epilog="Started as one process with tp x pp > 1 it runs itself on tp x pp local ranks; under torchrun\n"
        "or srun it uses the ranks it is given. Checkpoints load at any TP/PP, whatever layout wrote them.",
    ),
    "config": Command(
        help="The config reference: every key of a command (or of all) with its default, allowed values and "
        "description; --markdown writes docs/config.md's tables.",
        schema="nemo_lead.config.reference:ReferenceConfig",
        runner="nemo_lead.cli:run_config_reference",
        flags={"--out": "out"},
        switches={"--markdown": "markdown"},
        positional="command",
        epilog="COMMAND: sft, rl, eval, run, ... (none: every command). docs/config.md is regenerated with\n"
        "`nemo-lead config --markdown --out docs/config.md`. The same list with the values in use:\n"
        "`nemo-lead CMD --print-config --explain [key=value ...]`.",
    ),
    "check": Command(
        help="Verify the checkpoints of a run folder (or one checkpoint, or a `nemo-lead run` folder's stages) "
        "against their manifests: sizes and CRC-32 of every file.",
        schema="nemo_lead.checkpoint.check:CheckConfig",
        runner="nemo_lead.checkpoint.check:run_check",
        positional="path",
        switches={"--seal": "seal"},
        epilog="Exit 0: all intact; 1: one is damaged (a resume sets it aside and continues from the newest intact\n"
        "one); 2: no checkpoint there. --seal writes a manifest for checkpoints saved before manifests.",
    ),
}


# commands that load torch / megatron-core (seconds) before they can say anything useful
LONG_COMMANDS = ("demo", "sft", "rl", "run", "eval", "generate", "convert")


def _say_starting(command: str, overrides: list[str]) -> None:
    """The first line, before the heavy imports: what starts, and where it writes."""
    out = next((o.split("=", 1)[1] for o in reversed(overrides) if o.startswith("out=")), None)
    where = f" into {out}" if out and out != "-" else ""
    print(f"[nemo-lead] {command}{where}: loading torch and megatron-core ...", file=sys.stderr, flush=True)


def _load_attr(spec: str):
    module, attr = spec.split(":")
    return getattr(importlib.import_module(module), attr)


def version() -> str:
    try:
        return package_version("nemo-lead")
    except PackageNotFoundError:  # run from a checkout without installing
        return "unknown (not installed)"


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nemo-lead",
        description="GRPO-LEAD on megatron-core: SFT, two RL stages, AIME evaluation.",
        epilog="Each command takes --config FILE and key=value overrides; see `nemo-lead CMD --help`.",
    )
    parser.add_argument("--version", action="version", version=f"nemo-lead {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(
            name,
            help=cmd.help,
            description=cmd.help,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            epilog=(cmd.epilog + "\n\n" if cmd.epilog else "")
            + f"Defaults: `nemo-lead {name} --print-config`. Overrides: key=value (dotted keys, YAML values,\n"
            "anywhere on the line). An unknown key fails with the nearest valid ones.",
        )
        p.add_argument("--config", action="append", default=[], metavar="FILE",
                       help="YAML file(s) applied on top of the defaults, in order")
        p.add_argument("--print-config", action="store_true", help="print the resolved configuration and exit")
        p.add_argument("--explain", action="store_true",
                       help="print every key's default, allowed values, description and value in use, and exit")
        for flag, key in cmd.flags.items():
            names = (flag, *cmd.aliases.get(flag, ()))
            if flag in cmd.list_flags:
                p.add_argument(*names, dest="flag:" + key, metavar="VALUE", nargs="+", help=f"same as {key}=[VALUE,...]")
            elif flag in cmd.comma_flags:
                p.add_argument(*names, dest="flag:" + key, metavar="A,B", type=lambda v: [x for x in v.split(",") if x],
                               help=f"same as {key}=[A,B]")
            else:
                p.add_argument(*names, dest="flag:" + key, metavar="VALUE", help=f"same as {key}=VALUE")
        for flag, key in cmd.switches.items():
            p.add_argument(flag, dest="flag:" + key, action="store_const", const="true", help=f"same as {key}=true")
        p.add_argument("overrides", nargs="*", metavar="key=value", help="configuration overrides")
    return parser


def resolve_config(name: str, files: list[str], overrides: list[str], *, validate: bool = True):
    """Defaults of command `name` (its config dataclass) + files + overrides -> the command's config object
    (`validate=False`: the merged settings without the checks of required keys, see `load_config`)."""
    schema = _load_attr(COMMANDS[name].schema)
    return load_config(schema, [Path(f) for f in files], overrides, validate=validate)


def command_schemas(command: str | None = None) -> dict[str, type]:
    """{command: its config dataclass} for every command with one (or just `command`), in `COMMANDS` order."""
    names = [n for n, c in COMMANDS.items() if c.schema and n != "config"]
    if command is not None:
        if command not in names:
            raise ValueError(f"command must be one of {', '.join(names)}, got {command!r}")
        names = [command]
    return {n: _load_attr(COMMANDS[n].schema) for n in names}


def run_config_reference(cfg: ReferenceConfig) -> int:
    """`nemo-lead config [COMMAND] [--markdown] [--out FILE]` (the command table lives here)."""
    try:
        schemas = command_schemas(cfg.command)
    except ValueError as e:
        print(f"nemo-lead config: {e}", file=sys.stderr)
        return 2
    return write_reference(cfg, schemas)


def _print_config(name: str, cfg, with_reference: bool) -> None:
    """`--print-config`: the resolved settings as YAML, or (`--explain`) the command's reference with them."""
    if not with_reference:
        print(to_yaml(cfg), end="")
        return
    values = OmegaConf.to_container(cfg if OmegaConf.is_config(cfg) else OmegaConf.structured(cfg), resolve=False)
    print(explain(_load_attr(COMMANDS[name].schema), values), end="")


# flags renamed with their key (config.RENAMED_KEYS): old -> new, refused with the new name
RENAMED_FLAGS = {"--gpu-memory-gb": "--gpu-memory-gib"}


def _flag_hints(name: str | None, cmd: Command | None, unknown: list[str]) -> str:
    """For each unknown --flag of `cmd`, its nearest flags (a typo such as --partitoin), and where to see them all."""
    if cmd is None:
        return ""
    known = ["--config", "--print-config", "--explain", "--help", *cmd.flags, *cmd.switches,
             *(a for names in cmd.aliases.values() for a in names)]
    hints = []
    for flag in unknown:
        if flag.startswith("-"):
            near = difflib.get_close_matches(flag.split("=", 1)[0], known, n=3, cutoff=0.7)
            hints.append(f"{flag}: did you mean {' or '.join(near)}?" if near else f"{flag}: no such flag")
    if not hints:
        return ""
    return "\n  " + "\n  ".join(hints) + f"\n  (the flags: `nemo-lead {name} --help`; every key: `nemo-lead {name} --explain`)"


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    # overrides may come anywhere (`--samples 4 lead.alpha=0.1 --seed 3`): argparse fills a positional list only
    # once, so key=value tokens after a flag arrive as "unknown" and join the overrides here
    args, extra = parser.parse_known_args(argv)
    unknown = [a for a in extra if a.startswith("-") or "=" not in a]
    cmd = COMMANDS.get(args.command) if args.command else None
    bare = [a for a in [*(getattr(args, "overrides", None) or []), *unknown] if not a.startswith("-") and "=" not in a]
    keys = (cmd.positional,) if cmd is not None and isinstance(cmd.positional, str) else (cmd and cmd.positional) or ()
    if keys and len(bare) == len(keys):
        # `nemo-lead run RECIPE key=value ...`: the bare words are the positional keys' values
        args.overrides = [a for a in (getattr(args, "overrides", None) or []) if a not in bare]
        extra = [a for a in extra if a not in bare]
        unknown = [a for a in unknown if a not in bare]
        extra += [f"{k}={v}" for k, v in zip(keys, bare)]
    for flag in unknown:
        if flag.split("=", 1)[0] in RENAMED_FLAGS:
            parser.error(f"{flag.split('=', 1)[0]} is now {RENAMED_FLAGS[flag.split('=', 1)[0]]}")
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}{_flag_hints(args.command, cmd, unknown)}")
    args.overrides = [*(getattr(args, "overrides", None) or []), *extra]
    if args.command is None:
        parser.print_help()
        return 2
    args.print_config = args.print_config or args.explain  # --explain alone means --print-config --explain
    if cmd.schema is None or cmd.runner is None:
        print(f"nemo-lead {args.command}: not built yet in this version (see docs/support.md)",
              file=sys.stderr)
        return 3
    flag_overrides = [f"{k[5:]}={json.dumps(v) if isinstance(v, list) else v}"
                      for k, v in vars(args).items() if k.startswith("flag:") and v is not None]
    if not args.print_config and args.command in LONG_COMMANDS:
        _say_starting(args.command, flag_overrides + args.overrides)
    try:
        cfg = resolve_config(args.command, args.config, flag_overrides + args.overrides)
    except ConfigError as e:
        if args.print_config and e.check:
            # show the settings anyway (e.g. `nemo-lead submit --print-config` before choosing a target)
            merged = resolve_config(args.command, args.config, flag_overrides + args.overrides, validate=False)
            _print_config(args.command, merged, args.explain)
            print(f"nemo-lead {args.command}: not runnable as given: {e}", file=sys.stderr)
            return 0
        print(f"nemo-lead {args.command}: config error: {e}", file=sys.stderr)
        return 2
    if args.print_config:
        _print_config(args.command, cfg, args.explain)
        return 0
    # a signal during the imports and the start stops the run after its first step
    held = hold_stop_signals() if args.command in LONG_COMMANDS else {}
    hide_import_noise()
    forked_children_die_with_us()
    try:
        result = _load_attr(cmd.runner)(cfg)
    finally:
        release_stop_signals(held)  # main() called from Python leaves the caller's handlers as they were
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
