"""Per-image random draws: exact 32-bit arithmetic without overflow, uniform, and a function of the key alone."""

from __future__ import annotations

import torch

from mpp.images import KeyedDraws, keys_of, mix32, multiply32


def test_multiplication_modulo_2_to_the_32_is_exact_for_python_ints_and_int64_tensors():
    values = torch.randint(0, 2**32, (10_000,), generator=torch.Generator().manual_seed(0))
    for constant in (0x7FEB352D, 0x846CA68B, 2**32 - 1):
        expected = [(value * constant) % 2**32 for value in values.tolist()]
        assert multiply32(values, constant).tolist() == expected
        assert [multiply32(value, constant) for value in values[:100].tolist()] == expected[:100]
    # the same hash on ints and tensors, so a key computed in Python and one computed on a device agree
    assert mix32(values[:100]).tolist() == [mix32(value) for value in values[:100].tolist()]


def test_draws_are_uniform_and_independent_across_images_calls_and_columns():
    draws = KeyedDraws(keys_of(1, 2, torch.arange(50_000)))
    first, second = draws.uniform(8), draws.uniform()
    assert first.shape == (50_000, 8) and second.shape == (50_000,)
    assert first.min() >= 0 and first.max() < 1
    assert torch.allclose(torch.histc(first, 10, 0, 1) / first.numel(), torch.full((10,), 0.1), atol=0.003)
    pairs = torch.stack([first[:-1, 0], first[:-1, 1], second[:-1], first[1:, 0]])  # the last: the next image's
    assert (torch.corrcoef(pairs) - torch.eye(4)).abs().max() < 0.02  # columns, calls, neighbouring keys


def test_an_images_draws_depend_on_its_key_only_not_on_its_batch():
    keys = keys_of(7, 3, torch.tensor([10, 11, 12, 13]))
    whole = KeyedDraws(keys)
    alone = KeyedDraws(keys[2:3])
    assert torch.equal(whole.uniform(5)[2:3], alone.uniform(5)) and torch.equal(whole.uniform()[2:3], alone.uniform())
    assert not torch.equal(KeyedDraws(keys_of(7, 4, torch.tensor([12]))).uniform(5), KeyedDraws(keys[2:3]).uniform(5))
    # 64-bit parts: places beyond 2**32 (a long run's) keep distinct keys
    assert keys_of(0, torch.tensor([5])) != keys_of(0, torch.tensor([5 + 2**32]))
