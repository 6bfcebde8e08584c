"""The long-range recall stream (every answer has exactly one source, gap positions back)
and the readers that score models on it."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from tiny import TINY
from txl_minimal.evaluate import read_segments
from txl_minimal.safetensors_io import load_file
from txl_minimal.tasks import (LSTMLM, RecallTask, bucket_labels, load_recall_model, recall_accuracy,
                               recall_correct, recall_stream, round_to_float16, save_recall_model,
                               stream_predictions, train_stream, window_predictions)

TASK = RecallTask()


def decode_set(token: int) -> tuple[int, int]:
    code = token - TASK.n_filler
    return code // TASK.n_values, code % TASK.n_values


def test_every_answer_repeats_the_value_set_gap_positions_back():
    s = recall_stream(50_000, TASK, seed=3)
    assert len(s.answer_pos) > 1000 and s.gap.min() >= TASK.min_gap
    assert s.gap.max() <= TASK.max_gap + 2 * TASK.n_keys  # a due query may wait for the others
    for pos, gap in zip(s.answer_pos, s.gap):
        key, value = decode_set(int(s.tokens[pos - gap]))
        assert s.tokens[pos - 1] == TASK.query_token(key)
        assert s.tokens[pos] == TASK.value_token(value)


def test_the_answer_has_one_source():
    """Between a set and its query no other set or query of that key occurs."""
    s = recall_stream(50_000, TASK, seed=4)
    is_set = (s.tokens >= TASK.n_filler) & (s.tokens < TASK.query_token(0))
    for pos, gap in zip(s.answer_pos[:500], s.gap[:500]):
        key, _ = decode_set(int(s.tokens[pos - gap]))
        between = s.tokens[pos - gap + 1:pos - 1]
        keys_set = [(int(t) - TASK.n_filler) // TASK.n_values for t in between[is_set[pos - gap + 1:pos - 1]]]
        assert key not in keys_set and TASK.query_token(key) not in between


def test_stream_is_deterministic_and_seed_dependent():
    a, b, c = recall_stream(5_000, TASK, 0), recall_stream(5_000, TASK, 0), recall_stream(5_000, TASK, 1)
    assert np.array_equal(a.tokens, b.tokens) and np.array_equal(a.gap, b.gap)
    assert not np.array_equal(a.tokens, c.tokens)
    assert a.tokens.max() < TASK.vocab_size


def test_gaps_cover_every_bucket():
    s = recall_stream(200_000, TASK, seed=1)
    counts = np.histogram(s.gap, bins=[0, 32, 64, 96, 128, 192, 256])[0]
    assert (counts > 300).all()


def test_recall_accuracy_by_bucket():
    gap = np.array([1, 5, 32, 33, 64, 100])
    correct = np.array([True, False, True, True, True, False])
    acc = recall_accuracy(correct, gap, (32, 64, 96, 128))
    assert list(acc) == bucket_labels((32, 64, 96, 128)) == ["1-32", "33-64", "65-96", "97-128"]
    assert acc["1-32"] == pytest.approx(2 / 3) and acc["33-64"] == 1.0 and acc["97-128"] == 0.0
    assert math.isnan(acc["65-96"])
    assert TASK.chance == 1 / 8


def test_bad_task_is_refused():
    with pytest.raises(ValueError, match="min_gap"):
        recall_stream(100, RecallTask(min_gap=1))


def test_stream_predictions_read_segments_with_the_memory(tiny_model):
    """stream_predictions of Transformer-XL = the argmax of read_segments' logits."""
    model = tiny_model(vocab_size=TASK.vocab_size)
    tokens = recall_stream(300, TASK, seed=5).tokens
    got = stream_predictions(model, tokens, tgt_len=16, mem_len=24)
    x = torch.as_tensor(tokens, dtype=torch.long)[None]
    want = torch.cat([out.logits.argmax(-1)[0] for _, out in read_segments(model, x, tgt_len=16, mem_len=24)])
    assert np.array_equal(got, want.numpy()) and model.cfg.mem_len == TINY["mem_len"]


def test_lstm_carries_its_state_across_segments():
    """Reading in segments with the carried state = one pass over the whole stream."""
    torch.manual_seed(0)
    lstm = LSTMLM(TASK.vocab_size, d_embed=16, d_hidden=24, n_layer=2).double()
    tokens = recall_stream(200, TASK, seed=6).tokens
    whole = lstm(torch.as_tensor(tokens, dtype=torch.long)[None]).logits.argmax(-1)[0].numpy()
    assert np.array_equal(stream_predictions(lstm, tokens, tgt_len=32), whole)
    out = lstm(torch.as_tensor(tokens[:10], dtype=torch.long)[None], targets=torch.as_tensor(tokens[1:11])[None])
    assert not out.mems[0].requires_grad and out.loss.requires_grad  # truncated BPTT: the state is detached
    assert torch.allclose(out.loss, out.nll.mean())
    assert torch.allclose(out.logits.exp().sum(-1), torch.ones(1, 10).double())


def test_window_predictions_see_exactly_the_window(tiny_model):
    """Each position is predicted from the `context` tokens before it: changing a token
    further back changes nothing, changing one inside the window can."""
    model = tiny_model(vocab_size=TASK.vocab_size, attn_type="abs", mem_len=0)
    tokens = recall_stream(200, TASK, seed=7).tokens
    pos = np.array([5, 40, 41, 199])
    got = window_predictions(model, tokens, pos, context=8, batch_size=3)
    for p, g in zip(pos, got):
        s = max(p - 8, 0)
        naive = model(torch.as_tensor(tokens[s:p], dtype=torch.long)[None]).logits[0, -1].argmax()
        assert g == naive
    assert model.cfg.tgt_len == TINY["tgt_len"]  # the lengths came back


def test_recall_correct_scores_the_answer_positions():
    s = recall_stream(2_000, TASK, seed=8)
    perfect = np.roll(s.tokens, -1)  # entry i "predicts" tokens[i + 1]
    assert recall_correct(s, perfect).all() and not recall_correct(s, np.zeros_like(s.tokens)).any()


def test_token_names():
    assert [TASK.name(t) for t in (0, TASK.set_token(1, 5), TASK.query_token(1), TASK.value_token(5))] == \
        [".", "S1=5", "Q1", "5"]


@pytest.mark.parametrize("kind", ["rel", "abs", "lstm"])
def test_recall_models_round_trip_through_float16_files(kind, tiny_model, tmp_path):
    torch.manual_seed(0)
    if kind == "lstm":
        model = LSTMLM(TASK.vocab_size, d_embed=16, d_hidden=24, n_layer=2)
    else:
        model = tiny_model(vocab_size=TASK.vocab_size, attn_type=kind, dtype=torch.float32)
    round_to_float16(model)
    save_recall_model(model, tmp_path / "m.safetensors")
    back = load_recall_model(tmp_path / "m.safetensors")
    assert type(back) is type(model) and not back.training
    for k, v in model.state_dict().items():
        assert torch.equal(back.state_dict()[k], v)  # rounding first: nothing changes on the way
    assert (tmp_path / "m.safetensors").stat().st_size < 0.6 * 4 * sum(p.numel() for p in model.parameters()) + 20_000
    weights, metadata = load_file(tmp_path / "m.safetensors")  # safetensors, not a torch zip of pickles
    assert json.loads(metadata["kind"]) == kind and {w.dtype for w in weights.values()} == {torch.float16}
    with pytest.raises(ValueError, match="name it NAME.safetensors"):
        save_recall_model(model, tmp_path / "m.pt")


def test_a_recall_model_saved_before_safetensors_still_loads(tiny_model, tmp_path):
    """The scripts wrote {"kind", "config", "state_dict"} with torch.save until the results became
    safetensors: such a .pt, e.g. from a reader's own run, loads (weights_only) to the same model."""
    model = round_to_float16(tiny_model(vocab_size=TASK.vocab_size, dtype=torch.float32))
    state = {"kind": "rel", "config": model.cfg.to_dict(),
             "state_dict": {k: v.half() for k, v in model.state_dict().items()}}
    torch.save(state, tmp_path / "old.pt")
    save_recall_model(model, tmp_path / "new.safetensors")
    old, new = load_recall_model(tmp_path / "old.pt"), load_recall_model(tmp_path / "new.safetensors")
    assert all(torch.equal(old.state_dict()[k], v) for k, v in new.state_dict().items())


@pytest.mark.parametrize("kind", ["xl", "lstm"])
def test_train_stream_learns_a_periodic_stream(kind, tiny_model):
    """The shared loop trains either model: a stream that repeats every 5 tokens is learnt."""
    torch.manual_seed(0)
    model = LSTMLM(TASK.vocab_size, 16, 24, 1) if kind == "lstm" else \
        tiny_model(vocab_size=TASK.vocab_size, noise=0.0, dtype=torch.float32).train()
    tokens = np.tile(np.arange(5, dtype=np.uint8), 400)
    x = torch.as_tensor(tokens[:40], dtype=torch.long)[None]
    before = model(x[:, :-1], targets=x[:, 1:]).loss.item()
    seconds = train_stream(model, tokens, steps=150, batch_size=4, tgt_len=8, lr=1e-2, warmup=5, log_every=1000)
    model.eval()
    after = model(x[:, :-1], targets=x[:, 1:]).loss.item()
    assert seconds > 0 and after < 0.3 * before
