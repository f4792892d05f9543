"""The config loader: precedence, presets, includes, and errors that name file, line and key."""

import textwrap
from dataclasses import dataclass, field

import pytest

from nemo_lead.algorithms import LeadConfig
from nemo_lead.config.loading import ConfigError, load_config, to_yaml


@dataclass
class Rollout:
    temperature: float = 0.8
    n: int = 8


@dataclass
class Job:
    lead: LeadConfig = field(default_factory=LeadConfig.paper)
    rollout: Rollout = field(default_factory=Rollout)
    run_dir: str = "runs/x"
    extra: dict = field(default_factory=dict)


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_defaults_files_overrides_precedence(tmp_path):
    a = write(tmp_path, "a.yaml", "rollout:\n  temperature: 0.6\n  n: 4\n")
    b = write(tmp_path, "b.yaml", "rollout:\n  n: 16\n")
    cfg = load_config(Job, [a, b], ["rollout.n=32", "extra.anything=1"])
    assert cfg.rollout.temperature == 0.6 and cfg.rollout.n == 32 and cfg.extra == {"anything": 1}
    assert isinstance(cfg.lead, LeadConfig) and cfg.lead == LeadConfig.paper()


def test_preset_then_explicit_keys_win(tmp_path):
    cfg = load_config(Job, [], ["lead.preset=reference_code", "lead.alpha=0.1"])
    assert cfg.lead == LeadConfig.reference_code().replace(alpha=0.1)
    # a key set in a file before the preset is named still wins over the preset's value
    f = write(tmp_path, "f.yaml", "lead:\n  truncated_reward: -0.5\n")
    cfg = load_config(Job, [f], ["lead.preset=reference_code"])
    assert cfg.lead.truncated_reward == -0.5 and cfg.lead.group_filter == "reference_code"


def test_base_include(tmp_path):
    write(tmp_path, "base.yaml", "rollout:\n  temperature: 0.6\n  n: 4\n")
    child = write(tmp_path, "child.yaml", "_base_: base.yaml\nrollout:\n  n: 2\n")
    cfg = load_config(Job, [child])
    assert (cfg.rollout.temperature, cfg.rollout.n) == (0.6, 2)


def test_unknown_key_names_file_line_and_nearest_key(tmp_path):
    f = write(tmp_path, "r.yaml", "run_dir: out\nrollout:\n  n: 4\n  temprature: 0.7\n")
    with pytest.raises(ConfigError) as e:
        load_config(Job, [f])
    assert f"{f}:4: unknown key 'rollout.temprature' (did you mean 'rollout.temperature'?)" == str(e.value)
    with pytest.raises(ConfigError, match=r"command line: unknown key 'lead.alpah' \(did you mean 'lead.alpha'\?\)"):
        load_config(Job, [], ["lead.alpah=1"])


def test_wrong_type_names_key_and_line(tmp_path):
    f = write(tmp_path, "r.yaml", "rollout:\n  n: many\n")
    with pytest.raises(ConfigError, match=rf"{f}:2: key 'rollout.n': Value 'many'"):
        load_config(Job, [f])
    with pytest.raises(ConfigError, match="command line: key 'rollout.temperature'"):
        load_config(Job, [], ["rollout.temperature=hot"])
    with pytest.raises(ConfigError, match="key 'rollout' is a section"):
        load_config(Job, [], ["rollout=3"])


def test_bad_values_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="lead.loss_agg='avg' is not one of"):
        load_config(Job, [], ["lead.loss_agg=avg"])
    with pytest.raises(ConfigError, match="unknown LEAD preset 'fast'"):
        load_config(Job, [], ["lead.preset=fast"])
    f = write(tmp_path, "broken.yaml", "rollout:\n  n: 4\n  temperature: [0.6\n")
    with pytest.raises(ConfigError, match=rf"{f}:\d+: invalid YAML"):
        load_config(Job, [f])
    with pytest.raises(ConfigError, match="not found"):
        load_config(Job, [tmp_path / "missing.yaml"])
    with pytest.raises(ConfigError, match="key=value"):
        load_config(Job, [], ["rollout.n"])


def test_save_round_trip(tmp_path):
    cfg = load_config(Job, [], ["lead.preset=dapo", "rollout.n=3"])
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    assert load_config(Job, [tmp_path / "config.yaml"]) == cfg


def test_every_common_key_points_at_a_key_some_command_has():
    """The aliases users type from other frameworks (`lr`, `epsilon`, ...) each name keys that exist."""
    from nemo_lead.cli import COMMANDS, _load_attr
    from nemo_lead.config.fields import key_rules
    from nemo_lead.config.loading import COMMON_KEYS

    keys = set().union(*(key_rules(_load_attr(cmd.schema)) for cmd in COMMANDS.values()))
    missing = {alias: target for alias, targets in COMMON_KEYS.items() for target in targets if target not in keys}
    assert not missing, f"COMMON_KEYS targets that no command's config has: {missing}"
    assert COMMON_KEYS["epsilon"] == ("lead.clip_eps_low",) and "lead.clip_eps_low" in keys


def test_a_key_added_later_says_so_on_its_field_and_added_keys_reads_it_oldest_first():
    """`setting(..., since=DATE)` is the one record of a key added after run folders existed: `added_keys`
    finds it in nested sections, oldest first (fields of one date in the schema's order)."""
    from dataclasses import dataclass, field

    from nemo_lead.config.fields import added_keys, setting

    @dataclass
    class Section:
        old: int = 1
        newer: int = setting(2, since="2026-12-06")
        new: int = setting(3, since="2026-12-04")

    @dataclass
    class Schema:
        first: float = setting(0.5, since="2026-12-06")
        section: Section = field(default_factory=Section)
        plain: str = "x"

    assert added_keys(Schema) == (("section.new", "2026-12-04"), ("first", "2026-12-06"),
                                  ("section.newer", "2026-12-06"))
    with pytest.raises(ValueError, match="since must be a date YYYY-MM-DD, got '6 Dec'"):
        setting(1, since="6 Dec")
    with pytest.raises(ValueError, match="results=False keys need none"):
        setting(1, results=False, since="2026-12-06")
