"""Cache files (decoded clip art, frozen features) that cannot be read are made again, never a reason to stop."""

from __future__ import annotations

import logging

import torch
from safetensors.torch import load_file, save_file

from mpp.run import read_cache, write_whole


def test_a_whole_cache_is_read_and_a_missing_one_is_none(tmp_path):
    path = tmp_path / "features.safetensors"
    assert read_cache(path, load_file) is None
    write_whole(path, lambda partial: save_file({"features": torch.ones(2, 3)}, partial))
    assert torch.equal(read_cache(path, load_file)["features"], torch.ones(2, 3))


def test_a_truncated_or_foreign_cache_is_none_after_one_warning_naming_it(tmp_path, caplog):
    path = tmp_path / "features.safetensors"
    save_file({"features": torch.ones(64, 64)}, path)
    path.write_bytes(path.read_bytes()[:100])
    with caplog.at_level(logging.WARNING):
        assert read_cache(path, load_file) is None
        path.write_bytes(b"written by something else")
        assert read_cache(path, lambda cached: load_file(cached)["features"]) is None
    assert [record.getMessage().split(" (")[0] for record in caplog.records] == [f"the cache {path} cannot be read"] * 2
