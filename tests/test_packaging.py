"""A wheel install works: the wheel holds the recipes and the model presets (package data), and the code finds
them through importlib.resources from inside the installed package, not from a checkout."""

import shutil
import subprocess
import sys
import zipfile

import pytest

from nemo_lead.config.loading import conf_dir, package_data, repo_root
from nemo_lead.pipeline.recipe import find_recipe, recipes_dir

ROOT = repo_root()


def test_checkout_links_point_into_the_package():
    # the checkout keeps top-level recipes/ and conf/ for the repository layout; both are links to package data
    assert (ROOT / "recipes").resolve() == recipes_dir().resolve() == (ROOT / "nemo_lead" / "recipes").resolve()
    assert (ROOT / "conf").resolve() == package_data("conf").resolve()
    assert find_recipe("lead-14b").parent == recipes_dir().resolve()


def test_conf_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("NEMO_LEAD_CONF", str(tmp_path))
    assert conf_dir() == tmp_path
    monkeypatch.delenv("NEMO_LEAD_CONF")
    assert (conf_dir() / "model" / "r1-distill-qwen-14b.yaml").is_file()


@pytest.mark.slow
def test_wheel_holds_recipes_and_presets(tmp_path):
    # build from a copy: an in-tree build would leave build/ and *.egg-info in the checkout
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "nemo_lead", src / "nemo_lead", ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(src)], check=True, capture_output=True, timeout=120)
    wheel, = out.glob("nemo_lead-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    recipes = {f"nemo_lead/recipes/{p.name}" for p in recipes_dir().glob("*.yaml")}
    presets = {f"nemo_lead/conf/model/{p.name}" for p in (package_data("conf") / "model").glob("*.yaml")}
    assert "nemo_lead/recipes/lead-14b.yaml" in recipes and "nemo_lead/conf/model/r1-distill-qwen-14b.yaml" in presets
    assert recipes <= names and presets <= names, sorted((recipes | presets) - names)
    # installed by pip without a checkout around it (the dependencies are this environment's), then used from
    # another folder: the recipe and the preset come from the installed package
    site, elsewhere = tmp_path / "site", tmp_path / "elsewhere"
    elsewhere.mkdir()
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(site),
                    str(wheel)], check=True, capture_output=True, timeout=120)
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    where = subprocess.run([sys.executable, "-c", "import nemo_lead; print(nemo_lead.__file__)"], cwd=elsewhere,
                           env=env, check=True, capture_output=True, text=True, timeout=60).stdout
    assert where.startswith(str(site / "nemo_lead")), where
    dry = subprocess.run([str(site / "bin" / "nemo-lead"), "run", "lead-14b", "--dry-run"], cwd=elsewhere, env=env,
                         capture_output=True, text=True, timeout=120)  # pip's console script
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert f"recipe {site / 'nemo_lead' / 'recipes' / 'lead-14b.yaml'} -> runs/lead-14b" in dry.stdout, dry.stdout
    assert "stage2b" in dry.stdout and "to do" in dry.stdout and not (elsewhere / "runs").exists()
    plan = subprocess.run([sys.executable, "-m", "nemo_lead.cli", "plan", "lead-14b", "--gpus", "8", "--gpu", "h100",
                           "paths.base_model=r1-distill-qwen-14b"], cwd=elsewhere, env=env, capture_output=True,
                          text=True, timeout=120)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "stage2b (rl): qwen2 48 layers" in plan.stdout and "fits: yes" in plan.stdout
