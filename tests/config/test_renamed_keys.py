"""A key renamed when its unit changed is refused, naming the new key and the conversion (`RENAMED_KEYS`),
on the command line and in a file (with its line)."""

import pytest

from nemo_lead.config.loading import ConfigError, load_config
from nemo_lead.generation.megatron_engine.kv_budget import GIB
from nemo_lead.training.rl.config import RLConfig


def test_the_old_kv_budget_key_names_the_new_one_and_the_conversion(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'engine.kv_cache_gb': renamed to 'engine.kv_cache_gib', "
                                          r"in GiB \(2\^30 bytes\).*x 0.9313 \(77 GB = 71.7 GiB\)"):
        load_config(RLConfig, [], ["engine.kv_cache_gb=77"], validate=False)
    f = tmp_path / "rl.yaml"
    f.write_text("steps: 3\nengine:\n  kv_cache_gb: 77\n")
    with pytest.raises(ConfigError, match=r"rl.yaml:3.*renamed to 'engine.kv_cache_gib'"):
        load_config(RLConfig, [f], [], validate=False)
    assert 77e9 / GIB == pytest.approx(71.71, abs=0.005) and 0.9313 == pytest.approx(1e9 / GIB, abs=5e-5)
    cfg = load_config(RLConfig, [], ["engine.kv_cache_gib=71.7"], validate=False)
    assert cfg.engine.kv_cache_gib == 71.7


def test_the_plan_memory_keys_say_gib_and_the_old_names_are_refused(capsys):
    from nemo_lead.cli import main
    from nemo_lead.pipeline.recipe_plan import PlanConfig

    for old, new in (("gpu_memory_gb", "gpu_memory_gib"), ("reserve_gb", "reserve_gib")):
        with pytest.raises(ConfigError, match=rf"unknown key 'plan.{old}': renamed to 'plan.{new}', in GiB"):
            load_config(PlanConfig, [], [f"plan.{old}=80"], validate=False)
    cfg = load_config(PlanConfig, [], ["plan.gpu_memory_gib=80", "plan.reserve_gib=2"], validate=False)
    assert (cfg.plan.gpu_memory_gib, cfg.plan.reserve_gib) == (80, 2)
    with pytest.raises(SystemExit) as e:
        main(["plan", "lead-14b", "--gpus", "8", "--gpu-memory-gb", "80"])
    assert e.value.code == 2 and "--gpu-memory-gb is now --gpu-memory-gib" in capsys.readouterr().err
