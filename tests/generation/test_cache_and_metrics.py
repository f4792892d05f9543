"""KV cache bookkeeping (select / ensure / window / replicate / reserve keep each row's data; fixed storage
under a budget), the budget arithmetic, and the train/inference mismatch metric (hand-computed numbers,
both input forms, errors)."""

import math

import pytest
import torch

from nemo_lead.generation import logprob_mismatch
from nemo_lead.generation.megatron_engine.kv_cache import KVCache


def _cache(rows, capacity, fill):
    cache = KVCache(2, rows, 1, 2, capacity, torch.float32, torch.device("cpu"))
    for layer in range(2):
        k = torch.arange(rows * capacity * 2, dtype=torch.float32).reshape(rows, 1, capacity, 2) + fill + layer
        cache.write_block(layer, k, -k)
    return cache


def test_cache_rows_survive_compaction_growth_and_admission():
    a = _cache(3, 4, 0.0)
    row2 = a.keys[1][2].clone()
    a.reserve(5)  # grows geometrically, keeps the data, zero beyond
    assert a.capacity == 6 and torch.equal(a.keys[1][2, :, :4], row2[:, :4]) and a.keys[1][:, :, 4:].abs().sum() == 0
    a.select([2, 0])
    assert a.batch == 2 and torch.equal(a.keys[1][0, :, :4], row2) and torch.equal(a.values[1][0, :, :4], -row2)
    # admission: two prompts prefilled into rows 2 and 3, then 2 and 3 samples of them
    a.ensure(2 + 5, 9)
    assert a.allocated_rows == 7 and a.capacity == 9 and torch.equal(a.keys[1][0, :, :4], row2)
    window = a.window(2, 2)
    k = torch.arange(2 * 9 * 2, dtype=torch.float32).reshape(2, 1, 9, 2) + 100
    for layer in range(2):
        window.write_block(layer, k + layer, -k)
    a.replicate(2, [2, 3], filled=9)
    assert a.batch == 7 and torch.equal(a.keys[1][0, :, :4], row2)
    for row, prompt in zip(range(2, 7), (0, 0, 1, 1, 1)):
        assert torch.equal(a.keys[1][row], k[prompt] + 1) and torch.equal(a.values[0][row], -k[prompt])
    a.write_at(0, torch.ones(3, 1, 2), torch.full((3, 1, 2), 2.0), a.slots(torch.tensor([4, 5, 8])))
    assert a.keys[0][0, 0, 4].tolist() == [1, 1] and a.values[0][2, 0, 8].tolist() == [2, 2]
    k, v = a.view(0, 6)
    assert k.shape == (7, 1, 6, 2) and v.shape == (7, 1, 6, 2)
    assert a.nbytes() == 2 * 2 * 7 * 9 * 2 * 4 and a.peak_bytes == a.nbytes()
    with pytest.raises(ValueError, match="only 7 allocated"):
        a.window(6, 2)


def test_cache_storage_stays_put_until_it_grows():
    """Compaction and admissions inside the allocated rows keep the tensors (CUDA graphs hold their addresses)."""
    a = KVCache(1, 0, 1, 2, 4, torch.float32, torch.device("cpu"), reserve_rows=4)
    storage, version = a._k[0], a.version
    a.ensure(3, 4)
    a.window(0, 3).write_block(0, torch.ones(3, 1, 4, 2), torch.ones(3, 1, 4, 2))
    a.replicate(0, [1, 1, 1], filled=4)
    a.select([2, 0])
    a.ensure(4, 3)
    a.replicate(2, [1, 1], filled=3)
    assert a.version == version and a._k[0] is storage and a.batch == 4
    bucket = a.bucket(4)
    bucket.write_at(0, torch.ones(4, 1, 2), torch.zeros(4, 1, 2), bucket.slots(torch.tensor([1, 1, 1, 1])))
    assert a.keys[0][:, 0, 1].sum() == 8 and bucket.view(0, 4)[0].shape == (4, 1, 4, 2)
    a.reserve(5, rows=4)
    assert a.version == version + 1 and a.capacity == 6 and a.allocated_rows == 4
    a.select([1])
    a.reserve(9, rows=1)  # no admissions left: only the live row grows
    assert a.allocated_rows == 1 and a.capacity == 9
    with pytest.raises(ValueError, match="only 1 allocated"):
        a.bucket(2)


def test_fixed_storage_never_moves_and_grows_only_its_logical_capacity():
    """Under a KV budget the storage is allocated once (rows x max_capacity) and holds exactly that."""
    a = KVCache(2, 0, 1, 2, 4, torch.float32, torch.device("cpu"), reserve_rows=3, max_capacity=10)
    storage, bytes_ = a._k[0], a.nbytes()
    assert bytes_ == 2 * 2 * 3 * 10 * 2 * 4 and a.capacity == 4
    a.ensure(3, 5)
    a.window(0, 1).write_block(1, torch.ones(1, 1, 5, 2), torch.ones(1, 1, 5, 2))
    a.replicate(0, [3], filled=5)
    assert a.batch == 3 and a.keys[1][:, 0, :5].sum() == 30 and a.keys[1].shape == (3, 1, 5, 2)
    a.write_at(1, torch.full((3, 1, 2), 7.0), torch.zeros(3, 1, 2), a.slots(torch.tensor([5, 6, 9])))
    a.reserve(7)
    assert a.capacity == 7 and a.version == 2 and a._k[0] is storage  # max(7, 1.5 x 5): a new shape, same tensors
    a.reserve(10, rows=1)
    assert a.capacity == 10 and a.allocated_rows == 3 and a.keys[1][2, 0, 9].tolist() == [7, 7]
    assert a._k[0] is storage and a.peak_bytes == bytes_ == a.nbytes()
    with pytest.raises(RuntimeError, match="cannot grow"):
        a.reserve(11)
    with pytest.raises(RuntimeError, match="cannot grow"):
        a.ensure(4, 5)


def test_compaction_moves_only_finished_rows_places_and_filled_positions():
    from nemo_lead.generation.megatron_engine.kv_cache import compaction_order

    assert compaction_order([0, 2, 3, 5]) == [0, 5, 2, 3]  # row 5 fills row 1's place; 0, 2, 3 stay
    assert compaction_order([3, 4]) == [3, 4] and compaction_order([0, 1]) == [0, 1] and compaction_order([]) == []
    a = _cache(6, 4, 0.0)
    before = [t.clone() for t in a._k]
    a.select(compaction_order([0, 2, 3, 5]), filled=3)
    assert a.batch == 4
    for layer in range(2):
        k = a.keys[layer]
        assert torch.equal(k[[0, 2, 3]], before[layer][[0, 2, 3]])  # untouched
        assert torch.equal(k[1, :, :3], before[layer][5, :, :3])  # the filled positions moved
        assert torch.equal(k[1, :, 3:], before[layer][1, :, 3:])  # past them: the old row's (masked) data
        assert torch.equal(a.values[layer][1, :, :3], -before[layer][5, :, :3])


def test_write_at_puts_each_rows_groups_at_its_position():
    cache = KVCache(1, 2, 3, 2, 5, torch.float32, torch.device("cpu"), reserve_rows=4)
    k = torch.arange(12, dtype=torch.float32).reshape(2, 3, 2)
    cache.write_at(0, k, -k, cache.slots(torch.tensor([1, 4])))
    keys, values = cache.view(0, 5)
    want = torch.zeros(2, 3, 5, 2)
    want[0, :, 1], want[1, :, 4] = k[0], k[1]
    assert torch.equal(keys, want) and torch.equal(values, -want)
    assert cache._k[0][2:].abs().sum() == 0  # rows past the live ones untouched


def test_bucket_rows_are_powers_of_two_within_the_allocation():
    from nemo_lead.generation.megatron_engine.cuda_graphs import bucket_rows

    assert [bucket_rows(n, 256) for n in (1, 8, 9, 100, 256)] == [8, 8, 16, 128, 256]
    assert bucket_rows(5, 6) == 6 and bucket_rows(0, 3) == 3
    with pytest.raises(ValueError):
        bucket_rows(7, 6)


def test_where_the_engine_takes_fixed_shape_decode_steps():
    from nemo_lead.generation.megatron_engine.cuda_graphs import graphs_wanted, unsafe_nccl_settings

    def wanted(graphs, tp, pp, switch, cuda=True):
        return graphs_wanted(graphs, tp=tp, pp=pp, cuda_graphs_tp=switch, cuda=cuda)

    # None: on a GPU at TP = PP = 1, and at TP > 1 with one stage only with the switch; never at PP > 1
    assert [wanted(None, 1, 1, False), wanted(None, 1, 1, False, cuda=False), wanted(None, 2, 1, False)] == [True, False, False]
    assert [wanted(None, 2, 1, True), wanted(None, 2, 2, True), wanted(None, 1, 2, True)] == [True, False, False]
    assert wanted(True, 1, 1, False, cuda=False) and wanted(True, 4, 1, True) and not wanted(False, 1, 1, False)
    with pytest.raises(ValueError, match=r"engine TP 2 .*needs engine.cuda_graphs_tp=true"):
        wanted(True, 2, 1, False)
    for tp, switch in ((1, False), (2, True)):
        with pytest.raises(ValueError, match=r"needs one pipeline stage, the engine runs 2 \(engine.pp"):
            wanted(True, tp, 2, switch)
    assert unsafe_nccl_settings({"TORCH_NCCL_BLOCKING_WAIT": "1", "NCCL_GRAPH_MIXING_SUPPORT": "1"}) == [
        "TORCH_NCCL_BLOCKING_WAIT=1"]
    assert unsafe_nccl_settings({"NCCL_GRAPH_MIXING_SUPPORT": "0"}) == ["NCCL_GRAPH_MIXING_SUPPORT=0"]


def test_mismatch_hand_computed_for_lists_and_masked_tensors():
    m = logprob_mismatch([[-1.0, -2.0], [-0.5]], [[-1.5, -2.0], [-0.25]])
    assert m == {"mean": pytest.approx(0.75 / 3), "max": 0.5, "sum": pytest.approx(0.75), "count": 3}
    engine = torch.tensor([[-1.0, -2.0, 9.0], [-0.5, 7.0, 7.0]])
    actor = torch.tensor([[-1.5, -2.0, 0.0], [-0.25, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert logprob_mismatch(engine, actor, mask)["max"] == 0.5  # padding (|9 - 0|) is ignored
    assert logprob_mismatch(engine, actor)["max"] == 9.0
    assert logprob_mismatch([[]], [[]]) == {"mean": 0.0, "max": 0.0, "sum": 0.0, "count": 0}
    assert math.isnan(logprob_mismatch([[math.nan]], [[0.0]])["mean"])  # unknown values are not hidden


def test_mismatch_rejects_inconsistent_inputs():
    with pytest.raises(ValueError, match="lengths differ"):
        logprob_mismatch([[0.0, 1.0]], [[0.0]])
    with pytest.raises(TypeError, match="same form"):
        logprob_mismatch(torch.zeros(2), [[0.0, 0.0]])
    with pytest.raises(ValueError, match="mask has shape"):
        logprob_mismatch(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(3, 2))
