"""txl_minimal.batching: LMOrderedIterator serves every token once, in order, row after row."""

import numpy as np
import pytest
import torch

from txl_minimal.batching import LMOrderedIterator


@pytest.mark.parametrize("n, bsz, tgt_len", [(1000, 4, 32), (1003, 3, 50), (64, 2, 31)])
def test_eval_iterator_covers_every_token_once_in_order(n, bsz, tgt_len):
    data = np.random.default_rng(0).integers(0, 27, n).astype(np.uint8)
    it = LMOrderedIterator(data, bsz, tgt_len, evaluation=True)
    batches = list(it)
    assert len(batches) == len(it)
    cols = data[: n // bsz * bsz].reshape(bsz, -1)  # column b = contiguous piece b of the stream
    xs = torch.cat([x for x, _ in batches], dim=1)
    ys = torch.cat([y for _, y in batches], dim=1)
    assert np.array_equal(xs.numpy(), cols[:, :-1]) and np.array_equal(ys.numpy(), cols[:, 1:])
    for x, y in batches:
        assert x.dtype == y.dtype == torch.long and x.shape == y.shape and x.shape[0] == bsz
        assert x.shape[1] <= tgt_len and x.is_contiguous() and y.is_contiguous()
        assert torch.equal(x[:, 1:], y[:, :-1])  # targets are inputs shifted by one


def test_train_iterator_has_fixed_shapes_and_var_len_still_covers():
    data = np.arange(1003) % 27
    train = list(LMOrderedIterator(data, 3, 50))
    assert len(train) == len(LMOrderedIterator(data, 3, 50)) == 333 // 50
    assert all(x.shape == (3, 50) for x, _ in train)
    var = list(LMOrderedIterator(data, 3, 50, var_len=True, seed=1))
    ys = torch.cat([y for _, y in var], dim=1)
    assert torch.equal(ys, torch.as_tensor(data[:1002].reshape(3, -1)[:, 1:]))
    assert len({x.shape[1] for x, _ in var[:-1]}) > 1  # lengths really vary
