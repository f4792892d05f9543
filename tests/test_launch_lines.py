"""Every documented launch line parses as written: torchrun's own parser first (it reads the whole line, so
an abbreviation of one of its options after `-m nemo_lead.cli` fails there), then nemo-lead's. srun stops
reading its options at the program, so only nemo-lead's parser sees what follows it."""

import re
import shlex
from pathlib import Path

import pytest

from nemo_lead.cli import COMMANDS, _build_parser, main

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
LAUNCH = re.compile(r"^\s*(torchrun|srun|python -m torch\.distributed\.run)\s.*\bnemo[-_]lead(\.cli)?\s")


def _torchrun_parser():
    return pytest.importorskip("torch.distributed.run").get_args_parser()


def launch_lines() -> list[tuple[str, str]]:
    """(file:line, the command) for every line of the docs that starts a nemo-lead command under a launcher
    (continuation lines joined)."""
    out = []
    for path in DOCS:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if not LAUNCH.match(line):
                continue
            text, j = line, i
            while text.rstrip().endswith("\\") and j + 1 < len(lines):
                j += 1
                text = text.rstrip()[:-1] + " " + lines[j]
            out.append((f"{path.relative_to(ROOT)}:{i + 1}", text.split(" #", 1)[0].strip()))
    return out


def nemo_lead_args(words: list[str]) -> list[str]:
    """The arguments the nemo-lead parser sees: torchrun's are parsed by torchrun's parser (an error there is
    the failure this test exists for), srun's end at the program."""
    if words[0] in ("torchrun", "python"):
        if words[0] == "python":
            words = words[2:]  # python -m torch.distributed.run ...
        args = _torchrun_parser().parse_args(words[1:])  # SystemExit on an ambiguous or unknown option
        assert args.module and args.training_script == "nemo_lead.cli", words
        return list(args.training_script_args)
    k = next(i for i, w in enumerate(words) if w in ("nemo-lead", "python"))
    return words[k + 1:] if words[k] == "nemo-lead" else words[k + 3:]  # python -m nemo_lead.cli ...


def test_the_docs_have_launch_lines():
    assert any(cmd.startswith("torchrun") for _, cmd in launch_lines())  # the README and docs/ hold some


@pytest.mark.parametrize("where,command", launch_lines())
def test_launch_line_parses(where, command, capsys):
    args = nemo_lead_args(shlex.split(command))
    assert main([*args, "--print-config"]) == 0, f"{where}: {command}\n{capsys.readouterr().err}"


def test_no_flag_abbreviates_a_torchrun_option():
    """argparse takes any prefix of an option as that option: a nemo-lead flag that is one (`--n`) is taken
    by torchrun (or refused as ambiguous) before nemo-lead sees it. The aliases for a bare `nemo-lead` are
    the exception, and the long names they stand for must pass."""
    torchrun = [s for a in _torchrun_parser()._actions for s in a.option_strings if s.startswith("--")]
    aliases = {a for cmd in COMMANDS.values() for names in cmd.aliases.values() for a in names}
    flags = {f for cmd in COMMANDS.values() for f in [*cmd.flags, *cmd.switches]} | {"--config", "--print-config"}
    clashes = sorted(f for f in flags if any(t.startswith(f) for t in torchrun))
    assert clashes == [], clashes
    assert aliases == {"--n"} and any(t.startswith("--n") for t in torchrun)
    for flag in (f for cmd in COMMANDS.values() for f in cmd.aliases):
        assert flag in flags and not any(t.startswith(flag) for t in torchrun)


def test_torchrun_refuses_the_short_alias_and_takes_the_long_flag():
    parser = _torchrun_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["--nproc-per-node", "2", "-m", "nemo_lead.cli", "eval", "--n", "4"])
    args = parser.parse_args(["--nproc-per-node", "2", "-m", "nemo_lead.cli", "eval", "--samples", "4"])
    assert args.training_script_args == ["eval", "--samples", "4"]


@pytest.mark.parametrize("command", ["eval", "generate", "rl"])
def test_samples_and_n_set_the_same_key(command):
    parser = _build_parser()
    key = COMMANDS[command].flags["--samples"]
    long_form, short_form = (vars(parser.parse_known_args([command, flag, "6"])[0]) for flag in ("--samples", "--n"))
    assert long_form["flag:" + key] == short_form["flag:" + key] == "6"
