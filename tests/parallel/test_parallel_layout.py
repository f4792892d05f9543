"""Layout checks and launcher detection: pure functions, no processes."""

import socket

import pytest

from nemo_lead.parallel import (
    LayoutError,
    check_layout,
    describe_hosts,
    detect_launch,
    model_shape,
    rank_hosts,
)
from nemo_lead.parallel.state import _first_slurm_host

R1_7B = {"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4}


def test_valid_layouts_give_data_parallel_rest():
    assert check_layout(8, 2, 2).dp == 2
    assert check_layout(1).dp == 1
    layout = check_layout(16, 4, 2, **model_shape(R1_7B))
    assert (layout.tp, layout.pp, layout.dp) == (4, 2, 2)


@pytest.mark.parametrize(
    ("world", "tp", "pp", "shape", "reason"),
    [
        (3, 2, 1, {}, "world size 3 is not divisible by tp x pp = 2 x 1 = 2"),
        (8, 8, 1, model_shape(R1_7B), "tp 8 does not divide the 4 KV heads"),
        (6, 3, 1, {"num_heads": 4}, "tp 3 does not divide the 4 attention heads"),
        (8, 1, 8, {"num_layers": 4}, "pp 8 is larger than the 4 layers"),
        (3, 1, 3, {"num_layers": 4}, "pp 3 does not divide the 4 layers"),
        (2, 0, 1, {}, "tp must be a positive integer"),
    ],
)
def test_impossible_layouts_say_why(world, tp, pp, shape, reason):
    with pytest.raises(LayoutError, match="impossible parallel layout") as e:
        check_layout(world, tp, pp, **shape)
    assert reason in str(e.value)


def test_all_problems_are_listed_at_once():
    with pytest.raises(LayoutError) as e:
        check_layout(6, 4, 1, num_heads=6, num_kv_heads=6)
    msg = str(e.value)
    assert "not divisible by tp x pp" in msg and "attention heads" in msg and "KV heads" in msg


def test_model_shape_defaults_kv_heads_to_heads():
    assert model_shape({"num_hidden_layers": 2, "num_attention_heads": 4}) == {
        "num_layers": 2, "num_heads": 4, "num_kv_heads": 4}


def test_detect_launch_torchrun_slurm_and_single():
    tr = detect_launch({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "n1", "MASTER_PORT": "1234"})
    assert (tr.rank, tr.world_size, tr.local_rank, tr.master_addr, tr.master_port, tr.launcher) == (
        3, 4, 1, "n1", 1234, "torchrun")
    sl = detect_launch({"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1",
                        "SLURM_STEP_NODELIST": "gpu[03-04]", "SLURM_JOB_ID": "123"})
    assert (sl.rank, sl.world_size, sl.local_rank, sl.master_addr, sl.master_port, sl.launcher) == (
        5, 8, 1, "gpu03", 20123, "slurm")
    single = detect_launch({})
    assert (single.rank, single.world_size, single.master_port, single.launcher) == (0, 1, 0, "single")


def test_slurm_node_lists():
    assert _first_slurm_host("node7") == "node7"
    assert _first_slurm_host("a,b") == "a"
    assert _first_slurm_host("gpu[12,15-16],cpu1") == "gpu12"


def test_where_the_ranks_run():
    """The line a job across nodes logs at start (the ranks' host names, gathered once)."""
    assert describe_hosts(["n1", "n1", "n2", "n2"]) == "4 ranks on 2 nodes: n1 (ranks 0-1), n2 (ranks 2-3)"
    assert describe_hosts(["a", "b"]) == "2 ranks on 2 nodes: a (rank 0), b (rank 1)"
    assert describe_hosts(["a", "b", "a", "b"]) == "4 ranks on 2 nodes: a (ranks 0, 2), b (ranks 1, 3)"
    assert describe_hosts(["x"]) == "1 rank on 1 node: x (rank 0)"
    assert rank_hosts() == [socket.gethostname()]  # without torch.distributed: this process's host
