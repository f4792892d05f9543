"""Faults lose nothing (docs/faults.md): damaged checkpoints are found and a resume falls back to the newest
intact one; one process per run folder; saves that fail leave the folder as it was; signals reach the ranks.

One tiny SFT run (4 steps, checkpoints at 2 and 4) is shared: each part of its newest checkpoint is damaged
in a copy (bytes flipped, file cut short) and the resume's choice checked in process; one rerun shows a
fallback resume ending equal to the undamaged run.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import cli_process
import pytest
from torch.distributed.checkpoint.api import CheckpointException

from nemo_lead.checkpoint.manifest import MANIFEST_FILE, check_files, read_manifest
from nemo_lead.checkpoint.meta import recover_checkpoints
from nemo_lead.cli import main
from nemo_lead.models import write_tiny_model
from nemo_lead.runtime.files import write_atomic
from nemo_lead.training.run.lifecycle import save_error_reason, save_failure_message
from nemo_lead.training.run.resume import ResumeChoice, choose_resume_checkpoint

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-m", "nemo_lead.cli"]
ONE_PROCESS = SimpleNamespace(rank=0, world_size=1)


def _env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def _sft_args(root: Path, out: Path) -> list[str]:
    return ["sft", "--model", str(root / "model"), "--data", str(root / "traces.jsonl"), "--out", str(out),
            "--steps", "4", "--save-every", "2", "global_batch=8", "data.max_seq_len=64", "progress=lines",
            "prompt.suffix=''", "tensorboard=false"]


def _run(args) -> subprocess.CompletedProcess:
    return cli_process.run(list(args), env=_env(), timeout=240)


def _metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if not k.startswith("time/") and k != "tokens_per_s"}
            for line in (run / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    write_tiny_model(root / "model", family="qwen2", seed=0)
    rng = random.Random(0)
    rows = []
    for i in range(64):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append({"id": f"p{i}", "problem": f"{a}+{b}", "answer": str(a + b),
                     "response": f"{a}+{b}={a + b}\n</think>\n\n\\boxed{{{a + b}}}"})
    (root / "traces.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = _run(_sft_args(root, root / "run"))
    assert res.returncode == 0, res.stderr
    return root, root / "run"


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    at = len(data) // 2
    for i in range(at, min(at + 64, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def _shard(folder: Path) -> Path:
    """The largest shard file of a dist_checkpointing folder (their names depend on the megatron release)."""
    return sorted(folder.glob("*.distcp"), key=lambda p: p.stat().st_size)[-1]


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


DAMAGE = [  # (file of the newest checkpoint, how, what the check says)
    ("model/__0_0.distcp", _flip, "CRC-32 differs"),
    ("model/__0_0.distcp", _truncate, "bytes, the manifest"),
    ("model/metadata.json", _truncate, "bytes, the manifest"),
    ("optim/*.distcp", _flip, "CRC-32 differs"),  # the optimizer's shard files: named by the megatron release
    ("optim/*.distcp", _truncate, "bytes, the manifest"),
    ("rng/rank_00000.pt", _flip, "CRC-32 differs"),
    ("rng/rank_00000.pt", _truncate, "bytes, the manifest"),
    ("meta.json", _flip, "CRC-32 differs"),
    ("meta.json", _truncate, "bytes, the manifest"),
    ("tokenizer/tokenizer.json", Path.unlink, "is missing"),
    (MANIFEST_FILE, _truncate, "manifest.json is unreadable"),
]


def test_each_damaged_part_is_found_and_the_resume_takes_the_newest_intact_checkpoint(sft_run, tmp_path, capsys):
    _, run = sft_run
    newest = run / "checkpoints" / "step_000004"
    manifest = read_manifest(newest)
    parts = {rel.split("/")[0] for rel in manifest}
    assert {"meta.json", "model", "optim", "rng", "tokenizer"} <= parts
    assert all(manifest[rel]["size"] == (newest / rel).stat().st_size for rel in manifest)
    assert check_files(newest) == [] and check_files(newest, 1, 2) == []
    for i, (rel, damage, said) in enumerate(DAMAGE):
        case = tmp_path / f"case{i}"
        shutil.copytree(run, case)
        ckpt = case / "checkpoints" / "step_000004"
        target = sorted(ckpt.glob(rel), key=lambda p: p.stat().st_size)[-1] if "*" in rel else ckpt / rel
        rel = str(target.relative_to(ckpt))
        damage(target)
        choice = choose_resume_checkpoint(ONE_PROCESS, str(case), 4)
        assert choice.path == case / "checkpoints" / "step_000002" and not choice.weights_only, (rel, damage)
        assert choice.step == 2
        [(path, aside, problems)] = choice.damaged
        assert path == case / "checkpoints" / "step_000004" and not path.exists()
        assert aside.name == ".damaged-step_000004" and aside.is_dir()
        assert any(said in p for p in problems) and any(rel in p for p in problems), problems
        assert said in (aside / "DAMAGED.txt").read_text()
    # no manifest (a checkpoint from before manifests): not loaded, not moved; --seal makes it loadable
    case = tmp_path / "unsealed"
    shutil.copytree(run, case)
    (case / "checkpoints" / "step_000004" / MANIFEST_FILE).unlink()
    with pytest.raises(ValueError, match="step_000004: no manifest.json .* --seal"):
        choose_resume_checkpoint(ONE_PROCESS, str(case), 4)
    assert main(["check", str(case)]) == 1 and "step_000004: DAMAGED: no manifest.json" in capsys.readouterr().out
    assert main(["check", str(case), "--seal"]) == 0 and "step_000004: sealed" in capsys.readouterr().out
    assert read_manifest(case / "checkpoints" / "step_000004") == manifest
    assert choose_resume_checkpoint(ONE_PROCESS, str(case), 4).path == case / "checkpoints" / "step_000004"
    # `nemo-lead check` reads the same: damaged before a resume, intact (and the one set aside) after
    case = tmp_path / "checked"
    shutil.copytree(run, case)
    shard = _shard(case / "checkpoints" / "step_000004" / "optim")
    _flip(shard)
    assert main(["check", str(case)]) == 1
    out = capsys.readouterr().out
    assert "step_000002: intact" in out and f"step_000004: DAMAGED: optim/{shard.name}" in out
    choose_resume_checkpoint(ONE_PROCESS, str(case), 4)
    assert main(["check", str(case)]) == 0 and ".damaged-step_000004: set aside" in capsys.readouterr().out
    # none intact: refused, and again on the next start (the damaged ones stay aside, nothing starts afresh)
    _truncate(_shard(case / "checkpoints" / "step_000002" / "model"))
    for _ in range(2):
        with pytest.raises(ValueError, match="has no intact checkpoint to resume from"):
            choose_resume_checkpoint(ONE_PROCESS, str(case), 4)
    assert sorted(p.name for p in (case / "checkpoints").iterdir()) == [".damaged-step_000002", ".damaged-step_000004"]
    assert main(["check", str(tmp_path / "nothing-here")]) == 2


def test_a_resume_past_a_damaged_checkpoint_ends_as_the_undamaged_run(sft_run, tmp_path):
    root, run = sft_run
    case = tmp_path / "run"
    shutil.copytree(run, case)
    shard = _shard(case / "checkpoints" / "step_000004" / "model")
    _flip(shard)
    res = _run(_sft_args(root, case))
    assert res.returncode == 0, res.stderr
    assert f"{case}/checkpoints/step_000004 is damaged (model/{shard.name}" in res.stderr
    assert f"resuming from {case}/checkpoints/step_000002 (step 2 of 4)" in res.stderr
    assert _metrics(case) == _metrics(run)
    model = {k: v for k, v in read_manifest(run / "checkpoints" / "step_000004").items() if k.startswith("model/__")}
    assert {k: read_manifest(case / "checkpoints" / "step_000004")[k] for k in model} == model  # the same weights
    assert (case / "checkpoints" / ".damaged-step_000004" / "DAMAGED.txt").is_file()


def test_killed_saves_are_undone_at_the_next_start(tmp_path):
    root = tmp_path / "checkpoints"
    for name in ("step_000002", ".old-step_000004", ".tmp-step_000004", ".tmp-step_000006", ".old-step_000002"):
        (root / name).mkdir(parents=True)
        (root / name / "meta.json").write_text(name)
    notes = recover_checkpoints(tmp_path)
    # killed between the two renames of a re-save: the old step_000004 is back; the rest is debris
    assert sorted(p.name for p in root.iterdir()) == ["step_000002", "step_000004"]
    assert (root / "step_000004" / "meta.json").read_text() == ".old-step_000004"
    assert len(notes) == 4 and "restored from .old-step_000004" in notes[0]
    # a finished run is not saved again (the re-save would replace its only checkpoint), unless it changes kind
    resumed = ResumeChoice(path=root / "step_000004", weights_only=False, step=4)
    assert resumed.saved_step("full", total_steps=4) == 4
    assert ResumeChoice(path=None, weights_only=False, step=0).saved_step("full", total_steps=4) == -1
    assert resumed.saved_step("weights", total_steps=4) == -1
    assert resumed.saved_step("weights", total_steps=6) == 4  # extended: it saves again at its end anyway


def _holder(folder: Path) -> subprocess.Popen:
    code = ("import sys, time; from nemo_lead.training.run.lock import lock_folder; lock_folder(sys.argv[1]); "
            "print('locked', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True, env=_env())
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_start_on_a_folder_in_use_is_refused_naming_the_holder(sft_run, tmp_path, capsys):
    """One process and the local launcher of a `--tp 2` run alike: one line naming the holder, exit 2, nothing
    read or written; the launcher refuses before it starts any rank (no rank's traceback)."""
    import multiprocessing

    root, run = sft_run
    case = tmp_path / "run"
    shutil.copytree(run, case)
    before = (case / "metrics.jsonl").read_text()
    holder = _holder(case)
    try:
        for layout in ([], ["--tp", "2"]):
            started = time.monotonic()
            assert main(_sft_args(root, case) + layout) == 2
            err = capsys.readouterr().err
            assert f"is in use by pid {holder.pid} on {socket.gethostname()}" in err and "use another --out" in err
            assert err.strip().splitlines()[-1].startswith(f"nemo-lead sft: {case} is in use by pid"), err
            assert "Traceback" not in err and "local ranks" not in err and not multiprocessing.active_children()
            assert time.monotonic() - started < 30 and (case / "metrics.jsonl").read_text() == before
    finally:
        holder.kill()  # kill -9: the kernel drops the lock with the process
        holder.wait()
    _holder(case).kill()  # free again


def test_a_failed_save_names_the_path_the_space_and_leaves_the_folder_as_it_was(sft_run, tmp_path):
    previous = sft_run[1] / "checkpoints" / "step_000004"
    path = tmp_path / "checkpoints" / "step_000006"
    nospace = OSError(errno.ENOSPC, "No space left on device")
    wrapped = CheckpointException("write", {0: (RuntimeError("Worker failure: [enforce fail at inline_container.cc:672] "
                                                             ". unexpected pos 704 vs 598"), None)})
    assert save_error_reason(nospace) == "[Errno 28] No space left on device"
    assert save_error_reason(wrapped).startswith("Worker failure: [enforce fail at inline_container.cc:672]")
    assert save_error_reason(RuntimeError("shape mismatch in the optimizer state")) is None  # a bug: re-raised
    message = save_failure_message(path, save_error_reason(nospace), previous)
    assert message.startswith(f"saving {path} failed: [Errno 28] No space left on device")
    assert "needs about 1.3 MB (the size of step_000004)" in message and "are free on that file system" in message
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("a full disk needs a small tmpfs (root); the message is checked above")
    _full_disk(sft_run[0], tmp_path / "tmpfs")


def _full_disk(root: Path, mnt: Path) -> None:
    """A save on a full file system (a 2 MB tmpfs: the step-2 checkpoint fits, the step-4 one does not)."""
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        out = mnt / "run"
        res = _run(_sft_args(root, out))
        assert res.returncode == 1, res.stderr
        last = res.stderr.strip().splitlines()[-1]
        assert last.startswith(f"nemo-lead sft: saving {out}/checkpoints/step_000004 failed: "), res.stderr
        assert "(not enough free space)" in last and "MB are free" in last and "Traceback" not in res.stderr
        assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000002"]
        assert check_files(out / "checkpoints" / "step_000002") == []
        assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]
        (mnt / "fill").write_bytes(b"\0" * shutil.disk_usage(mnt).free)  # quite full: a small write fails too
        with pytest.raises(OSError, match=f"writing {out}/config.yaml failed"):
            write_atomic(out / "config.yaml", "x" * 100_000)
        assert not [p for p in out.iterdir() if p.name.endswith(".tmp")] and (out / "config.yaml").stat().st_size
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def _wait_for_stop(ready_dir: str) -> str:
    from nemo_lead.runtime.signals import install_stop_handlers

    stop = install_stop_handlers()
    Path(ready_dir, os.environ["RANK"]).touch()
    deadline = time.monotonic() + 60
    while not stop.requested and time.monotonic() < deadline:
        time.sleep(0.02)
    stop.uninstall()
    return stop.signal_name


def test_the_local_launcher_forwards_hup_to_every_rank(tmp_path):
    from distributed import run_distributed

    def hang_up() -> None:
        while len(list(tmp_path.iterdir())) < 2:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGHUP)

    threading.Thread(target=hang_up, daemon=True).start()
    assert run_distributed(_wait_for_stop, 2, str(tmp_path), timeout=120) == ["SIGHUP", "SIGHUP"]


def test_a_signal_before_the_handlers_is_held_until_they_exist(capsys):
    from nemo_lead.runtime import signals

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)}
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # as the submit scripts start a rank: stays ignored
    # as Python starts a foreground process (a shell's background job, `cmd &`, inherits SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        held = signals.hold_stop_signals()
        assert signal.SIGUSR1 not in held and held[signal.SIGTERM] is before[signal.SIGTERM]
        assert signal.getsignal(signal.SIGUSR1) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)  # during the imports: held, no KeyboardInterrupt
        os.kill(os.getpid(), signal.SIGTERM)  # a second, other signal changes nothing
        assert signals.held_stop_signal() == "SIGINT" and "SIGINT received while starting" in capsys.readouterr().err
        with pytest.raises(SystemExit) as stopped:  # a second Ctrl-C: the start ends now, status 130
            os.kill(os.getpid(), signal.SIGINT)
        assert stopped.value.code == 130
        stop = signals.install_stop_handlers()
        assert stop.signal_name == "SIGINT" and signals.held_stop_signal() is None  # the loop stops after a step
        stop.uninstall()
    finally:
        signals._held.clear()
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_without_file_locks_a_claim_names_the_holder_and_a_stale_one_is_taken_over(tmp_path, monkeypatch):
    from nemo_lead.training.run import lock as run_lock

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")  # a Lustre mount without -o flock

    monkeypatch.setattr(run_lock.fcntl, "lockf", no_locks)
    held, stale = tmp_path / "held", tmp_path / "stale"
    for folder in (held, stale):
        folder.mkdir()
        (folder / run_lock.LOCK_FILE).write_text(json.dumps({"host": "node7", "pid": 4242, "since": "then",
                                                             "command": "nemo-lead rl"}))
    for check in (run_lock.refuse_if_in_use, run_lock.lock_folder):  # the launcher's check, the writer's lock
        with pytest.raises(run_lock.FolderInUse, match="in use by pid 4242 on node7 .*a heartbeat claim"):
            check(held)
    old = time.time() - run_lock.CLAIM_S - 5
    os.utime(stale / run_lock.LOCK_FILE, (old, old))  # its holder stopped renewing it: taken over
    run_lock.refuse_if_in_use(stale)
    run_lock.refuse_if_in_use(tmp_path / "new")  # no lock file: free, and nothing is created
    assert not (tmp_path / "new").exists()
    run_lock.lock_folder(stale)
    assert json.loads((stale / run_lock.LOCK_FILE).read_text())["pid"] == os.getpid()
