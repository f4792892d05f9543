"""Megatron model vs transformers on 2 ranks (gloo): logits parity (fp32, <= 1e-5), per-token log-probs from
vocab-parallel logits with the padding masked, and HF -> Megatron -> HF bit-identical weights, at TP1 (x DP2),
TP2 and PP2, and TP2 x PP2 on 4 ranks, for a tiny Qwen2 (untied, q/k/v biases, sharded
safetensors index) and a tiny Llama (tied embeddings)."""

import pytest
import torch
from distributed import run_distributed

from nemo_lead.models import write_tiny_model

LAYOUTS = [(1, 1), (2, 1), (1, 2)]  # (tp, pp) on 2 ranks; (1, 1) is DP2


@pytest.fixture(scope="module")
def tiny_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    # init_std 0.1 plus randomised norms/biases: logits of order 1-5, so a misplaced weight shows
    qwen = write_tiny_model(root / "qwen2", "qwen2", seed=11, init_std=0.1, max_shard_size="40KB")
    llama = write_tiny_model(root / "llama", "llama", seed=12, init_std=0.1)
    return str(qwen), str(llama)


def _parity_job(folders, layouts):
    import transformers
    from megatron.core import tensor_parallel

    from nemo_lead.models import (
        HFReader,
        build_gpt,
        export_hf_weights,
        forward_logits,
        load_hf_weights,
        mask_vocab_padding,
    )
    from nemo_lead.parallel import destroy_parallel, init_parallel

    ids = torch.randint(0, 102, (2, 24), generator=torch.Generator().manual_seed(0))
    refs = {}
    for d in folders:
        hf = transformers.AutoModelForCausalLM.from_pretrained(d, attn_implementation="eager", dtype=torch.float32)
        with torch.no_grad():
            refs[d] = hf(ids).logits
    results = {}
    for tp, pp in layouts:
        info = init_parallel(tp, pp)
        for d in folders:
            model = build_gpt(d, info, "fp32", init=False)
            load_hf_weights(model, d)
            logits = forward_logits(model, ids)
            err = None if logits is None else (logits - refs[d]).abs().max().item()
            reader = HFReader(d)
            exported = list(export_hf_weights(model))
            mismatched = [n for n, t in exported if not torch.equal(t, reader.read(n))]
            names = [n for n, _ in exported]
            results[(tp, pp, d)] = (err, refs[d].abs().max().item(), mismatched, sorted(names) == sorted(reader.file_of))
            if pp == 1:  # per-token log-probs straight from the vocab-parallel logits, padding masked
                with torch.no_grad():
                    local = model(ids, torch.arange(ids.shape[1]).expand_as(ids), None)
                    nll = tensor_parallel.vocab_parallel_cross_entropy(mask_vocab_padding(local, 102), ids)
                ref = torch.log_softmax(refs[d], -1).gather(-1, ids[..., None])[..., 0]
                results[("logp", tp, d)] = (local.shape[-1], (-nll - ref).abs().max().item())
        if (tp, pp) == (2, 1):  # bf16 smoke: builds, loads (cast) and runs; close to fp32 at bf16 precision
            model = build_gpt(folders[0], info, "bf16", init=False)
            load_hf_weights(model, folders[0])
            logits = forward_logits(model, ids)
            results["bf16"] = (logits.dtype, (logits.float() - refs[folders[0]]).abs().max().item())
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return results


def _check_layouts(per_rank, layouts, folders):
    for tp, pp in layouts:
        for d in folders:
            for rank, res in enumerate(per_rank):
                err, scale, mismatched, same_names = res[(tp, pp, d)]
                assert mismatched == [] and same_names, (tp, pp, d, rank)  # bit-identical, nothing extra/missing
                if pp == 2 and rank % (2 * tp) < tp:  # first stage (ranks are ordered tp fastest, then pp)
                    assert err is None  # logits live on the last stage
                    continue
                assert scale > 1.0  # the comparison is not between near-zero numbers
                assert err <= 1e-5, (tp, pp, d, rank, err)


def test_megatron_matches_transformers_and_round_trips(tiny_folders):
    per_rank = run_distributed(_parity_job, 2, tiny_folders, LAYOUTS)
    _check_layouts(per_rank, LAYOUTS, tiny_folders)
    for rank, res in enumerate(per_rank):
        for tp in (1, 2):
            for d in tiny_folders:
                width, err = res[("logp", tp, d)]
                assert width == 128 // tp and err <= 1e-5, (rank, tp, d, err)  # vocab-parallel shards, HF's log-probs
    dtype, err = per_rank[0]["bf16"]
    assert dtype == torch.bfloat16 and err < 0.25


def test_tp2_x_pp2_on_four_ranks(tiny_folders):
    per_rank = run_distributed(_parity_job, 4, tiny_folders, [(2, 2)])
    _check_layouts(per_rank, [(2, 2)], tiny_folders)
