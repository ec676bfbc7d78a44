"""The suite's own scheduling: CI runs it over the cores with ``--dist loadgroup``, and tests marked ``xdist_group``
share a set-up that only one worker should pay for (a whole multi-process run, the step trail's traced run)."""

from __future__ import annotations

import json
import subprocess
import sys


def test_tests_of_one_xdist_group_run_on_one_worker(tmp_path):
    tests = tmp_path / "test_grouped.py"
    tests.write_text(
        "import json, os\n"
        "import pytest\n\n"
        "@pytest.mark.xdist_group('together')\n"
        "@pytest.mark.parametrize('index', range(6))\n"
        "def test_grouped(index, request):\n"
        f"    with open({str(tmp_path / 'workers.jsonl')!r}, 'a') as log:\n"
        "        log.write(json.dumps([os.environ['PYTEST_XDIST_WORKER'], request.node.nodeid]) + '\\n')\n\n"
        "@pytest.mark.parametrize('index', range(6))\n"
        "def test_alone(index):\n"
        "    pass\n")
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist",
                          "loadgroup", "--rootdir", str(tmp_path), str(tests)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    logged = [json.loads(line) for line in (tmp_path / "workers.jsonl").read_text().splitlines()]
    assert len(logged) == 6
    assert len({worker for worker, _ in logged}) == 1, f"the group ran on several workers: {logged}"
    assert all(nodeid.endswith("@together") for _, nodeid in logged)
