"""The rollout engine interface declares all the loop uses, every engine implements all of it, and the RL
job closes its engine once, before the final save (and before tearing down after an error)."""

import ast
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

from nemo_lead.generation.engine import RolloutEngine
from nemo_lead.plan.engine_kinds import ENGINE_KINDS
from nemo_lead.training.rl import loop

PACKAGE = Path(__file__).resolve().parents[2]


def _engine_classes() -> dict[str, tuple[Path, str]]:
    """Every registered engine kind -> (its module's file, the class its `build` returns), read from source."""
    out = {}
    for name, kind in ENGINE_KINDS.items():
        module, _, function = kind.build.partition(":")
        path = PACKAGE / (module.replace(".", "/") + ".py")
        tree = ast.parse(path.read_text())
        (build,) = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == function]
        out[name] = (path, ast.unparse(build.returns))
    return out


ENGINES = _engine_classes()


def _members(cls: type) -> tuple[set[str], set[str]]:
    """(methods, data members) the Protocol declares."""
    methods = {n for n, v in vars(cls).items() if inspect.isfunction(v) and not n.startswith("_")}
    return methods, set(cls.__annotations__)


@pytest.mark.parametrize("kind", sorted(ENGINES))
def test_every_engine_implements_the_whole_interface(kind):
    """Every registered engine kind's class, read from source (vLLM and TensorRT-LLM need not be installed):
    each method with the Protocol's parameters, each data member set in __init__."""
    methods, data = _members(RolloutEngine)
    path, name = ENGINES[kind]
    tree = ast.parse(path.read_text())
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    defs = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
    for method in methods:
        assert method in defs, f"{name} has no {method}"
        want = [p for p in inspect.signature(getattr(RolloutEngine, method)).parameters if p != "self"]
        args = defs[method].args
        have = [a.arg for a in args.args + args.kwonlyargs][1:]
        assert set(want) <= set(have), f"{name}.{method}{have} lacks {set(want) - set(have)}"
    assigned = {t.attr for n in ast.walk(defs["__init__"]) for t in getattr(n, "targets", [getattr(n, "target", None)])
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    assert data <= assigned, f"{name}.__init__ does not set {data - assigned}"


def test_each_kinds_builder_names_its_class():
    assert {k: ENGINES[k][1] for k in ("megatron", "vllm", "trtllm")} == {
        "megatron": "MegatronEngine", "vllm": "VllmEngine", "trtllm": "TrtllmEngine"}


def test_the_interface_names_what_the_loop_reads():
    methods, data = _members(RolloutEngine)
    assert {"generate", "concurrency", "refit", "sleep", "wake", "close"} <= methods
    assert {"replicas", "weight_version"} <= data


class _Engine:
    def __init__(self):
        self.closed = 0

    def close(self):
        self.closed += 1


def _job(monkeypatch, fail: str | None = None):
    """rl_job with its collaborators replaced: what it closes, and in which order."""
    events, engine, verifier = [], _Engine(), _Engine()
    run = SimpleNamespace(info=None, actor=None, tokenizer=None, tokenizer_dir="", step=0)
    ctx = SimpleNamespace(engine=engine, verifier=verifier)
    cfg = SimpleNamespace(rollout=SimpleNamespace(generator_ranks=0), data=SimpleNamespace(path="p", split=None, fields={},
                          limit=None), validation=SimpleNamespace(data=None), steps=1)

    def step(name, result=None):
        def f(*args, **kwargs):
            events.append((name, engine.closed))
            if name == fail:
                raise RuntimeError(name)
            return result
        return f

    state = SimpleNamespace(loop_state={}, batches=SimpleNamespace(close=step("batches.close")))
    for name, result in (("model_and_prompt", (cfg, None)), ("load_problems", []), ("content_digest", ""),
                         ("start_run", run), ("rollout_context", (ctx, [])), ("_loop_state", state),
                         ("_train", False), ("finish_run", None), ("abort_run", None)):
        monkeypatch.setattr(loop, name, step(name, result))
    return events, engine, verifier, cfg


def test_the_engine_is_closed_once_before_the_final_save(monkeypatch):
    events, engine, verifier, cfg = _job(monkeypatch)
    loop.rl_job(cfg)
    assert engine.closed == 1 and verifier.closed == 1
    assert ("finish_run", 1) in events and ("_train", 0) in events  # closed after the steps, before the save


@pytest.mark.parametrize("fail", ["_train", "finish_run"])
def test_the_engine_is_closed_once_when_the_job_fails(monkeypatch, fail):
    events, engine, verifier, cfg = _job(monkeypatch, fail)
    with pytest.raises(RuntimeError, match=fail):
        loop.rl_job(cfg)
    assert engine.closed == 1 and verifier.closed == 1 and ("abort_run", 1) in events
