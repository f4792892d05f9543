"""`nemo-lead generate`: sample responses from a HF model folder or a nemo-lead checkpoint, as JSONL.

    nemo-lead generate --model DIR 'prompts=["What is 2+3?"]' --samples 4 --temperature 0.6 --out samples.jsonl
    nemo-lead generate --model DIR --prompts-file prompts.jsonl --max-tokens 512 [--tp 2 --pp 1]

Prompts: `prompts` (texts) and / or `prompts_file` (JSONL, one object per line with a "prompt" or
"problem" field). Each text becomes one user turn of the tokenizer's chat template (with the generation
prompt) when it has one and `chat_template` is true, else it is tokenised as it is. The model's end tokens
(the tokenizer's EOS and generation_config.json's eos_token_id) are stop tokens unless `stop_at_eos` is false. One output line per sample: prompt_index,
sample_index, prompt, text, token_ids, num_tokens, finish_reason (and logprobs / policy_logprobs with
`logprobs=true`). `--model` is read by `nemo_lead.models.source` (a checkpoint brings its own tokenizer/).
Started as one process with tp x pp > 1 it runs itself on tp x pp local ranks (as `convert` does).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch.distributed as dist

from nemo_lead.generation.engine import SamplingParams
from nemo_lead.generation.engine_config import EngineConfig, build_engine
from nemo_lead.models import load_tokenizer
from nemo_lead.models.policy import load_policy, with_end_tokens
from nemo_lead.models.source import PRECISION_CHOICES, model_source, resolve_precision
from nemo_lead.parallel import destroy_parallel, init_parallel
from nemo_lead.parallel.local import run_command
from nemo_lead.plan.engine_kinds import check_engine_layout
from nemo_lead.runtime.files import iter_jsonl
from nemo_lead.runtime.progress import PROGRESS_MODES, LoopProgress, check_progress_mode


@dataclass
class GenerateConfig:
    model: Optional[str] = None  # HF folder (config.json, safetensors, tokenizer) or a checkpoint step folder
    prompts: list[str] = field(default_factory=list)
    prompts_file: Optional[str] = None  # JSONL with a "prompt" or "problem" field per line
    out: str = "-"  # JSONL file, or - for stdout
    chat_template: bool = True
    stop_at_eos: bool = True  # the end tokens (tokenizer EOS + generation_config.json eos_token_id) end a sample
    logprobs: bool = False  # also write both log-prob lists per sample
    tp: int = 1
    pp: int = 1
    precision: str = "auto"  # auto (fp32 on CPU; on a GPU bf16, fp16 for fp16 weights) | fp32 | bf16 | fp16
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(max_tokens=256, seed=1234))
    # auto: vLLM where it imports on a GPU, the megatron engine otherwise (said at the start; `resolve_engine_kind`)
    engine: EngineConfig = field(default_factory=lambda: EngineConfig(kind="auto"))
    progress: str = field(default="auto", metadata={"choices": PROGRESS_MODES})  # auto (a bar on a terminal, log lines otherwise) | bar | lines | none (nemo_lead.runtime.progress)

    def __post_init__(self) -> None:
        check_progress_mode(self.progress)
        if not self.model:
            raise ValueError("model must name a HF model folder or a checkpoint (--model DIR)")
        if not self.prompts and not self.prompts_file:
            raise ValueError("give prompts (prompts='[\"text\", ...]') or prompts_file (--prompts-file F)")
        if self.tp < 1 or self.pp < 1:
            raise ValueError("tp and pp must be >= 1")
        check_engine_layout(self.engine, tp=self.tp, pp=self.pp, prefix="", own_layout=False)
        if self.precision not in PRECISION_CHOICES:
            raise ValueError(f"precision must be one of {', '.join(PRECISION_CHOICES)}, got {self.precision!r}")


def read_prompts(cfg: GenerateConfig) -> list[str]:
    """The prompt texts of `cfg` (errors name the file and line)."""
    texts = list(cfg.prompts)
    if cfg.prompts_file:
        path = Path(cfg.prompts_file)
        for n, row in iter_jsonl(path):
            text = row.get("prompt", row.get("problem")) if isinstance(row, dict) else None
            if not isinstance(text, str):
                raise ValueError(f"{path}:{n}: needs a string field 'prompt' or 'problem'")
            texts.append(text)
    if not texts:
        raise ValueError(f"{cfg.prompts_file}: no prompts in the file")
    return texts


def encode(tokenizer, text: str, chat_template: bool) -> list[int]:
    """Token ids of one prompt: a chat template's user turn + generation prompt (it writes its own special
    tokens, so none are added), or the plain text with the tokenizer's default special tokens."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                 tokenize=False)
        return tokenizer(rendered, add_special_tokens=False)["input_ids"]
    return tokenizer(text)["input_ids"]


def generate_rank(cfg: GenerateConfig) -> None:
    """The job on one rank (every rank of the TP x PP group calls it; rank 0 writes)."""
    source = model_source(cfg.model)
    tokenizer = load_tokenizer(source.require_tokenizer())
    texts = read_prompts(cfg)
    ids = [encode(tokenizer, t, cfg.chat_template) for t in texts]
    params = with_end_tokens(cfg.sampling, tokenizer, source) if cfg.stop_at_eos else cfg.sampling
    info = init_parallel(cfg.tp, cfg.pp, model_config=source.hf_config)
    try:
        if info.dp != 1:
            raise ValueError(f"generate runs on exactly tp x pp = {cfg.tp * cfg.pp} ranks, got {info.world_size}")
        model = load_policy(source, info, resolve_precision(cfg.precision, source))
        progress = LoopProgress("generate", 1, mode=cfg.progress, active=info.rank == 0, unit="call")
        progress.say(f"{len(ids)} prompts x {params.n} samples, max_tokens {params.max_tokens}, "
                     f"engine {cfg.engine.kind} (tp {info.tp}, pp {info.pp})")
        engine = build_engine(cfg.engine, model)
        try:
            rollouts = engine.generate(ids, params)
        finally:
            engine.close()  # vllm: before the job's process groups go
        tokens = sum(r.num_tokens for r in rollouts)
        progress.step(1, {"samples": str(len(rollouts)), "tokens": f"{tokens:,}"})
        progress.close()
        if info.rank == 0:
            _write(cfg, texts, rollouts, tokenizer, progress.say)
        if dist.is_initialized():
            dist.barrier()
    finally:
        destroy_parallel()


def _write(cfg: GenerateConfig, texts: list[str], rollouts, tokenizer, say) -> None:
    lines = []
    for r in rollouts:
        row = {"prompt_index": r.prompt_index, "sample_index": r.sample_index, "prompt": texts[r.prompt_index],
               "text": tokenizer.decode(r.token_ids, skip_special_tokens=True), "token_ids": r.token_ids,
               "num_tokens": r.num_tokens, "finish_reason": r.finish_reason}
        if cfg.logprobs:
            row.update(logprobs=r.logprobs, policy_logprobs=r.policy_logprobs)
        lines.append(json.dumps(row))
    text = "\n".join(lines) + "\n"
    if cfg.out == "-":
        sys.stdout.write(text)
    else:
        Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
        Path(cfg.out).write_text(text)
        say(f"wrote {len(rollouts)} samples to {cfg.out}")


def run_generate(cfg: GenerateConfig) -> int:
    """CLI runner: generate here, or on tp x pp local ranks when started as a single plain process."""
    def preflight() -> None:  # fail on a bad model folder or prompts file before starting ranks
        model_source(cfg.model).require_tokenizer()
        read_prompts(cfg)

    return run_command("generate", generate_rank, (cfg,), ranks=cfg.tp * cfg.pp, preflight=preflight)
