"""`nemo-lead plan` on recipes and config files, and the plan checked before sft / rl / run / submit start.

No GPU and no weights: the models are conf/model presets. GPUs are made to appear for the start-up checks
by patching `torch.cuda.is_available` and the device's kind and memory (`nemo_lead.plan.check.device_gpu`).
"""


import pytest
import torch
from plan_cli import plan_json

from nemo_lead.cli import main
from nemo_lead.config.loading import load_config
from nemo_lead.plan.engine_memory import grown_capacities
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.plan.timing import gpu_named

R14B = "paths.base_model=r1-distill-qwen-14b"
# the update (TP8 without SP, the whole micro-batch's logits at once) and the generation (no KV budget) over 80 GB
UNFIT = ["stages.stage1.actor.sequence_parallel=false", "stages.stage1.actor.logprob_chunk_tokens=0",
         "stages.stage1.actor.offload_during_generation=false", "stages.stage1.engine.kv_cache_gib=null"]


_plan = plan_json


def test_the_14b_recipe_fits_8_h100_and_its_numbers_are_the_hand_computed_ones(tmp_path):
    rc, p = _plan(tmp_path, "lead-14b", "--stage", "stage1", "--gpus", "8", "--gpu-memory-gib", "80", R14B)
    assert rc == 0 and p["fits"] and p["layout"] == {"tp": 8, "pp": 1, "dp": 1}
    assert p["gpu_memory_bytes"] == 80 * 2**30
    # R1-Distill-Qwen-14B at TP8: embedding and output 152064 / 8 rows of 5120; per layer two norms, proj
    # 5120 x 640, qkv (40 + 16) x 128 / 8 = 896 rows (+ bias), fc1 2 x 1728 rows, fc2 5120 x 1728; final norm
    layer = 2 * 5120 + 5120 * 640 + 896 * 5120 + 896 + 3456 * 5120 + 5120 * 1728
    n = 2 * 19008 * 5120 + 48 * layer + 5120
    tensors = 2 + 48 * 7 + 1
    update, generation = p["per_gpu_bytes"]["update"], p["per_gpu_bytes"]["generation"]
    assert update["weights"] == 2 * n and update["grads"] == 4 * n  # bf16 parameters, fp32 gradient buffer
    assert update["optimizer"] == 12 * n + 4 * tensors  # fp32 master copy + two moments, a step per tensor
    # offload during generation: only the weights stay; the KV budget of 71.7 GiB (2^30 bytes) holds whole rows of
    # 1,024 + 14,336 positions, each K and V of 48 layers, 1 KV head of 128 per TP rank, bf16
    assert generation["weights"] == 2 * n and generation["grads"] == generation["optimizer"] == 0
    slot = 2 * 48 * 1 * 128 * 2
    rows = int(71.7 * 2**30 // (15360 * slot))
    assert rows == 203 and generation["kv_cache"] == rows * 15360 * slot
    assert p["per_gpu_bytes"]["update"]["total"] == sum(v for k, v in update.items() if k != "total")
    assert p["left_bytes"]["update"] == p["usable_bytes"] - update["total"] > 0
    assert p["usable_bytes"] == p["gpu_memory_bytes"] - 3 * 2**30
    assert p["step_seconds"]["total"] > p["step_seconds"]["generation"] > p["step_seconds"]["update"] > 0
    # without the budget the cache grows by half from 1,024 + 8 + 16 positions: the peak holds the last size
    # and half the one before (`nemo_lead.generation.megatron_engine.kv_cache.KVCache.reserve`)
    rc, q = _plan(tmp_path, "lead-14b", "--stage", "stage1", "--gpus", "8", "--gpu-memory-gib", "80", R14B,
                  "stages.stage1.engine.kv_cache_gib=null", "stages.stage1.engine.max_batch_size=128")
    previous, final = grown_capacities(1024 + 8 + 16, 1024 + 14336)
    assert q["per_gpu_bytes"]["generation"]["kv_cache"] == 128 * final * slot + 128 * previous * slot // 2


def test_every_gpu_stage_of_the_14b_recipe_fits_8_h100_and_8_h200(tmp_path, capsys):
    for gpu in ("h100", "h200"):
        rc, p = _plan(tmp_path, "lead-14b", "--gpus", "8", "--gpu", gpu, R14B)
        assert rc == 0 and p["fits"]
        assert [s["stage"] for s in p["stages"]] == ["distill", "sft", "stage1", "stage2a", "stage2b", "eval"]
        assert all(s["layout"] == {"tp": 8, "pp": 1, "dp": 1} for s in p["stages"][1:5])
        # the teacher (models/QwQ-32B) is not here: it is planned with its preset's shape (presets:), and said so
        assert p["stages"][0]["stage_seconds"] > 0 and p["untimed_stages"] == [] and p["stages"][-1]["fits"]
        assert "paths.teacher_model=models/QwQ-32B is not readable here: planned with the shape of preset " \
               "r1-distill-qwen-32b" in capsys.readouterr().out


def test_a_stage_whose_model_is_not_readable_and_has_no_preset_gets_no_time(tmp_path, capsys):
    recipe = tmp_path / "teacher.yaml"
    recipe.write_text("hardware: {gpu: h100}\nstages:\n  - name: distill\n    kind: distill\n"
                      "    model: /nowhere/teacher\n    data: problems.jsonl\n    plan: {data_rows: 100}\n")
    rc, p = _plan(tmp_path, str(recipe))
    assert p["stage_seconds"] is None and "not readable here" in p["no_time"] and p["fits"] is None


def test_a_layout_that_does_not_fit_gets_ranked_fixes_and_the_first_one_fits(tmp_path, capsys):
    rc, p = _plan(tmp_path, "lead-14b", "--stage", "stage1", "--gpus", "8", "--gpu", "h100", R14B, *UNFIT)
    out = capsys.readouterr().out
    assert rc == 1 and not p["fits"] and "fits: NO - update:" in out and "generation:" in out
    assert p["left_bytes"]["generation"] < 0 and p["fixes"]
    sizes = [len([k for k in f["changes"] if k not in ("actor.recompute_method", "actor.recompute_num_layers")])
             for f in p["fixes"]]  # a recomputation setting counts once
    assert sizes == sorted(sizes)
    first = p["fixes"][0]
    assert p["recommended"]["changes"] == first["changes"] and first["fits"]
    again = [f"stages.stage1.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in first["changes"].items()]
    rc, p = _plan(tmp_path, "lead-14b", "--stage", "stage1", "--gpus", "8", "--gpu", "h100", R14B, *UNFIT, *again)
    assert rc == 0 and p["fits"] and p["per_gpu_bytes"] == first["per_gpu_bytes"]


def test_a_config_file_is_planned_with_the_commands_defaults_and_job_overrides(tmp_path):
    cfg = tmp_path / "rl.yaml"
    cfg.write_text("actor: {model: r1-distill-qwen-7b, tp: 2}\nrollout: {max_tokens: 8192}\n")
    rc, p = _plan(tmp_path, str(cfg), "--gpus", "4", "--gpu", "h200", "job.actor.sequence_parallel=true")
    assert p["kind"] == "rl" and p["layout"] == {"tp": 2, "pp": 1, "dp": 2} and p["gpu"] == "h200"
    assert p["assumptions"]["max_tokens"] == 8192 and rc == (0 if p["fits"] else 1)
    rc, q = _plan(tmp_path, "--command", "rl", "--gpus", "4", "--gpu", "h200", "job.actor.model=r1-distill-qwen-7b",
                  "job.actor.tp=2", "job.rollout.max_tokens=8192", "job.actor.sequence_parallel=true")
    assert q["per_gpu_bytes"] == p["per_gpu_bytes"]


def test_the_plan_takes_the_actors_gpu_micro_batch_budget():
    from nemo_lead.plan.job import GPU_MICRO_BATCH_TOKENS
    from nemo_lead.training.actor.config import GPU_MICRO_BATCH_TOKENS as ACTOR_GPU_TOKENS

    assert GPU_MICRO_BATCH_TOKENS == ACTOR_GPU_TOKENS


def test_bad_plan_input_is_named(tmp_path, capsys):
    vague = tmp_path / "vague.yaml"
    vague.write_text("actor: {tp: 2}\n")
    assert main(["plan", str(vague), "--gpus", "2"]) == 2
    assert "add --command sft|rl" in capsys.readouterr().err
    assert main(["plan", "lead-14b", "--gpus", "8", "--stage", "stage1_data", R14B]) == 2
    assert "no SFT / RL / distill / eval stage 'stage1_data'" in capsys.readouterr().err
    assert main(["plan", "lead-14b", "--gpus", "6", R14B]) == 2
    assert "stages.sft.actor.tp, stages.sft.actor.pp: tp x pp = 8 does not divide the job's 6 ranks" in (
        capsys.readouterr().err)
    with pytest.raises(ValueError, match="plan.check must be one of"):
        PlanSettings(check="maybe")
    with pytest.raises(ValueError, match="unknown GPU 'v100'"):
        PlanSettings(gpu="v100")


# ----------------------------------------------------------------------------- checks before starting
@pytest.fixture
def gpus(monkeypatch):
    """This process sees 80 GiB H100s."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("nemo_lead.plan.check.device_gpu", lambda settings: (gpu_named("h100"), 80.0))


def _rl_config(*overrides):
    from nemo_lead.training.rl.config import RLConfig

    return load_config(RLConfig, [],
                       ["out=x", "data.path=x", "actor.model=r1-distill-qwen-14b", "actor.tp=8",
                        "rollout.max_tokens=14336", *overrides])


def test_rl_and_sft_stop_before_starting_when_the_plan_does_not_fit(gpus, capsys):
    from nemo_lead.training.rl.loop import run_rl

    # TP8 without SP and the whole micro-batch's logits at once: the update does not fit 80 GB
    assert run_rl(_rl_config("actor.logprob_chunk_tokens=0")) == 2  # returns before any rank starts
    err = capsys.readouterr().err
    assert "the plan does not fit the GPUs" in err and "update:" in err and "actor.sequence_parallel=true" in err
    from nemo_lead.training.sft.config import SFTConfig
    from nemo_lead.training.sft.loop import run_sft

    sft = load_config(SFTConfig, [], ["out=x", "data.path=x", "actor.model=r1-distill-qwen-14b",
                                                             "actor.tp=8", "data.max_seq_len=16384",
                                                             "actor.logprob_chunk_tokens=0"])
    assert run_sft(sft) == 2
    assert "sft (sft)" in capsys.readouterr().err


def test_the_start_up_check_warns_or_stays_quiet_when_asked(gpus, capsys):
    from nemo_lead.plan.check import check_before_start

    assert check_before_start(_rl_config("plan.check=warn"), "rl") == 0
    assert "plan.check=warn: starting anyway" in capsys.readouterr().err
    assert check_before_start(_rl_config("plan.check=off"), "rl") == 0
    assert capsys.readouterr().err == ""
    fits = _rl_config("actor.sequence_parallel=true", "actor.offload_during_generation=true", "engine.max_batch_size=128")
    assert check_before_start(fits, "rl") == 0 and capsys.readouterr().err == ""


def test_the_check_needs_gpus():
    from nemo_lead.plan.check import check_before_start

    assert not torch.cuda.is_available()  # the suite hides GPUs
    assert check_before_start(_rl_config(), "rl") == 0


def test_run_checks_every_stage_before_the_first_one_starts(gpus, tmp_path, capsys):
    out = tmp_path / "run"
    data = tmp_path / "deepscaler.jsonl"  # the preflight reads the problems before the plan is checked
    data.write_text('{"problem": "1+1?", "answer": "2", "difficulty": 3.0}\n')
    inputs = [f"paths.deepscaler={data}", "paths.teacher_model=r1-distill-qwen-32b"]
    assert main(["run", "lead-14b", "--out", str(out), R14B, *inputs, *UNFIT]) == 2
    err = capsys.readouterr().err
    assert "stage1 (rl)" in err and "stages.stage1.actor.sequence_parallel=true" in err
    assert not (out / "stages").exists()  # no stage started (not even the first, a problem selection)


def test_submit_checks_each_jobs_plan_on_the_named_gpus(tmp_path, capsys):
    base = ["submit", "lead-14b", "--out", str(tmp_path / "r"), "--dry-run", f"job.{R14B}"]
    unfit = [f"job.{o}" for o in UNFIT]
    assert main([*base, "plan.gpu=h100", *unfit]) == 2
    err = capsys.readouterr().err
    assert "stage1 (rl)" in err and "job.stages.stage1.actor.sequence_parallel=true" in err
    assert main([*base, "plan.gpu=h100", "plan.check=warn", *unfit]) == 0
    captured = capsys.readouterr()
    assert "starting anyway" in captured.err and "plan.check=warn" in captured.out  # the jobs get it too
    assert main([*base, "plan.gpu=h100"]) == 0  # the shipped recipe fits
    assert main([*base, *unfit]) == 2  # no GPUs named: the recipe's (hardware: {gpu: h100})
    assert "planned on the recipe's hardware, 8 x h100" in capsys.readouterr().err


def test_a_recipe_without_gpu_flags_is_planned_on_the_hardware_it_names(tmp_path, capsys):
    """lead-32b names H100s (hardware.gpu, from lead-14b) and two nodes of 8 for its SFT / RL stages (slurm:),
    one for distill and eval; its model folder is not here, so its preset (the 32B shape) stands in."""
    rc, p = _plan(tmp_path, "lead-32b", "--fastest", "0", megatron=False)
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert rc == 0 and first.startswith("planned on the hardware lead-32b.yaml names: H100 GPUs (hardware.gpu), "
                                        "each stage on its slurm: nodes x GPUs per node (distill: 8, sft: 16, "
                                        "stage1: 16, stage2a: 16, stage2b: 16, eval: 8 GPUs)")
    assert p["gpus"] is None and p["gpus_per_stage"] == {"distill": 8, "sft": 16, "stage1": 16, "stage2a": 16,
                                                          "stage2b": 16, "eval": 8}
    assert [(s["gpus"], s["gpu"]) for s in p["stages"]] == [(8, "h100"), *[(16, "h100")] * 4, (8, "h100")]
    assert 32e9 < p["stages"][1]["parameters"] < 33e9  # presets.base_model: the 32B shape, not lead-14b's 14B
    assert "(no --gpu given" not in out
    # flags override the recipe's hardware, each its own part
    rc, q = _plan(tmp_path, "lead-32b", "--stage", "stage1", "--gpus", "8", "--gpu", "h200", "--fastest", "0",
                  megatron=False)
    assert q["gpus"] == 8 and q["gpu"] == "h200" and "planned on the hardware" not in capsys.readouterr().out
    rc, q = _plan(tmp_path, "lead-14b-h200", "--stage", "stage1", "--gpus", "16", "--fastest", "0", megatron=False)
    first = capsys.readouterr().out.splitlines()[0]
    assert q["gpus"] == 16 and q["gpu"] == "h200"
    assert first == ("planned on the hardware lead-14b-h200.yaml names: H200 GPUs (hardware.gpu); --gpu NAME plan on "
                     "others")


def test_a_config_file_needs_its_gpus(tmp_path, capsys):
    config = tmp_path / "rl.yaml"
    config.write_text("prompts_per_step: 8\n")
    assert main(["plan", str(config), "job.actor.model=tiny-qwen2"]) == 2
    assert "gpus must be given" in capsys.readouterr().err
