"""Tests of txl_minimal.pretrained: the shipped models."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from txl_minimal import load_pretrained, pretrained
from txl_minimal.checkpoint import CHECKSUM, NAMES, PRETRAINED_DIR, load_checkpoint, weights_sha256
from txl_minimal.data import load_corpus
from txl_minimal.evaluate import evaluate, main, sliding_window_eval
from txl_minimal.train import train

from tiny import overfitting_cfg, overfitting_corpus, printed_bpc, synthetic_corpus, tiny_cfg, tiny_train_cfg


# ----------------------------------------------------------------------------- shipped models

def test_load_pretrained_rejects_unknown_names():
    with pytest.raises(ValueError, match="txl, vanilla"):
        load_pretrained("gpt")


# name -> (attn_type, mem_len, tgt_len): the shipped pair and the earlier, smaller one
SHIPPED = {"txl": ("rel", 128, 128), "vanilla": ("abs", 0, 128),
           "txl-tiny": ("rel", 64, 64), "vanilla-tiny": ("abs", 0, 64)}


def test_every_name_is_shipped():
    assert set(SHIPPED) == set(NAMES)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_pretrained_models_load_offline_and_predict_text8(name, capsys):
    test = load_corpus("text8-mini").test
    model = load_pretrained(name)
    attn_type, mem_len, tgt_len = SHIPPED[name]
    assert not model.training and (model.cfg.attn_type, model.cfg.mem_len, model.cfg.tgt_len) == SHIPPED[name]
    if attn_type == "abs":
        assert sliding_window_eval(model, test, tgt_len, max_predictions=500)["bpc"] < 2.5
    assert evaluate(model, test, max_tokens=2000)["bpc"] < 2.5
    for ext in ("json", "log.csv"):
        assert (PRETRAINED_DIR / f"{name}.{ext}").exists()
    assert (PRETRAINED_DIR / f"{name}.safetensors").stat().st_size < 20e6
    shipped = (PRETRAINED_DIR / f"{name}.json").read_bytes()
    main([name, "--split", "test", "--max-predictions", "2000", "--no-progress"])
    assert printed_bpc(capsys.readouterr().out) == pytest.approx(evaluate(model, test, max_tokens=2000)["bpc"],
                                                                  abs=6e-5)
    assert (PRETRAINED_DIR / f"{name}.json").read_bytes() == shipped  # only --update-json rewrites it


@pytest.mark.parametrize("name", ["txl", "vanilla"])
def test_the_shipped_pair_beats_the_tiny_one(name):
    test = load_corpus("text8-mini").test
    new, old = (evaluate(load_pretrained(n), test, max_tokens=5000)["bpc"] for n in (name, f"{name}-tiny"))
    assert new < old - 0.1


def test_shipped_models_carry_the_checksum_of_their_weights():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "has no checksum" warning
        for name in SHIPPED:
            ckpt = load_checkpoint(PRETRAINED_DIR / f"{name}.safetensors")
            assert ckpt[CHECKSUM] == weights_sha256(load_pretrained(name).state_dict())


def test_paired_difference_uses_blocks():
    ref = np.zeros(4000)
    nll = np.full(4000, math.log(2.0))  # one bit worse everywhere
    diff, se = pretrained.paired_difference(nll, ref, block=1000)
    assert diff == pytest.approx(1.0) and se == pytest.approx(0.0)
    nll[:1000] += math.log(2.0)  # the first block two bits worse: blocks 2, 1, 1, 1
    diff, se = pretrained.paired_difference(nll, ref, block=1000)
    assert diff == pytest.approx(1.25) and se == pytest.approx(np.std([2, 1, 1, 1], ddof=1) / 2)


def test_export_writes_the_checksum(tmp_path, monkeypatch):
    """The shipped files are replaced through export_pretrained, so it must write the checksum."""
    run = tmp_path / "run"
    train(tiny_cfg(), tiny_train_cfg(run, max_steps=2, eval_interval=2), synthetic_corpus("abc def "), progress=False)
    monkeypatch.setattr(pretrained, "PRETRAINED_DIR", tmp_path / "package")
    path = pretrained.export_pretrained(run, "txl")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shipped = load_checkpoint(path)
    assert shipped[CHECKSUM] == weights_sha256(load_checkpoint(run / "ckpt.pt")["model"])
    assert "optimizer" not in shipped and (tmp_path / "package" / "txl.log.csv").exists()


def test_export_ships_the_best_checkpoint_or_the_last_on_request(tmp_path, monkeypatch):
    run = tmp_path / "run"
    assert train(tiny_cfg(), overfitting_cfg(run), overfitting_corpus(), progress=False).best_step == 8
    monkeypatch.setattr(pretrained, "PRETRAINED_DIR", tmp_path / "package")
    for last, source in ((False, "best.pt"), (True, "ckpt.pt")):
        shipped = load_checkpoint(pretrained.export_pretrained(run, "txl", last=last))
        kept = load_checkpoint(run / source)
        assert shipped[CHECKSUM] == kept[CHECKSUM] and shipped["step"] == kept["step"] == (16 if last else 8)
        assert shipped["wall_time_s"] == kept["wall_time_s"]
