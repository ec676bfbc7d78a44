"""The package as a wheel installs it, outside any checkout: the Python API pre-trains, fine-tunes and evaluates with
its default presets and finds a named one, all installed with the package."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from tests.launching import ROOT


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
    script = ("import mpp, pathlib\n"
              "assert pathlib.Path(mpp.__file__).is_relative_to(pathlib.Path.cwd()), mpp.__file__\n"
              "from mpp.presets import default_preset\n"
              "from mpp.recipes.python_api import preset_path\n"
              "assert preset_path('finetune_own_images_cpu', default_preset('mpp')).is_file()\n"
              "result = mpp.pretrain(data='shapes', output_dir='run', train={'steps': 20})\n"
              "tuned = mpp.finetune(init='run', output_dir='tuned', train={'steps': 10, 'warmup_steps': 2})\n"
              "knn = mpp.evaluate(init='run', data={'source': 'shapes', 'shots_per_class': 10}, output_dir='knn',\n"
              "                   protocol='knn', knn={'k': 3})\n"
              "print(result.metrics['step'], result.export_dir.is_dir(), tuned.metrics['step'],\n"
              "      0 <= knn.metrics['knn']['test_accuracy'] <= 1)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), sysconfig.get_paths()["purelib"]])}
    ended = subprocess.run([os.path.realpath(sys.executable), "-s", "-c", script], cwd=installed, env=env,
                           capture_output=True, text=True, timeout=900)
    assert ended.returncode == 0, ended.stderr[-3000:]
    assert ended.stdout.split("\n")[-2] == "20 True 10 True"
