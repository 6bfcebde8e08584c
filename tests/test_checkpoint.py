"""Tests of txl_minimal.checkpoint: atomic writes, save/load of a model, the weights' checksum
(damaged checkpoints: test_bad_inputs.py), and the authors' parameter names."""
from __future__ import annotations

import dataclasses
import os

import pytest
import torch

import txl_minimal
from txl_minimal.checkpoint import (load_checkpoint, load_official_state_dict, official_state_dict, save_checkpoint,
                                    weights_sha256)
from txl_minimal.evaluate import main as evaluate_main
from txl_minimal.model import TransformerXL


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint({"step": 1, "w": torch.ones(3)}, path)
    assert os.listdir(tmp_path) == ["ckpt.pt"]

    def broken_save(obj, f, *args, **kwargs):
        f.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"step": 2, "w": torch.zeros(3)}, path)
    assert os.listdir(tmp_path) == ["ckpt.pt"]  # no temp file left behind
    monkeypatch.undo()
    good = torch.load(path, weights_only=True)
    assert good["step"] == 1 and torch.equal(good["w"], torch.ones(3))


def test_save_and_load_a_model_from_your_own_loop(tmp_path, tiny_model, capsys, monkeypatch):
    """txl_minimal.save / txl_minimal.load: one call each, the checkpoint format of the CLI."""
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    model = tiny_model(dtype=torch.float32).train()
    path = tmp_path / "mine.pt"
    txl_minimal.save(model, path)
    ckpt = load_checkpoint(path)
    assert ckpt["model_config"] == model.cfg.to_dict() and ckpt["model_sha256"] == weights_sha256(model.state_dict())
    back = txl_minimal.load(path)
    assert not back.training and back.cfg == model.cfg
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in model.state_dict().items())
    x = torch.randint(0, 27, (1, 6))
    assert torch.equal(back(x).logits, model.eval()(x).logits)
    evaluate_main([str(path), "--corpus", "text8-mini", "--max-predictions", "20", "--no-progress"])
    assert "on text8-mini valid: bpc" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # it names no training corpus: the error says --corpus
        evaluate_main([str(path), "--max-predictions", "20"])
    assert "--corpus" in capsys.readouterr().err


def test_weights_checksum_covers_names_dtypes_shapes_and_values():
    w = {"a": torch.arange(6.0), "b": torch.ones(2, dtype=torch.int64)}
    base = weights_sha256(w)
    assert weights_sha256(dict(reversed(list(w.items())))) == base  # the order does not matter
    for changed in ({"a2": w["a"], "b": w["b"]}, {**w, "a": w["a"].double()}, {**w, "a": w["a"].view(2, 3)},
                    {**w, "a": w["a"] + 1e-6}):
        assert weights_sha256(changed) != base


# interop with the authors' parameter names ------------------------------------------
@pytest.mark.parametrize("overrides", [{}, {"untie_r": True}, {"tie_weights": False}])
def test_official_state_dict_round_trip(tiny_model, overrides):
    model = tiny_model(**overrides)
    sd = official_state_dict(model)
    cfg = model.cfg
    hd = cfg.n_head * cfg.d_head
    assert sd["word_emb.emb_layers.0.weight"].shape == (27, cfg.d_model)
    assert sd["layers.0.dec_attn.qkv_net.weight"].shape == (3 * hd, cfg.d_model)
    assert sd["layers.1.dec_attn.r_net.weight"].shape == (hd, cfg.d_model)
    assert sd["layers.1.dec_attn.o_net.weight"].shape == (cfg.d_model, hd)
    assert sd["layers.0.pos_ff.CoreNet.0.weight"].shape == (cfg.d_inner, cfg.d_model)
    assert sd["layers.0.pos_ff.CoreNet.3.bias"].shape == (cfg.d_model,)
    assert "layers.0.pos_ff.layer_norm.weight" in sd and "layers.0.dec_attn.layer_norm.bias" in sd
    assert sd["crit.out_layers.0.bias"].shape == (27,)
    assert sd["pos_emb.inv_freq"].shape == (cfg.d_model // 2,)
    bias_key = "layers.0.dec_attn.r_w_bias" if cfg.untie_r else "r_w_bias"
    assert sd[bias_key].shape == (cfg.n_head, cfg.d_head)
    if cfg.tie_weights:
        assert sd["crit.out_layers.0.weight"].equal(sd["word_emb.emb_layers.0.weight"])

    other = TransformerXL(dataclasses.replace(cfg)).double().eval()
    load_official_state_dict(other, sd)
    for (n1, p1), (n2, p2) in zip(model.state_dict().items(), other.state_dict().items()):
        assert n1 == n2 and p1.equal(p2), n1
    x = torch.randint(0, 27, (2, 6))
    assert model(x).logits.equal(other(x).logits)


def test_official_state_dict_from_another_config_is_refused(tiny_model):
    sd = official_state_dict(tiny_model())
    with pytest.raises((ValueError, RuntimeError)):
        load_official_state_dict(tiny_model(n_layer=3), sd)


def test_untied_official_softmax_is_not_dropped_silently(tiny_model):
    sd = official_state_dict(tiny_model(tie_weights=False))
    with pytest.raises(ValueError, match="tie_weights=False"):
        load_official_state_dict(tiny_model(), sd)
