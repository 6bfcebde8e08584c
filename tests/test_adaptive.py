"""The word-level layers (adaptive.py): adaptive input and the projected adaptive softmax,
against naive references (txl_minimal/reference.py: a token looked up in its cluster's table, each word's
probability by hand), the authors' names and ties, and cutoffs=[] as today's model bit for bit."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import txl_minimal
from txl_minimal.reference import (authors_word_tensors, naive_embedding, naive_forward, naive_log_probs,
                                   segment_visibility)
from tiny import TINY
from txl_minimal.adaptive import AdaptiveEmbedding, ProjectedAdaptiveLogSoftmax, tie
from txl_minimal.checkpoint import load_official_state_dict, official_state_dict, weights_sha256
from txl_minimal.evaluate import evaluate, read_segments
from txl_minimal.model import TransformerXL, TXLConfig

V = 40  # clusters [0, 8), [8, 20), [20, 40)
WORDS = dict(vocab_size=V, cutoffs=[8, 20])
# (div_val, d_embed, tie_weights, tie_projs): the authors' layouts, with and without the ties
SETTINGS = {
    "div1": dict(div_val=1),
    "div1-untied": dict(div_val=1, tie_weights=False),
    "div1-proj": dict(div_val=1, d_embed=8, tie_projs=[False, True, True]),
    "div1-proj-untied": dict(div_val=1, d_embed=8, tie_weights=False, tie_projs=[False, False, False]),
    "div2": dict(div_val=2, tie_projs=[False, True, True]),
    "div4": dict(div_val=4, tie_projs=[True, False, True]),
    "div4-untied": dict(div_val=4, d_embed=32, tie_weights=False),
    "no-cutoffs-proj": dict(cutoffs=[], d_embed=8, tie_projs=[True]),  # one projected softmax
}


def words_model(tiny_model, name: str = "div4", **overrides) -> TransformerXL:
    return tiny_model(**{**WORDS, **SETTINGS[name], **overrides})


def every_cluster(B: int = 2, N: int = 12, seed: int = 0) -> torch.Tensor:
    """(B, N) ids with words from every cluster in every row."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, N), generator=g)
    ids[:, :3] = torch.tensor([3, 15, 33])
    return ids


@pytest.mark.parametrize("name", SETTINGS)
def test_model_matches_the_naive_reference(tiny_model, name):
    """The whole model, two segments with memory, against txl_minimal/reference.py computed key by key
    with the embedding looked up and the softmax computed cluster by cluster by hand."""
    model = words_model(tiny_model, name)
    x = every_cluster()
    ours = torch.cat([out.logits for _, out in read_segments(model, x)], dim=1)
    ref = naive_forward(model, x, segment_visibility(TINY["tgt_len"], TINY["mem_len"]))
    torch.testing.assert_close(ours, ref, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["div1-proj", "div4-untied"])
def test_modules_match_the_naive_reference(name):
    cfg = TXLConfig(**{**TINY, **WORDS, **SETTINGS[name]})
    g = torch.Generator().manual_seed(1)
    sd = authors_word_tensors(cfg, g)
    emb = AdaptiveEmbedding(V, cfg.d_embed or cfg.d_model, cfg.d_model, cfg.cutoffs, cfg.div_val).double()
    crit = ProjectedAdaptiveLogSoftmax(V, cfg.d_embed or cfg.d_model, cfg.d_model, cfg.cutoffs, cfg.div_val).double()
    emb.load_state_dict({k.removeprefix("word_emb."): v for k, v in sd.items() if k.startswith("word_emb.")})
    crit.load_state_dict({k.removeprefix("crit."): v for k, v in sd.items() if k.startswith("crit.")})
    x = every_cluster()
    torch.testing.assert_close(emb(x) * cfg.d_model ** 0.5, naive_embedding(sd, cfg, x), rtol=1e-12, atol=1e-12)
    h = torch.randn(2, 5, cfg.d_model, generator=g, dtype=torch.float64)
    torch.testing.assert_close(crit.log_prob(h), naive_log_probs(sd, cfg, h), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", ["div1", "div1-proj", "div4"])
def test_log_probs_sum_to_one(tiny_model, name):
    logits = words_model(tiny_model, name)(every_cluster()).logits
    assert logits.shape == (2, 12, V)
    torch.testing.assert_close(logits.exp().sum(-1), torch.ones(2, 12, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.log_softmax(logits, -1), logits, rtol=0, atol=1e-12)  # callers' log_softmax


@pytest.mark.parametrize("name", ["div1", "div1-proj", "div4-untied"])
def test_per_target_loss_equals_the_full_softmax_at_the_targets(tiny_model, name):
    """Training reads only the targets' clusters (out.logits is None); evaluation the full
    log-probabilities. Both give the same NLL (TINY has no dropout)."""
    model = words_model(tiny_model, name)
    x, y = every_cluster(seed=1), every_cluster(seed=2)
    full = model.eval()(x, targets=y)
    cheap = model.train()(x, targets=y)
    assert cheap.logits is None and full.logits is not None
    at_targets = -full.logits.gather(-1, y[..., None]).squeeze(-1)
    torch.testing.assert_close(cheap.nll, at_targets.float(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(full.nll, at_targets.float(), rtol=1e-6, atol=1e-6)
    h = torch.randn(3, 7, model.cfg.d_model, dtype=torch.float64)
    t = torch.randint(0, V, (3, 7))
    exact = -model.crit.log_prob(h).gather(-1, t[..., None]).squeeze(-1)
    torch.testing.assert_close(model.crit.nll(h, t), exact, rtol=1e-12, atol=1e-12)  # float64 kept
    result = evaluate(model, torch.cat([x[0], y[0, -1:]]))  # the evaluation reads nll
    assert result["loss"] == pytest.approx(-model.eval()(x[:1]).logits[0].gather(-1, torch.cat(
        [x[0, 1:], y[0, -1:]])[:, None]).mean().item(), rel=1e-5)


@pytest.mark.parametrize("name", ["div1-proj", "div4", "div4-untied"])
def test_gradients_reach_every_cluster(tiny_model, name):
    model = words_model(tiny_model, name).train()
    x = every_cluster()
    model(x, targets=x.roll(-1, 1)).loss.backward()
    for part in (model.word_emb, model.crit):
        for pname, p in part.named_parameters():
            assert p.grad is not None and p.grad.abs().sum() > 0, pname
    if model.cfg.div_val > 1:  # every cluster's own table, output layer and projection
        assert len(model.word_emb.emb_layers) == len(model.crit.out_layers) == len(model.crit.out_projs) == 3


# Made on main at c1740ad (before cutoffs existed), torch 2.13.0: torch.manual_seed(0), TXLConfig(**TINY).
TODAY_SHA256 = "a2e965864ae50b0e22ba3e65ae23c222ff9a405cf7cd6157d833502468058723"
TODAY_KEYS = ["r_w_bias", "r_r_bias", "out_bias", "word_emb.weight", "pos_emb.inv_freq"]


def test_no_cutoffs_is_todays_model_bit_for_bit():
    """cutoffs=[] (the default) builds today's plain softmax: the same parameters, names, random
    init sequence and outputs, whether the new fields are left out or given their defaults."""
    def build(**fields):
        torch.manual_seed(0)
        model = TransformerXL(TXLConfig(**TINY, **fields))
        return model, torch.rand(1)  # the RNG after the init: the same draws were consumed

    plain, after = build()
    spelled, after2 = build(cutoffs=[], div_val=1, d_embed=None, tie_projs=None)
    same_width, after3 = build(cutoffs=[], d_embed=TINY["d_model"])
    assert list(plain.state_dict())[:5] == TODAY_KEYS and plain.crit is None
    assert isinstance(plain.word_emb, torch.nn.Embedding)
    assert weights_sha256(plain.state_dict()) == TODAY_SHA256, (
        "the init of a model without cutoffs changed; if on purpose (a new layout), update TODAY_SHA256")
    for other, rng in ((spelled, after2), (same_width, after3)):
        assert weights_sha256(other.state_dict()) == weights_sha256(plain.state_dict()) and torch.equal(rng, after)
        x = every_cluster()[:, :6] % 27
        assert torch.equal(other.eval()(x, targets=x).logits, plain.eval()(x, targets=x).logits)


@pytest.mark.parametrize("fields, message", [
    (dict(cutoffs=[20, 8]), r"cutoffs \[20, 8\] leave tail cluster 1 \[20, 8\) empty: cutoffs must increase"),
    (dict(cutoffs=[8, 8]), r"leave tail cluster 1 \[8, 8\) empty"),
    (dict(cutoffs=[8, 40]), r"leave tail cluster 2 \[40, 40\) empty.*below vocab_size=40"),
    (dict(cutoffs=[8, 50]), r"cutoffs \[8, 50\] leave tail cluster 2 \[50, 40\) empty"),
    (dict(cutoffs=[0, 8]), r"leave the head \[0, 0\) empty"),
    (dict(cutoffs=8), r"cutoffs must be a list of integers"),
    (dict(cutoffs=[8.0]), r"cutoffs must be a list of integers"),
    (dict(cutoffs=[8, 20], tie_projs=[True, False]), r"tie_projs must be None or 3 bools, one per cluster"),
    (dict(cutoffs=[8, 20], tie_projs=[1, 0, 0]), r"tie_projs must be None or 3 bools"),
    (dict(div_val=2), r"div_val=2 needs cutoffs"),
    (dict(cutoffs=[8, 20], div_val=5, d_embed=16), r"d_embed // div_val\*\*2 = 16 // 25 is 0"),
    (dict(d_embed=0), r"d_embed must be an integer >= 1 or None"),
    (dict(div_val=0), r"div_val must be an integer >= 1"),
])
def test_bad_cluster_settings_get_a_clear_error(fields, message):
    with pytest.raises(ValueError, match=message):
        TXLConfig(**{**TINY, "vocab_size": V, **fields})


def test_save_and_load_round_trip_keeps_the_ties(tmp_path, tiny_model):
    model = words_model(tiny_model, "div4", dtype=torch.float32)
    path = tmp_path / "words.pt"
    txl_minimal.save(model, path)
    back = txl_minimal.load(path)
    assert back.cfg == model.cfg and back.cfg.to_dict()["cutoffs"] == [8, 20]
    assert back.crit.out_layers[2].weight is back.word_emb.emb_layers[2].weight  # tie_weights
    assert back.crit.out_projs[0] is back.word_emb.emb_projs[0]  # tie_projs [True, False, True]
    assert back.crit.out_projs[1] is not back.word_emb.emb_projs[1]
    x = every_cluster()
    assert torch.equal(back(x).logits, model(x).logits)
    assert back.generate(x[0, :3], 4).max() < V


@pytest.mark.parametrize("name", SETTINGS)
def test_authors_checkpoint_loads_and_gives_the_same_log_probs(tiny_model, name):
    """A state dict in the authors' layout (reference.authors_word_tensors, their names and ties,
    plus the body's tensors) loads; the model's log-probabilities are the naive ones computed
    from that state dict; official_state_dict gives it back."""
    model = words_model(tiny_model, name, seed=1)
    body = {k: v for k, v in official_state_dict(model).items() if not k.startswith(("word_emb.", "crit."))}
    words = authors_word_tensors(model.cfg, torch.Generator().manual_seed(2))
    theirs = {**body, **words}
    load_official_state_dict(model, theirs)
    x = every_cluster()
    ref = naive_forward(model, x, lambda t, j: j <= t, words=words)
    with model.lengths(tgt_len=12, mem_len=0):
        torch.testing.assert_close(model(x).logits, ref, rtol=1e-9, atol=1e-9)
    back = official_state_dict(model)
    assert sorted(back) == sorted(theirs)
    assert all(torch.equal(back[k], theirs[k]) for k in theirs)


@pytest.mark.parametrize("name, untie, flag", [
    ("div4", dict(tie_weights=False), r"crit.out_layers.0.weight differs .* TXLConfig\(tie_weights=False\)"),
    ("div1-proj", dict(tie_projs=[False, True, False]),
     r"crit.out_projs.2 differs .*tie_projs=...\) whose entry 2 is False"),
])
def test_untied_authors_checkpoint_into_a_tied_model_is_refused(tiny_model, name, untie, flag):
    """Their untied tensors would be loaded into one shared parameter, keeping one silently; the
    reverse (their tied tensors into an untied model) is a model that may untie later: fine."""
    model = words_model(tiny_model, name)
    body = {k: v for k, v in official_state_dict(model).items() if not k.startswith(("word_emb.", "crit."))}
    untied = dataclasses.replace(model.cfg, **untie)
    with pytest.raises(ValueError, match=flag):
        load_official_state_dict(model, {**body, **authors_word_tensors(untied, torch.Generator())})
    untied_model = TransformerXL(untied).double()
    load_official_state_dict(untied_model, {**body, **authors_word_tensors(model.cfg, torch.Generator())})
    assert untied_model.cfg != model.cfg


def test_tie_shares_the_authors_parameters():
    emb = AdaptiveEmbedding(V, 16, 16, [8, 20], div_val=1)
    crit = ProjectedAdaptiveLogSoftmax(V, 16, 16, [8, 20], div_val=1)
    tie(emb, crit, True, [True, True, True])  # div_val 1, d_embed == d_proj: no projection to share
    assert crit.out_layers[0].weight is emb.emb_layers[0].weight and len(emb.emb_projs) == 0
    assert list(crit.out_projs) == [None, None, None]


def test_bf16_autocast_training_step(tiny_model):
    """Under autocast the clusters' pieces are bf16; the log-softmax and the NLL stay float32."""
    model = words_model(tiny_model, "div4", dtype=torch.float32).train()
    x, y = every_cluster(seed=3), every_cluster(seed=4)
    exact = model(x, targets=y).loss.item()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x, targets=y)
    assert out.nll.dtype == torch.float32 and out.loss.item() == pytest.approx(exact, abs=0.05)
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
