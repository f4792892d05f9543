"""Peak tensor memory of a policy train step: chunked log-probs (`actor.logprob_chunk_tokens`) against the
unchunked output layer + log-probs (`logprob_chunk_tokens=0`), measured in the same run.

What is measured: one `policy_train_step` (on-policy GRPO-LEAD loss, entropy bonus 0.001, temperature 0.8:
forward, backward and the optimizer step) of a random Qwen2 with a small body (2 layers, hidden 64, tied
embeddings) and a real vocabulary, fp32, TP1, one micro-batch of all the tokens (sequences of 1,024 tokens),
after one unmeasured warm-up step (so the optimizer state exists). Memory is counted exactly, not as RSS:
a `TorchDispatchMode` sees every tensor an op creates, counts the bytes of each new storage once and drops
them when the storage is freed (a weak reference on it); the figure is the peak of that live set above
what existed before the step (weights, gradients, optimizer state).

Shapes: the issue's vocabulary 151,936 at 1,024 tokens, and 8,192 tokens at 18,992 columns (151,936 / 8,
what one TP8 rank of Qwen's vocabulary holds): both put 156M logits in a [tokens, vocab / tp] tensor.
`--full` adds 151,936 x 8,192 chunked only: unchunked, its [8192, 151936] fp32 tensors (5 GB each, about
five alive at once) do not fit a shared 23 GB machine; its peak is then the 1,024-token figure x 8 (the
[tokens, vocab] tensors scale with tokens; printed as such, not measured).

    OMP_NUM_THREADS=1 .venv/bin/python bench/logprob_memory.py [--record] [--full]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import weakref
from functools import partial
from pathlib import Path

import torch
from results_md import machine_line
from results_md import record as record_md
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

record = partial(record_md, "actor")
BODY = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=True)
SEQ = 1024


class LiveTensorBytes(TorchDispatchMode):
    """Bytes of the CPU storages created while the mode is on and still alive; `peak` is their maximum."""

    def __init__(self):
        super().__init__()
        self.live: dict[int, int] = {}
        self.current = self.peak = 0

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            # a new storage: views and in-place results share an input's (which may predate the mode)
            if key and key not in self.live and key not in inputs:
                self.live[key] = storage.nbytes()
                self.current += storage.nbytes()
                self.peak = max(self.peak, self.current)
                weakref.finalize(storage, self._free, key)
        return out


def _write_model(folder: Path, vocab: int) -> str:
    import transformers

    config = transformers.Qwen2Config(vocab_size=vocab, **BODY)
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(config).save_pretrained(folder)
    return str(folder)


def _batch(tokens: int, vocab: int):
    from nemo_lead.training.actor.microbatch import SequenceBatch

    g = torch.Generator().manual_seed(0)
    n = tokens // SEQ
    return SequenceBatch(tokens=list(torch.randint(1, vocab, (n, SEQ), generator=g)), prompt_lens=[1] * n,
                         advantages=torch.randn(n, generator=g))


def measure(hf_dir: str, vocab: int, tokens: int, chunk: int, precision: str = "fp32", entropy: bool = True) -> dict:
    """Peak live tensor bytes of one policy step (after a warm-up step), and its seconds. `entropy=False`:
    no entropy bonus, old log-probs given (the entropy is then not computed at all)."""
    import dataclasses

    from nemo_lead.algorithms import LeadConfig
    from nemo_lead.parallel import init_parallel
    from nemo_lead.training.actor.config import ActorConfig
    from nemo_lead.training.actor.megatron_actor import build_actor
    from nemo_lead.training.actor.rl_update import policy_train_step

    info = init_parallel(1, 1)
    actor = build_actor(ActorConfig(model=hf_dir, micro_batch_tokens=tokens, logprob_chunk_tokens=chunk,
                                    precision=precision, optim={"lr": 1e-6}), info)
    batch = _batch(tokens, vocab)
    lead = LeadConfig.reference_code()  # entropy coefficient 0.001
    if entropy:
        step = partial(policy_train_step, actor, batch, lead, temperature=0.8, on_policy=True)
    else:
        batch = dataclasses.replace(batch, old_logprobs=[torch.full((SEQ - 1,), -10.0) for _ in batch.tokens])
        step = partial(policy_train_step, actor, batch, lead.replace(entropy_coeff=0.0), temperature=0.8)
    step()
    t0 = time.perf_counter()
    with LiveTensorBytes() as mode:
        metrics = step()
    width = actor.gpt.shared_embedding_or_output_weight().shape[0]
    return {"peak": mode.peak, "seconds": time.perf_counter() - t0, "loss": metrics["loss"], "width": width,
            "logits_bytes": (chunk or tokens) * width * 4}


def _run(vocab: int, tokens: int, chunks: list[int]) -> list[dict]:
    from nemo_lead.parallel import destroy_parallel

    folder = Path(tempfile.mkdtemp(prefix="logprob_memory_"))
    try:
        hf_dir = _write_model(folder / "model", vocab)
        rows = []
        for chunk in chunks:
            r = measure(hf_dir, vocab, tokens, chunk)
            destroy_parallel(keep_process_group=True)
            r.update(vocab=vocab, tokens=tokens, chunk=chunk)
            print(f"vocab {vocab} ({r['width']} columns), {tokens} tokens, chunk {chunk or 'none'}: peak "
                  f"{r['peak'] / 1e9:.3f} GB = {r['peak'] / r['logits_bytes']:.2f} x one fp32 [{chunk or tokens}, "
                  f"{r['width']}] tensor; step {r['seconds']:.1f} s, loss {r['loss']:.6f}", flush=True)
            rows.append(r)
        return rows
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _variants(vocab: int = 18_992, tokens: int = 1024, chunk: int = 256) -> list[str]:
    """Peak over one fp32 [rows, columns] tensor for fp32 / bf16 weights, with and without the entropy."""
    from nemo_lead.parallel import destroy_parallel

    folder = Path(tempfile.mkdtemp(prefix="logprob_memory_"))
    lines = ["| weights | entropy | unchunked: peak GB (x one fp32 [tokens, columns]) | "
             f"chunk {chunk}: peak GB (x one fp32 [chunk, columns]) |", "| --- | --- | --- | --- |"]
    try:
        hf_dir = _write_model(folder / "model", vocab)
        for precision in ("fp32", "bf16"):
            for entropy in (True, False):
                cells = []
                for c in (0, chunk):
                    r = measure(hf_dir, vocab, tokens, c, precision, entropy)
                    destroy_parallel(keep_process_group=True)
                    cells.append(f"{r['peak'] / 1e9:.4f} ({r['peak'] / r['logits_bytes']:.2f})")
                lines.append(f"| {precision} | {'on' if entropy else 'off'} | {cells[0]} | {cells[1]} |")
                print(lines[-1], flush=True)
        return lines
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true", help="write the figures to bench/RESULTS.md")
    ap.add_argument("--full", action="store_true", help="also 151,936 x 8,192 tokens, chunked only")
    args = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    load_start = os.getloadavg()
    cases = [(151_936, 1024, [0, 256, 128]), (18_992, 8192, [0, 2048, 1024])]
    if args.full:
        cases.append((151_936, 8192, [2048, 1024]))
    from nemo_lead.parallel import destroy_parallel

    results = {(v, t): _run(v, t, chunks) for v, t, chunks in cases}
    variants = _variants()
    destroy_parallel()
    table = ["| vocabulary (columns) | tokens | chunk | peak GB | x one fp32 [chunk or tokens, columns] | "
             "vs unchunked | step s | loss |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for (vocab, tokens), rows in results.items():
        base = next((r for r in rows if r["chunk"] == 0), None)
        for r in rows:
            if base is not None:
                ratio = f"**{base['peak'] / r['peak']:.1f}x less**" if r["chunk"] else "baseline"
            else:  # the 1,024-token unchunked peak x tokens / 1,024: computed, not measured
                scaled = results[(vocab, 1024)][0]["peak"] * tokens / 1024
                ratio = (f"{scaled / r['peak']:.1f}x less than {tokens // 1024} x the 1,024-token unchunked peak "
                         f"({scaled / 1e9:.1f} GB; not run)")
            table.append(f"| {vocab} ({r['width']}) | {tokens} | {r['chunk'] or 'none'} | {r['peak'] / 1e9:.3f} | "
                         f"{r['peak'] / r['logits_bytes']:.2f} | {ratio} | {r['seconds']:.1f} | {r['loss']:.6f} |")
    print("\n".join(table))
    if args.record:
        cmd = "OMP_NUM_THREADS=1 .venv/bin/python bench/logprob_memory.py --record" + (" --full" if args.full else "")
        record("logprob-memory", "Peak tensor memory of a train step: chunked vs unchunked log-probs (CPU)", [
            f"Command: `{cmd}`; {machine_line(torch.get_num_threads(), load_start)}.",
            "",
            "One on-policy `policy_train_step` (forward, backward, optimizer step; entropy bonus 0.001, temperature "
            "0.8) of a random Qwen2 with 2 layers, hidden 64, tied embeddings, fp32, TP1, one micro-batch of "
            "sequences of 1,024 tokens, after a warm-up step. Peak = the most bytes of tensor storage alive at "
            "once during the step beyond what existed before it, counted exactly by a TorchDispatchMode (new "
            "storages by their bytes, released when freed), not RSS. Baseline: `actor.logprob_chunk_tokens=0` "
            "(the output layer's [tokens, columns] logits and the log-prob / entropy tensors of the whole "
            "micro-batch), in the same run.",
            "",
            *table,
            "",
            "\"x one fp32 tensor\": the peak over the bytes of one [chunk, columns] fp32 tensor (unchunked: "
            "[tokens, columns]); the remainder is the body's activations and the [columns, hidden] weight "
            "gradients. 18,992 columns = 151,936 / 8, one TP8 rank's share of Qwen's vocabulary.",
            "",
            "By weights' precision and entropy (18,992 columns, 1,024 tokens; the entropy off: old log-probs given, "
            "no bonus):",
            "",
            *variants,
        ])


if __name__ == "__main__":
    sys.exit(main())
