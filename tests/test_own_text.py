"""Notebook 09's experiment: its helpers against naive references, and the shipped results.json
against itself (block means, scores, what the notebook's prose reads)."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest

from txl_minimal import load
from txl_minimal.data import load_corpus
from txl_minimal.tutorial import own_text


def test_block_means_are_the_means_of_consecutive_blocks_without_the_short_last_one():
    x = np.arange(11, dtype=np.float32)
    assert own_text.block_means(x, 4).tolist() == [1.5, 5.5]  # 8, 9, 10 dropped
    assert own_text.block_means(x[:3], 4).size == 0


def test_paired_blocks_takes_its_standard_error_over_groups_of_blocks():
    a, b = np.arange(10.0), np.zeros(10)
    mean, se = own_text.paired_blocks(a, b, group=4)  # groups [0..3], [4..7]: means 1.5, 5.5; 8, 9 dropped
    assert mean == pytest.approx(3.5) and se == pytest.approx(2.0)


def test_run_names_mark_a_seed_other_than_0():
    assert own_text.run_name("code", 64) == "code-m64" and own_text.run_name("text8-mini", 0, seed=1) == "text8-m0-s1"


def test_paired_blocks_is_the_mean_difference_and_its_standard_error():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=50), rng.normal(size=50)
    mean, se = own_text.paired_blocks(a, b)
    d = [x - y for x, y in zip(a, b)]
    m = sum(d) / len(d)
    naive_se = math.sqrt(sum((v - m) ** 2 for v in d) / (len(d) - 1) / len(d))
    assert mean == pytest.approx(m) and se == pytest.approx(naive_se)


def test_memory_savings_compares_the_model_with_memory_to_the_one_without():
    blocks = lambda v: np.full(4, v)  # noqa: E731
    runs = {"code-m0": {"blocks": {0: blocks(2.0)}}, "code-m64": {"blocks": {64: blocks(1.9), 0: blocks(9.0)}},
            "text8-m0": {"blocks": {0: blocks(2.5)}}, "text8-m64": {"blocks": {64: blocks(2.45), 0: blocks(9.0)}}}
    assert own_text.memory_savings(runs) == [0.1, 0.05]


def test_the_stdlib_text_is_its_utf8_modules_in_order_and_a_folder_without_them_is_named(tmp_path):
    (tmp_path / "b.py").write_text("b = 2")  # no final newline: one is added
    (tmp_path / "a.py").write_text("a = 1\n")
    (tmp_path / "c.py").write_bytes(b"\xff\xfe not utf-8")  # skipped
    (tmp_path / "notes.txt").write_text("not a module")
    out = own_text.write_stdlib_text(tmp_path / "out" / "stdlib.txt", root=tmp_path)
    assert out.read_text() == "a = 1\nb = 2\n"
    before = out.stat().st_mtime_ns
    time.sleep(0.01)
    own_text.write_stdlib_text(out, root=tmp_path)  # the same text: not rewritten (its corpus cache stays valid)
    assert out.stat().st_mtime_ns == before
    (tmp_path / "a.py").write_text("a = 10\n")
    assert own_text.write_stdlib_text(out, root=tmp_path).read_text() == "a = 10\nb = 2\n"
    with pytest.raises(FileNotFoundError, match=r"no \.py files in .*Fix: pass the folder"):
        own_text.stdlib_files(tmp_path / "out")


def test_missing_results_say_how_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="git checkout results/own_text, or run .*scripts/own_text.py"):
        own_text.load_results(tmp_path / "results.json")


def test_the_shipped_results_hold_every_run_and_their_block_means_give_their_scores():
    res = own_text.load_results()
    meta, runs = res["meta"], res["runs"]
    assert sorted(runs) == sorted([own_text.run_name(c, m) for c in own_text.CORPORA for m in own_text.TRAIN_MEMS]
                                  + [own_text.run_name(c, m, 1) for c in own_text.CORPORA for m in own_text.SEED_MEMS])
    assert meta["eval_mems"] == list(own_text.EVAL_MEMS) and meta["eval_chars"] == own_text.EVAL_CHARS
    for name, run in runs.items():
        assert run["steps"] == meta["steps"] == own_text.STEPS, name
        assert run["seed"] == (1 if name.endswith("-s1") else 0), name
        assert run["test_chars"] == own_text.EVAL_CHARS, name  # 256 whole blocks: none dropped
        for m in own_text.EVAL_MEMS:
            assert len(run["blocks"][m]) == own_text.EVAL_CHARS // own_text.BLOCK
            assert float(run["blocks"][m].mean()) == pytest.approx(run["test_bpc"][m], abs=1e-4), (name, m)


def test_the_shipped_code_test_text_is_what_the_code_models_read():
    text = own_text.read_code_test()
    assert len(text) == own_text.EVAL_CHARS + 1  # the characters scored and the one after the last
    model = load(own_text.RESULTS_DIR / "code-m64.safetensors")
    assert set(text) <= set(model.vocab), "every scored character is in the model's vocabulary"
    assert "def " in text and "self." in text


def test_the_shipped_models_are_those_the_results_describe():
    runs = own_text.load_results()["runs"]
    for name in ("code-m0", "code-m64", "text8-m64"):  # what notebook 09 reads
        model = load(own_text.RESULTS_DIR / f"{name}.safetensors")
        assert model.cfg.to_dict() == runs[name]["model_config"], name
        assert sum(p.numel() for p in model.parameters()) == runs[name]["params"], name
    assert load(own_text.RESULTS_DIR / "text8-m64.safetensors").cfg.vocab_size == load_corpus("text8-mini").vocab_size


def test_the_prediction_checker_judges_the_direction_with_the_shares_of_either_text(capsys):
    from txl_minimal.tutorial import exercises, memory_gain
    results = memory_gain.load()
    shares = memory_gain.start_shares(results)
    verdict, diff, se = memory_gain.past_start_verdict(results)
    assert verdict == ("code" if diff > 2 * se else "text8" if diff < -2 * se else "neither")
    for share in shares.values():  # either text's share is right, with the right direction
        assert exercises.check_memory_gain_prediction((share, verdict)) is True
    for other in {"code", "text8", "neither"} - {verdict}:
        assert exercises.check_memory_gain_prediction((shares["code"], other)) is False
    assert "bits per character more than text8" in capsys.readouterr().out


