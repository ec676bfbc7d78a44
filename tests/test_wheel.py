"""The package as a wheel installs it, outside any checkout, run from a directory of its own: the Python API
pre-trains, fine-tunes and evaluates with its default presets and finds a named one, all installed with the package;
``python -m mpp`` fine-tunes by a preset's name and runs the comparison, whose runs launch the installed package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

import mpp

from tests.launching import ROOT
from tests.recipes.test_own_images import write_images


@pytest.mark.slow
def test_the_python_api_pretrains_finetunes_and_evaluates_from_an_installed_wheel_with_its_presets(tmp_path):
    source = tmp_path / "source"  # what the wheel is built from, copied: a build leaves build/ where it runs
    shutil.copytree(ROOT / "mpp", source / "mpp", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copyfile(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "dist"), str(source)], check=True, capture_output=True, timeout=600)
    wheel, = (tmp_path / "dist").glob("mpp-*.whl")
    installed = tmp_path / "installed"
    zipfile.ZipFile(wheel).extractall(installed)  # what pip puts in site-packages: a pure-Python wheel's files
    assert (installed / "mpp" / "presets" / "mpp_tiny_cpu.yaml").is_file()
    # The interpreter without this environment's site directory, whose editable install points at the checkout: the
    # wheel's files, then the dependencies' folder as a plain path (its .pth files, the editable one among them,
    # unread).
    work = tmp_path / "work"  # any directory: no checkout, no package folder in it
    work.mkdir()
    script = ("import mpp, pathlib\n"
              f"assert pathlib.Path(mpp.__file__).is_relative_to({str(installed)!r}), mpp.__file__\n"
              "from mpp.config.building import preset_path\n"
              "assert preset_path('finetune_own_images_cpu').is_file()\n"
              "result = mpp.pretrain(data='shapes', output_dir='run', train={'steps': 20})\n"
              "tuned = mpp.finetune(init='run', output_dir='tuned', train={'steps': 10, 'warmup_steps': 2})\n"
              "knn = mpp.evaluate(init='run', data={'source': 'shapes', 'shots_per_class': 10}, output_dir='knn',\n"
              "                   protocol='knn', knn={'k': 3})\n"
              "print(result.metrics['step'], result.export_dir.is_dir(), tuned.metrics['step'],\n"
              "      0 <= knn.metrics['knn']['test_accuracy'] <= 1)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), sysconfig.get_paths()["purelib"]])}
    python = [os.path.realpath(sys.executable), "-s"]
    ended = subprocess.run([*python, "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert ended.returncode == 0, ended.stderr[-3000:]
    assert ended.stdout.split("\n")[-2] == "20 True 10 True"
    # The command line, a preset by its name
    ended = subprocess.run([*python, "-m", "mpp", "finetune", "--config", "finetune_tiny_cpu", "init=run",
                            "output_dir=tuned-again", "train.steps=4", "train.warmup_steps=1"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=900)
    assert ended.returncode == 0, ended.stderr[-3000:]
    assert json.loads((work / "tuned-again" / "metrics.json").read_text())["step"] == 4
    # The comparison, each of its runs python -m mpp of the wheel (-s: this environment's editable install unread)
    write_images(work / "images", 8, {"all": (200, 60, 40)})
    for split, count in (("train", 6), ("val", 4)):
        write_images(work / split, count, {"circles": (30, 90, 200), "leaves": (40, 160, 60)})
    schedule = ("train.steps=2,train.epochs=null,train.warmup_steps=1,train.warmup_epochs=null,"
                "train.global_batch_size=4,train.log_every=1")
    ended = subprocess.run([*python, "-m", "mpp", "compare", "unlabelled=folder:images", "labelled=folder:train",
                            "data=[data.eval_folder=val]", "output_dir=comparison", "seeds=[0]", f"launcher={python}",
                            "encoder=[model.img_size=16,model.patch_size=4,model.embed_dim=16,model.depth=1]",
                            f"mpp=[{schedule},train.checkpoint_every=2,monitor.mosaic_every=0]",
                            f"finetune=[{schedule}]", f"scratch=[{schedule}]", "labelled_per_class=0",
                            "tune_once=false", "knn=[knn.k=3]"], cwd=work, env=env, capture_output=True, text=True,
                           timeout=900)
    assert ended.returncode == 0, ended.stderr[-3000:]
    results = json.loads((work / "comparison" / "results.json").read_text())
    assert results["runs"] == 10 and results["version"] == {"package": mpp.__version__, "commit": None}
    assert results["finetuning_steps"] == {"mpp": 2, "scratch": 2, "random": 2}  # the checkout's mpp is not on the path
