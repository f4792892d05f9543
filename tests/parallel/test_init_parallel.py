"""init_parallel / destroy_parallel in a plain single process, and the multi-rank launcher's failure paths
(errors carry the rank's traceback; timeouts leave no process behind, helpers included)."""

import os
import platform
import subprocess
import time

import pytest
import torch
import torch.distributed as dist
from distributed import run_distributed

from nemo_lead.parallel import LayoutError, cpu, destroy_parallel, host_memory, init_parallel
from nemo_lead.parallel.local import RankFailed

LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS")


@pytest.fixture
def plain_process(monkeypatch):
    for var in LAUNCH_VARS:
        monkeypatch.delenv(var, raising=False)
    yield
    destroy_parallel()


def test_single_process_needs_no_environment(plain_process):
    from megatron.core import parallel_state as ps

    from nemo_lead.models import build_gpt, forward_logits

    for _ in range(2):  # init, tear down, init again in the same process
        info = init_parallel(seed=3, model_config={"num_hidden_layers": 2, "num_attention_heads": 4})
        assert (info.rank, info.world_size, info.tp, info.pp, info.dp, info.launcher) == (0, 1, 1, 1, 1, "single")
        assert info.backend == "gloo" and info.device.type == "cpu" and cpu.is_enabled() != torch.cuda.is_available()
        assert ps.model_parallel_is_initialized()
        if platform.libc_ver()[0] == "glibc" and not torch.cuda.is_available():
            assert host_memory._applied  # CPU runs keep freed host memory mapped (tests/parallel/test_host_memory.py)
        logits = forward_logits(build_gpt("tiny-qwen2", info), torch.zeros(1, 5, dtype=torch.long))
        assert logits.shape == (1, 5, 102) and torch.isfinite(logits).all()
        destroy_parallel()
        assert not dist.is_initialized() and not ps.model_parallel_is_initialized() and not cpu.is_enabled()


def test_impossible_layout_fails_before_starting_anything(plain_process):
    with pytest.raises(LayoutError, match="world size 1 is not divisible by tp x pp = 2 x 1"):
        init_parallel(tp=2)
    with pytest.raises(LayoutError, match="pp 4 is larger than the 2 layers"):
        init_parallel(pp=4, model_config={"num_hidden_layers": 2, "num_attention_heads": 4})
    assert not dist.is_initialized()


def _fails_on_rank_1():
    if int(os.environ["RANK"]) == 1:
        raise ValueError("boom on rank 1")
    return "fine"


def _hangs_with_a_helper(pid_file):
    helper = subprocess.Popen(["sleep", "120"])
    with open(f"{pid_file}.{os.environ['RANK']}", "w") as f:
        f.write(f"{os.getpid()} {helper.pid}")
    time.sleep(120)


def _gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split()[2] == "Z":  # exited, waiting to be reaped by its parent
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


def test_launcher_reports_the_failing_rank():
    with pytest.raises(RankFailed, match="(?s)rank 1 of 2 failed.*ValueError: boom on rank 1"):
        run_distributed(_fails_on_rank_1, 2)


def test_launcher_timeout_kills_ranks_and_their_helpers(tmp_path):
    pid_file = tmp_path / "pids"
    with pytest.raises(TimeoutError, match="did not finish within 3 s"):
        run_distributed(_hangs_with_a_helper, 2, str(pid_file), timeout=3)
    pids = [int(p) for r in range(2) for p in (tmp_path / f"pids.{r}").read_text().split()]
    assert len(pids) == 4 and all(_gone(p) for p in pids)
