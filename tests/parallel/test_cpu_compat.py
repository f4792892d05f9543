"""The CPU compatibility layer: each patch on its own, then megatron-core's training machinery through it
(TP2 with dropout + activation recomputation, PP2 pipelined schedule over gloo p2p, DDP + distributed
optimizer at DP2) on 2 ranks."""

import pytest
import torch
from distributed import run_distributed

from nemo_lead.parallel import cpu

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU layer is for machines without a GPU")


@pytest.fixture
def cpu_layer():
    cpu.enable()
    try:
        yield
    finally:
        cpu.disable()


def test_cuda_devices_map_to_cpu(cpu_layer):
    assert torch.empty(3, device="cuda").device.type == "cpu"
    assert torch.zeros(2, device=torch.cuda.current_device()).device.type == "cpu"
    assert torch.tensor([1.0], device="cuda:1", pin_memory=True).device.type == "cpu"
    x = torch.ones(2)
    assert x.cuda() is x
    assert x.to("cuda").device.type == "cpu" and x.to("cuda", torch.float64).dtype == torch.float64
    assert torch.cuda.synchronize() is None


def test_suspended_runs_a_block_without_the_mode(cpu_layer):
    with cpu.suspended():
        with pytest.raises((AssertionError, RuntimeError)):  # torch's own "not compiled with CUDA"
            torch.empty(1, device="cuda")
        assert torch.cuda.current_device() == 0  # the patches stay
    assert torch.empty(1, device="cuda").device.type == "cpu"  # the mode is back


def test_suspended_leaves_a_later_mode_alone(cpu_layer):
    from torch.overrides import TorchFunctionMode

    class Counting(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counting.calls += 1
            return func(*args, **(kwargs or {}))

    with Counting():
        with cpu.suspended():  # ours is not on top: popping would remove Counting, so nothing is popped
            assert torch.empty(1, device="cuda").device.type == "cpu"
            torch.ones(1)
    assert Counting.calls >= 2


class _CudaInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * torch.full((1,), 2.0, device="cuda")  # like megatron's recomputed causal masks


def test_backward_code_runs_under_the_layer(cpu_layer):
    x = torch.ones(3, requires_grad=True)
    _CudaInBackward.apply(x).sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))
    (g,) = torch.autograd.grad(_CudaInBackward.apply(x).sum(), x)
    assert torch.equal(g, torch.full((3,), 2.0))


def test_megatron_scratch_buffer_lives_on_cpu(cpu_layer):
    from megatron.core.utils import GlobalMemoryBuffer

    buf = GlobalMemoryBuffer().get_tensor((2, 3), torch.float32, "scratch")
    assert buf.shape == (2, 3) and buf.device.type == "cpu"


def test_type_names_are_cuda_only_for_megatron_optimizer(cpu_layer):
    x = torch.ones(2)
    assert x.type() == "torch.FloatTensor"  # this module is not megatron's optimizer
    optimizer_globals = {"__name__": "megatron.core.optimizer.clip_grads", "x": x}
    exec("name = x.type()", optimizer_globals)
    assert optimizer_globals["name"] == "torch.cuda.FloatTensor"


def test_rng_tracker_forks_the_cpu_generator(cpu_layer):
    from megatron.core.tensor_parallel import get_cuda_rng_tracker

    tracker = get_cuda_rng_tracker()
    assert isinstance(tracker, cpu.CpuRNGStatesTracker)
    tracker.add("model-parallel-rng", 77)
    torch.manual_seed(1)
    with tracker.fork():
        first = torch.rand(3)
    outside = torch.rand(3)
    with tracker.fork():
        second = torch.rand(3)
    expected = torch.rand(6, generator=torch.Generator().manual_seed(77))
    assert torch.equal(torch.cat([first, second]), expected)  # the tracked stream continues across forks
    assert torch.equal(outside, torch.rand(3, generator=torch.Generator().manual_seed(1)))  # default untouched
    with pytest.raises(ValueError, match="already tracked"):
        tracker.add("other", 77)
    with pytest.raises(KeyError, match="not tracked"):
        with tracker.fork("missing"):
            pass


def test_disable_restores_torch_cuda():
    original = torch.cuda.current_device
    cpu.enable()
    cpu.enable()  # idempotent
    assert torch.cuda.current_device() == 0
    cpu.disable()
    assert torch.cuda.current_device is original
    assert torch.autograd._engine_run_backward.__module__ == "torch.autograd.graph"
    assert torch.empty(1).device.type == "cpu" and not cpu.is_enabled()


# ----------------------------------------------------------------------------- megatron through the layer
def _train_step(model_cfg_overrides, tp, pp, seed=5):
    """One optimizer step (DDP + distributed optimizer, 2 micro-batches) -> (losses, grad norm, model)."""
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.pipeline_parallel import get_forward_backward_func

    from nemo_lead.models import build_gpt
    from nemo_lead.parallel import init_parallel, seed_model_parallel_rng

    info = init_parallel(tp, pp, seed=seed)
    model = build_gpt("tiny-qwen2", info, config_overrides=model_cfg_overrides)
    ddp = DistributedDataParallel(model.config, DistributedDataParallelConfig(use_distributed_optimizer=True), model)
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=1e-2, use_distributed_optimizer=True,
                                                 clip_grad=1.0), [ddp])
    batches = iter(torch.randint(0, 102, (2, 2, 16), generator=torch.Generator().manual_seed(0)))
    seed_model_parallel_rng(seed + 1)  # same dropout streams for runs that compare

    def step(data, m):
        ids = next(data)
        out = m(ids, torch.arange(16).expand(2, 16), None, labels=ids)
        return out, lambda o: (o.float().mean(), {"loss": o.float().mean().detach()})

    losses = get_forward_backward_func()(forward_step_func=step, data_iterator=batches, model=[ddp],
                                         num_microbatches=2, seq_length=16, micro_batch_size=2, forward_only=False)
    before = [p.detach().clone() for p in model.parameters()]
    ok, grad_norm, _ = opt.step()
    changed = all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))
    return [float(x["loss"]) for x in losses], grad_norm, ok and changed, model


def _megatron_job():
    import torch.distributed as dist

    from nemo_lead.parallel import destroy_parallel

    out = {}
    # TP2 with dropout: full activation recomputation replays the same dropout masks (RNG tracker + state
    # save/restore on the CPU generator), so loss and grad norm equal the run without recomputation.
    dropout = {"attention_dropout": 0.1, "hidden_dropout": 0.1}
    plain = _train_step(dropout, tp=2, pp=1)
    destroy_parallel(keep_process_group=True)
    recompute = _train_step({**dropout, "recompute_granularity": "full", "recompute_method": "uniform",
                             "recompute_num_layers": 1}, tp=2, pp=1)
    destroy_parallel(keep_process_group=True)
    out["tp2"] = (plain[:3], recompute[:3])
    # PP2: megatron's 1F1B schedule, p2p over gloo
    out["pp2"] = _train_step({}, tp=1, pp=2)[:3]
    destroy_parallel(keep_process_group=True)
    # DP2: the distributed optimizer shards the update; replicas must end identical
    losses, gn, ok, model = _train_step({}, tp=1, pp=1)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(2)]
    dist.all_gather(gathered, flat)
    out["dp2"] = (losses, gn, ok, torch.equal(gathered[0], gathered[1]))
    destroy_parallel()
    return out


def test_megatron_training_machinery_runs_on_cpu():
    r0, r1 = run_distributed(_megatron_job, 2)
    plain, recompute = r0["tp2"]
    assert plain[2] and recompute[2]  # steps succeeded and every parameter moved
    assert plain[0] == pytest.approx(recompute[0], abs=1e-6) and plain[1] == pytest.approx(recompute[1], rel=1e-5)
    assert r0["tp2"] == r1["tp2"]  # TP ranks agree on loss and grad norm
    # PP2: the loss lives on the last stage only; both stages stepped with the same global grad norm
    assert r0["pp2"][0] == [] and len(r1["pp2"][0]) == 2 and all(loss > 0 for loss in r1["pp2"][0])
    assert r0["pp2"][1] == pytest.approx(r1["pp2"][1]) and r0["pp2"][2] and r1["pp2"][2]
    for r in (r0, r1):
        assert r["dp2"][2] and r["dp2"][3]
