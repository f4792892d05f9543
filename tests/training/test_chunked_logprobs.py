"""Chunked log-probs (`actor.logprob_chunk_tokens`) against the unchunked path (CPU, gloo, fp32).

The same policy step (the LEAD loss with the entropy bonus and KL, micro-batches of 48 tokens cut into
chunks of 7 positions) with chunks and without: per-token log-probs and entropies, the loss, the gradient
norm and the weights after one clipped AdamW step agree to 1e-6 at TP1 (tied and untied output weights,
SFT train and eval losses too), TP2 and PP2 (vocabulary padding in play: 300 real tokens of 384 columns).
Memory: a dispatch mode records the widest vocabulary-sized tensor any op makes in the step: at most a
chunk's rows on the chunked path, a whole micro-batch's without. bf16: within bf16 rounding of the
unchunked path.
"""

import pytest
import torch
from distributed import run_distributed
from test_actor import LEAD, OPTIM, SMALL_BUDGET, TEMPERATURE, _layout_step, _make_batch, _tokens
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from nemo_lead.models import write_tiny_model
from nemo_lead.training.actor.config import ActorConfig
from nemo_lead.training.actor.microbatch import SequenceBatch

CHUNK = 7  # positions per chunk: several per micro-batch, and a ragged last one
EXTRA = [f"<x{i}>" for i in range(198)]  # 300 tokens, 384 columns: no other tensor of the model is that wide


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("chunked")
    return {tied: str(write_tiny_model(root / f"tied_{tied}", "qwen2", seed=7, init_std=0.1, extra_tokens=EXTRA,
                                       tie_word_embeddings=tied))
            for tied in (True, False)}


@pytest.fixture(scope="module")
def batch(models):
    return _make_batch(models[True])


class _WidestVocabTensor(TorchDispatchMode):
    """The most rows (positions) of any new floating-point tensor whose last dimension is the local vocabulary
    (views and in-place results of an op's inputs, e.g. the transposed output weights, are not new)."""

    def __init__(self, width: int):
        super().__init__()
        self.width, self.rows = width, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 2 and t.shape[-1] == self.width \
                    and t.untyped_storage().data_ptr() not in inputs:
                self.rows = max(self.rows, t.numel() // self.width)
        return out


def _chunks_and_not(hf_dir, batch, tp, pp, **options):
    return {chunk: _layout_step(hf_dir, batch, tp, pp, SMALL_BUDGET, actor_options={"logprob_chunk_tokens": chunk,
                                                                                  **options})
            for chunk in (0, CHUNK)}


def _one_rank_job(models, batch, sft_batch):
    from nemo_lead.parallel import destroy_parallel, init_parallel
    from nemo_lead.training.actor.megatron_actor import build_actor
    from nemo_lead.training.actor.rl_update import policy_train_step
    from nemo_lead.training.actor.sft_update import sft_eval_loss, sft_train_step

    out = {tied: _chunks_and_not(hf_dir, batch, 1, 1) for tied, hf_dir in models.items()}
    out["bf16"] = _chunks_and_not(models[True], batch, 1, 1, precision="bf16")
    info = init_parallel(1, 1)
    sft, widest = {}, {}
    for chunk in (0, CHUNK):
        cfg = ActorConfig(model=models[True], micro_batch_tokens=SMALL_BUDGET, logprob_chunk_tokens=chunk, optim=OPTIM)
        actor = build_actor(cfg, info)
        sft[chunk] = (sft_eval_loss(actor, sft_batch), sft_train_step(actor, sft_batch))
        actor = build_actor(cfg, info)
        with _WidestVocabTensor(actor.gpt.shared_embedding_or_output_weight().shape[0]) as mode:
            policy_train_step(actor, batch, LEAD, temperature=TEMPERATURE)
        widest[chunk] = mode.rows
    out["sft"], out["widest"] = sft, widest
    destroy_parallel()
    return out


def _two_rank_job(hf_dir, batch):
    from nemo_lead.parallel import destroy_parallel

    out = {(tp, pp): _chunks_and_not(hf_dir, batch, tp, pp) for tp, pp in ((2, 1), (1, 2))}
    destroy_parallel()
    return out


def _assert_same_step(runs, name, tol=1e-6):
    """Equal to `tol`, absolute or relative (fp32 resolves a gradient norm of 12 to 1e-6 only)."""
    plain, chunked = runs[0], runs[CHUNK]
    for key in ("logp", "entropy"):
        assert all(torch.allclose(a, b, rtol=tol, atol=tol) for a, b in zip(chunked[key], plain[key])), (name, key)
    for key in ("loss", "grad_norm", "entropy", "pg_loss", "kl_ref"):
        assert chunked["metrics"][key] == pytest.approx(plain["metrics"][key], rel=tol, abs=tol), (name, key)
    assert chunked["metrics"]["microbatches"] == plain["metrics"]["microbatches"] > 1
    if plain["weights"] is not None:
        assert all(torch.allclose(chunked["weights"][k], w, rtol=tol, atol=tol) for k, w in plain["weights"].items()), name


def _sft_batch():
    g = torch.Generator().manual_seed(5)
    return SequenceBatch(tokens=[_tokens(n, g) for n in (12, 20, 7, 16)], prompt_lens=[3, 1, 2, 5])


def test_chunked_equals_unchunked_on_one_rank(models, batch):
    (out,) = run_distributed(_one_rank_job, 1, models, batch, _sft_batch())
    for tied in (True, False):
        _assert_same_step(out[tied], f"tp1 tied={tied}")
    (eval0, train0), (eval7, train7) = out["sft"][0], out["sft"][CHUNK]
    assert eval7["loss"] == pytest.approx(eval0["loss"], rel=1e-6) and eval7["tokens"] == eval0["tokens"]
    assert train7["loss"] == pytest.approx(train0["loss"], rel=1e-6)
    assert train7["grad_norm"] == pytest.approx(train0["grad_norm"], rel=1e-6)
    # no [micro-batch tokens, vocab] tensor: the widest is one chunk's rows (the unchunked path: 48 tokens)
    assert out["widest"][CHUNK] == CHUNK and out["widest"][0] >= 24
    bf16 = out["bf16"]
    for key in ("loss", "grad_norm", "entropy"):
        assert bf16[CHUNK]["metrics"][key] == pytest.approx(bf16[0]["metrics"][key], rel=2e-2), key


def test_chunked_equals_unchunked_at_tp2_and_pp2(models, batch):
    ranks = run_distributed(_two_rank_job, 2, models[True], batch)
    for layout in ((2, 1), (1, 2)):
        for rank, r in enumerate(ranks):
            _assert_same_step(r[layout], (layout, rank))
            assert r[layout][CHUNK]["metrics"] == ranks[0][layout][CHUNK]["metrics"]
