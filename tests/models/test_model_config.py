"""HF config reading, presets, the tiny fixture and tokenizer, and the errors that come before any build."""

import json

import pytest
import torch

from nemo_lead.models import (
    ModelConfigError,
    arch_from_hf,
    build_gpt,
    char_tokenizer,
    hf_names,
    hf_shapes,
    load_tokenizer,
    padded_vocab_size,
    preset_names,
    read_hf_config,
    te_available,
    write_tiny_model,
)
from nemo_lead.models.hf_weights import _fuse_qkv, _split_qkv


def test_r1_distill_presets_have_their_architectures():
    assert {"r1-distill-qwen-1.5b", "r1-distill-qwen-7b", "r1-distill-qwen-14b", "r1-distill-qwen-32b",
            "tiny-qwen2", "tiny-llama"} <= set(preset_names())
    a = arch_from_hf(read_hf_config("r1-distill-qwen-1.5b"))
    assert (a.num_layers, a.hidden_size, a.num_heads, a.num_kv_heads, a.head_dim) == (28, 1536, 12, 2, 128)
    assert a.qkv_bias and not a.linear_bias and not a.tied_embeddings and a.rope_theta == 10000
    big = arch_from_hf(read_hf_config("r1-distill-qwen-32b"))
    assert (big.num_layers, big.ffn_hidden_size, big.num_kv_heads, big.vocab_size) == (64, 27648, 8, 152064)
    assert big.rope_theta == 1e6 and big.norm_eps == 1e-5
    # parameter count of the 7B from the HF shapes: ~7.6B
    params = sum(torch.Size(s).numel() for s in hf_shapes(arch_from_hf(read_hf_config("r1-distill-qwen-7b"))).values())
    assert 7.5e9 < params < 7.7e9


def test_transformers5_rope_parameters_and_llama3_scaling():
    cfg = dict(read_hf_config("tiny-llama"))
    cfg.pop("rope_theta")
    cfg["rope_parameters"] = {"rope_theta": 5e5, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    a = arch_from_hf(cfg)
    assert a.rope_theta == 5e5 and a.rope_scaling_factor == 8.0
    cfg["rope_parameters"]["rope_type"] = "yarn"
    with pytest.raises(ModelConfigError, match="only 'llama3' scaling"):
        arch_from_hf(cfg)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_type": "mistral"}, "model_type 'mistral' is not supported"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"use_sliding_window": True}, "use_sliding_window"),
        ({"hidden_size": 65}, "not divisible by num_attention_heads"),
    ],
)
def test_unsupported_configs_are_named(change, message):
    with pytest.raises(ModelConfigError, match=message):
        arch_from_hf({**read_hf_config("tiny-qwen2"), **change})


def test_llama_bias_switches_must_agree():
    with pytest.raises(ModelConfigError, match="attention_bias and mlp_bias differ"):
        arch_from_hf({**read_hf_config("tiny-llama"), "attention_bias": True})
    assert arch_from_hf({**read_hf_config("tiny-llama"), "attention_bias": True, "mlp_bias": True}).linear_bias


def test_unknown_source_lists_presets(tmp_path):
    with pytest.raises(ModelConfigError, match="tiny-qwen2"):
        read_hf_config("no-such-model")
    (tmp_path / "config.json").write_text("{\n  bad")
    with pytest.raises(ModelConfigError, match="config.json:2: invalid JSON"):
        read_hf_config(tmp_path)


def test_wrong_types_and_missing_keys_name_the_file_and_the_key(tmp_path):
    good = read_hf_config("tiny-qwen2")
    for change, message in (({"hidden_size": "sixty-four"}, "hidden_size must be an integer, got 'sixty-four'"),
                            ({"num_hidden_layers": None}, "num_hidden_layers must be an integer, got None"),
                            ({"rms_norm_eps": "small"}, "rms_norm_eps must be a number, got 'small'"),
                            ({"num_key_value_heads": 2.5}, "num_key_value_heads must be an integer, got 2.5")):
        (tmp_path / "config.json").write_text(json.dumps({**good, **change}))
        with pytest.raises(ModelConfigError, match=f"^{tmp_path / 'config.json'}: {message}$"):
            read_hf_config(tmp_path)
        with pytest.raises(ModelConfigError, match=f"^the HF config: {message}$"):
            arch_from_hf({**good, **change})
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in good.items() if k != "num_hidden_layers"}))
    with pytest.raises(ModelConfigError, match=f"^{tmp_path / 'config.json'}: num_hidden_layers is missing$"):
        read_hf_config(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelConfigError, match="config.json: a HF config is a JSON object of settings, not list"):
        read_hf_config(tmp_path)
    assert arch_from_hf({**good, "hidden_size": 64.0, "rope_theta": 10000}).hidden_size == 64


def test_fp8_without_transformer_engine_is_a_clear_error():
    if te_available():
        pytest.skip("Transformer Engine is installed here")
    with pytest.raises(ModelConfigError, match="needs Transformer Engine.*nemo-lead\\[te\\]"):
        build_gpt("tiny-qwen2", precision="fp8")
    with pytest.raises(ModelConfigError, match="precision 'fp64'"):
        build_gpt("tiny-qwen2", precision="fp64")


def test_padded_vocab_does_not_depend_on_tp():
    assert padded_vocab_size(102) == 128 and padded_vocab_size(151936) == 151936
    assert padded_vocab_size(152064, 256) == 152064 and padded_vocab_size(129, 64) == 192


def test_qkv_fusion_is_per_query_group_and_invertible():
    arch = arch_from_hf(read_hf_config("tiny-qwen2"))  # 4 heads, 2 groups, head_dim 16
    d = arch.head_dim
    q = torch.arange(4 * d).float()[:, None].expand(-1, 3)
    k, v = 1000 + torch.arange(2 * d).float()[:, None].expand(-1, 3), 2000 + torch.arange(2 * d).float()[:, None].expand(-1, 3)
    fused = _fuse_qkv(q, k, v, groups=2)
    # group 0 = q heads 0-1, k head 0, v head 0; then group 1
    expected_first_col = torch.cat([q[: 2 * d, 0], k[:d, 0], v[:d, 0], q[2 * d :, 0], k[d:, 0], v[d:, 0]])
    assert torch.equal(fused[:, 0], expected_first_col)
    assert all(torch.equal(a, b) for a, b in zip(_split_qkv(fused, arch), (q, k, v)))


def test_tiny_model_folder_loads_in_transformers(tmp_path):
    import transformers

    folder = write_tiny_model(tmp_path / "tiny", "qwen2", seed=3, max_shard_size="40KB")
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1  # really sharded
    cfg = read_hf_config(folder)
    assert cfg["vocab_size"] == len(char_tokenizer()) == read_hf_config("tiny-qwen2")["vocab_size"]
    model = transformers.AutoModelForCausalLM.from_pretrained(folder)
    assert set(model.state_dict()) == set(hf_names(arch_from_hf(cfg)))
    again = write_tiny_model(tmp_path / "again", "qwen2", seed=3)
    m2 = transformers.AutoModelForCausalLM.from_pretrained(again)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), m2.state_dict().values()))  # seeded


def test_char_tokenizer_round_trips_and_chats(tmp_path):
    folder = write_tiny_model(tmp_path / "tiny", "llama", extra_tokens=["\\boxed{"])
    tok = load_tokenizer(folder)
    assert len(tok) == 103 and tok.eos_token == tok.pad_token == "<|endoftext|>"
    text = "<think>\n12+3=15</think> \\boxed{15}"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text
    assert ids[0] == tok.convert_tokens_to_ids("<think>") and tok.convert_tokens_to_ids("\\boxed{") in ids
    assert len(ids) == len(text) - len("<think>") - len("</think>") - len("\\boxed{") + 3
    prompt = tok.apply_chat_template([{"role": "user", "content": "1+1?"}], add_generation_prompt=True, tokenize=False)
    assert prompt == "<|user|>1+1?<|assistant|><think>\n"
    with pytest.raises(FileNotFoundError, match="no tokenizer"):
        load_tokenizer(tmp_path)


def test_tokenizer_is_the_same_with_or_without_config_json(tmp_path):
    """A qwen2 config.json beside a generic tokenizer.json must not switch to Qwen2Tokenizer (which drops
    whitespace for the character vocabulary): the HF folder and a checkpoint's tokenizer/ folder agree."""
    import shutil

    folder = write_tiny_model(tmp_path / "tiny", "qwen2")
    bare = tmp_path / "tokenizer"
    bare.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(folder / f, bare / f)
    text = "a b\nc"
    ids = load_tokenizer(folder)(text)["input_ids"]
    assert ids == load_tokenizer(bare)(text)["input_ids"] and len(ids) == len(text)
