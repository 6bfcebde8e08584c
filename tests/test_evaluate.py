"""Tests of txl_minimal.evaluate: segments with memory, the sliding window, the command line."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from txl_minimal.checkpoint import load, load_checkpoint, save_checkpoint
from txl_minimal.data import load_corpus
from txl_minimal.evaluate import evaluate, evaluate_checkpoint, main, sliding_window_eval
from txl_minimal.model import TransformerXL
from txl_minimal.pretrained import main as pretrained_main
from txl_minimal.train import main as train_main, train

from tiny import overfitting_cfg, overfitting_corpus, printed_bpc, synthetic_corpus, tiny_cfg, tiny_train_cfg


# ----------------------------------------------------------------------------- evaluation

def test_evaluate_scores_every_token_once(tiny_model):
    model = tiny_model(noise=0.1, tgt_len=8, mem_len=8)
    ids = torch.randint(0, 27, (103,))
    cfg_before = model.cfg.to_dict()
    res = evaluate(model, ids, batch_size=1, tgt_len=10, mem_len=7)
    assert res["tokens"] == 102
    assert model.cfg.to_dict() == cfg_before  # lengths restored

    # the manual loop: consecutive segments of 10 (the last one has 2), memory carried
    model.set_lengths(tgt_len=10, mem_len=7)
    mems, total = None, 0.0
    for s in range(0, 102, 10):
        e = min(s + 10, 102)
        out = model(ids[None, s:e], mems, targets=ids[None, s + 1:e + 1])
        total, mems = total + out.nll.sum().item(), out.mems
    model.set_lengths(tgt_len=8, mem_len=8)
    assert res["loss"] == pytest.approx(total / 102, rel=1e-6)
    assert res["bpc"] == pytest.approx(total / 102 / math.log(2), rel=1e-6)

    # batch_size columns: column b is the slice [26b, 26b + 27), scored on its own
    batched = evaluate(model, ids, batch_size=4, tgt_len=10, mem_len=7)
    assert batched["tokens"] == 102
    parts = [evaluate(model, ids[26 * b:26 * b + 27], tgt_len=10, mem_len=7) for b in range(4)]
    assert sum(p["tokens"] for p in parts) == 102
    assert batched["loss"] * 102 == pytest.approx(sum(p["loss"] * p["tokens"] for p in parts), rel=1e-6)

    assert evaluate(model, ids, max_tokens=50)["tokens"] == 50
    assert evaluate(model, ids.numpy().astype(np.uint8), batch_size=200)["tokens"] == 102


def test_sliding_window_matches_explicit_windows(tiny_model):
    model = tiny_model(noise=0.1, attn_type="abs", tgt_len=8, mem_len=0)
    ids = torch.randint(0, 27, (41,))
    context = 8
    res = sliding_window_eval(model, ids, context, batch_size=5)
    manual = []
    for t in range(1, 41):  # token t from the (at most) `context` tokens before it, last position only
        window = ids[max(0, t - context):t]
        manual.append(F.cross_entropy(model(window[None]).logits[0, -1], ids[t]).item())
    assert res["tokens"] == 40
    assert res["loss"] == pytest.approx(sum(manual) / 40, rel=1e-6)
    limited = sliding_window_eval(model, ids, context, max_predictions=20, batch_size=3)
    assert limited["tokens"] == 20 and limited["loss"] == pytest.approx(sum(manual[:20]) / 20, rel=1e-6)
    short = sliding_window_eval(model, ids[:5], context)  # shorter than one window
    assert short["tokens"] == 4 and short["loss"] == pytest.approx(sum(manual[:4]) / 4, rel=1e-6)
    assert model.cfg.mem_len == 0 and model.cfg.tgt_len == 8 and not model.training


# ----------------------------------------------------------------------------- command-line evaluation

def test_cli_evaluates_a_run_directory_or_checkpoint(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    run = tmp_path / "run"
    train(tiny_cfg(), tiny_train_cfg(run, max_steps=2, eval_interval=2), synthetic_corpus("abc def "),
          progress=False)
    (run / "best.pt").unlink()  # a run without one (made before best.pt existed) is scored by its ckpt.pt
    ckpt = load_checkpoint(run / "ckpt.pt")
    torch.manual_seed(1)  # big random weights, so the memory length changes the bpc (by ~0.1)
    weights = {k: v + torch.randn_like(v) if v.is_floating_point() else v for k, v in ckpt["model"].items()}
    save_checkpoint(dict(ckpt, model=weights), run / "ckpt.pt")
    model = TransformerXL(tiny_cfg()).eval()
    model.load_state_dict(weights)
    test = load_corpus("text8-mini").test
    main([str(run), "--corpus", "text8-mini", "--split", "test", "--mem-len", "16",
          "--max-predictions", "300", "--no-progress"])
    out = capsys.readouterr().out
    assert "over 300 predictions" in out and "mem_len=16" in out and "tgt_len=8" in out
    assert f"{run}: scoring ckpt.pt, the last state (step 2; no best.pt)" in out
    expected = evaluate(model, test, batch_size=1, mem_len=16, max_tokens=300)["bpc"]
    assert printed_bpc(out) == pytest.approx(expected, abs=6e-5)
    # the training mem_len (8) would give another number: --mem-len really arrived
    assert printed_bpc(out) != pytest.approx(evaluate(model, test, max_tokens=300)["bpc"], abs=0.05)

    main([str(run / "ckpt.pt"), "--corpus", "text8-mini", "--sliding-window", "8",
          "--max-predictions", "50", "--no-progress"])
    out = capsys.readouterr().out
    expected = sliding_window_eval(model, load_corpus("text8-mini").valid, 8, max_predictions=50)["bpc"]
    assert "on text8-mini valid: " in out and printed_bpc(out) == pytest.approx(expected, abs=6e-5)

    for argv, message in (([str(run), "--no-progress"], "names corpus 'synthetic'.*--corpus"),
                          ([str(tmp_path / "nope")], "no model at .*nope: not a shipped model.*Fix")):
        with pytest.raises(SystemExit) as exit_:  # an argparse error: the message, no traceback
            main(argv)
        assert exit_.value.code == 2 and re.search(message, capsys.readouterr().err)


def test_a_run_directory_is_scored_by_its_best_checkpoint(tmp_path, capsys, monkeypatch):
    """best.pt (step 8 of 16 here) unless --last; the output says which, and --last needs a directory."""
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    corpus, run = overfitting_corpus(), tmp_path / "run"
    res = train(tiny_cfg(), overfitting_cfg(run), corpus, progress=False)
    assert res.best_step == 8
    test = load_corpus("text8-mini").test
    expected = {which: evaluate(load(run / f"{which}.pt"), test, max_tokens=200)["bpc"] for which in ("best", "ckpt")}
    assert abs(expected["best"] - expected["ckpt"]) > 1e-3  # the two states score differently
    argv = [str(run), "--corpus", "text8-mini", "--split", "test", "--max-predictions", "200", "--no-progress"]
    main(argv)
    out = capsys.readouterr().out
    assert out.startswith(f"{run}: scoring best.pt, the state of its best periodic evaluation (step 8, valid bpc "
                          f"{res.best_valid_bpc:.4f} in training); --last scores ckpt.pt, the last state\n")
    assert f"{run / 'best.pt'} on text8-mini test" in out
    assert printed_bpc(out) == pytest.approx(expected["best"], abs=6e-5)
    main([*argv, "--last"])
    out = capsys.readouterr().out
    assert out.startswith(f"{run}: scoring ckpt.pt, the last state (step 16; --last)\n")
    assert printed_bpc(out) == pytest.approx(expected["ckpt"], abs=6e-5)
    r = evaluate_checkpoint(run, "test", "text8-mini", max_predictions=200)
    assert (r["checkpoint"], r["step"], r["saved_valid_bpc"]) == (str(run / "best.pt"), 8, res.best_valid_bpc)
    with pytest.raises(SystemExit):
        main([str(run / "best.pt"), "--last", "--no-progress"])
    assert "is not a run directory. Fix: drop --last" in capsys.readouterr().err


@pytest.mark.parametrize("cli, argv, message", [
    (train_main, ["--eval-mem-len", "16"], "unrecognized arguments: --eval-mem-len"),  # python -m txl_minimal.train
    (train_main, ["--attn-type", "abs"], "unrecognized arguments: --attn-type"),  # now --set attn_type=abs
    (main, ["txl", "--sliding-window", "8", "--mem-len", "16"], "drop --mem-len"),
    (pretrained_main, ["--update-json", "runs/x"], "invalid choice"),  # only txl or vanilla
    (pretrained_main, ["--update-json", "txl", "--split", "test"], "unrecognized arguments: --split"),
    (pretrained_main, ["--ship", "runs/x"], "--ship needs --name"),
    (pretrained_main, ["--update-json", "txl", "--last"], "--last goes with --ship"),
])
def test_cli_rejects_evaluation_options_it_would_ignore(cli, argv, message, capsys):
    with pytest.raises(SystemExit):
        cli(argv)
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("cli, module", [(train_main, "train"), (main, "evaluate"), (pretrained_main, "pretrained")])
def test_usage_names_the_module_to_run(cli, module, capsys):
    with pytest.raises(SystemExit):
        cli(["--help"])
    assert capsys.readouterr().out.startswith(f"usage: python -m txl_minimal.{module} ")


def test_load_and_evaluate_take_a_run_folder_with_only_its_best_checkpoint(tmp_path):
    res = train(tiny_cfg(), tiny_train_cfg(tmp_path, max_steps=4, eval_interval=2), synthetic_corpus("abc def "),
                progress=False)
    assert res.best_step > 0
    (tmp_path / "ckpt.pt").unlink()  # the last state gone, the best kept
    model = load(tmp_path)  # a run folder: its best.pt
    assert torch.equal(model.out_bias, load_checkpoint(tmp_path / "best.pt")["model"]["out_bias"])
    with pytest.raises(FileNotFoundError, match="no ckpt.pt.*--last.*drop --last"):
        evaluate_checkpoint(tmp_path, last=True)
    assert load("txl-tiny").cfg.n_layer >= 1  # and a shipped name


# ----------------------------------------------------------------------------- ids of another vocabulary

def test_ids_of_a_corpus_of_another_vocabulary_or_unit_are_refused_by_every_scorer(tiny_model):
    """A model of 102 symbols scored text8's ids (all below 102) at 8.996 bpc without a word: the ids of a
    Corpus, or any view of them, now carry their vocabulary; ids of unknown origin are scored as before."""
    from txl_minimal.checkpoint import attach_vocab, vocab_entry
    from txl_minimal.data import Corpus
    from txl_minimal.evaluate import read_segments
    model = tiny_model(vocab_size=102)
    attach_vocab(model, vocab_entry("character", "".join(chr(32 + i) for i in range(102))))  # a file's characters
    valid = load_corpus("text8-mini").valid
    scorers = {"evaluate": lambda ids: evaluate(model, ids, max_tokens=40),
               "sliding_window_eval": lambda ids: sliding_window_eval(model, ids, 8, max_predictions=40),
               "read_segments": lambda ids: list(read_segments(model, ids[None, :40], ids[None, 1:41]))}
    for name, score in scorers.items():
        for ids in (valid, valid[:2001]):  # the split, a view of it
            with pytest.raises(ValueError, match=f"{name}: the model was trained on another vocabulary "
                                                 r"\(102 characters\) than these ids' \(text8-mini's 27 characters\)"):
                score(ids)
        score(np.array(valid[:2001]))  # a copy: of unknown origin, checked against vocab_size only
    words = Corpus("words", valid[:500].astype(np.int32), valid[:100].astype(np.int32), valid[:100].astype(np.int32),
                   vocab=tuple(f"w{i}" for i in range(27)), unit="word")
    with pytest.raises(ValueError, match="the model reads 102 characters but these ids are words's 27 words"):
        evaluate(model, words.valid)
    text8_model = tiny_model()  # built in Python: no recorded vocabulary, so nothing to compare
    assert evaluate(text8_model, words.valid)["tokens"] == 99
    attach_vocab(text8_model, vocab_entry("character", load_corpus("text8-mini").vocab))
    assert evaluate(text8_model, valid[:50])["tokens"] == 49  # its own vocabulary: scored
    with pytest.raises(ValueError, match=r"ids must be in \[0, 26\].*Fix: ids of the model's own corpus"):
        evaluate(text8_model, torch.tensor([1, 2, 30]))  # ids past the vocabulary (already refused)


# ----------------------------------------------------------------------------- command-line comparisons

def test_cli_compares_two_memory_lengths_with_the_paired_error(capsys):
    from txl_minimal import load_pretrained, paired_difference
    main(["txl-tiny", "--mem-len", "0", "64", "--max-predictions", "2000", "--block", "500", "--no-progress"])
    out = capsys.readouterr().out.splitlines()
    model, valid = load_pretrained("txl-tiny"), load_corpus("text8-mini").valid
    runs = [evaluate(model, valid, mem_len=m, max_tokens=2000, per_token=True) for m in (0, 64)]
    paired = paired_difference(runs[1]["nll"], runs[0]["nll"], 500)
    assert len(out) == 3 and "mem_len=0," in out[0] and "mem_len=64," in out[1]
    assert [printed_bpc(line) for line in out[:2]] == [pytest.approx(r["bpc"], abs=6e-5) for r in runs]
    assert out[2] == (f"mem_len=64 minus mem_len=0: {paired.mean:+.4f} bpc ± {paired.se:.4f} (paired standard error "
                      "over 4 blocks of 500 of the same 2,000 predictions)")
    assert paired.mean < 0  # the memory the model was trained with helps


def test_cli_compares_two_runs_on_the_same_characters(capsys):
    main(["txl-tiny", "vanilla-tiny", "--max-predictions", "2000", "--no-progress"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3 and "txl-tiny.safetensors" in out[0] and "vanilla-tiny.safetensors" in out[1]
    assert re.fullmatch(r"vanilla-tiny minus txl-tiny: \+0\.\d{4} bpc ± 0\.\d{4} \(paired standard error over 2 "
                        r"blocks of 1,000 of the same 2,000 predictions\)", out[2])


@pytest.mark.parametrize("argv, message", [
    (["txl-tiny", "vanilla-tiny", "txl"], "one checkpoint, or two to compare on the same characters, got 3"),
    (["txl-tiny", "--mem-len", "0", "32", "64"], "--mem-len takes one value, or two to compare, got 3"),
    (["txl-tiny", "--mem-len", "0", "64", "--tgt-len", "32", "64"], "compare one setting at a time: --tgt-len and "
                                                                     "--mem-len each have two values"),
    (["txl-tiny", "vanilla-tiny", "--mem-len", "0", "64"], "compare two checkpoints or two values of --mem-len, "
                                                           "not both"),
    (["txl-tiny", "--block", "100"], "--block sizes the paired standard error of a comparison"),
    (["txl-tiny", "--mem-len", "0", "64", "--max-predictions", "1500"], "needs at least 2 blocks of --block 1,000 "
                                                                        "predictions, and 1,500 were scored"),
    (["txl-tiny", "--sliding-window", "8", "--mem-len", "0", "64"], "drop --mem-len"),
])
def test_cli_refuses_a_comparison_that_compares_nothing_or_two_things(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--no-progress"])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_cli_refuses_to_compare_runs_on_different_texts(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "my.txt").write_text("abc def ghi jkl\n" * 400, encoding="utf-8")
    corpus = load_corpus(tmp_path / "my.txt")
    train(tiny_cfg(vocab_size=corpus.vocab_size), tiny_train_cfg(tmp_path / "run", max_steps=2, eval_interval=2,
                                                                  corpus=str(tmp_path / "my.txt")),
          corpus, progress=False)
    with pytest.raises(SystemExit):
        main([str(tmp_path / "run"), "txl-tiny", "--max-predictions", "2000", "--no-progress"])
    err = capsys.readouterr().err
    assert "did not score the same text" in err and "text8-mini valid" in err and "Fix: --corpus" in err


def test_help_names_every_shipped_model(capsys, monkeypatch):
    from txl_minimal.checkpoint import NAMES
    monkeypatch.setenv("COLUMNS", "200")  # argparse wraps at the terminal's width (and inside "vanilla-tiny")
    with pytest.raises(SystemExit):
        main(["--help"])
    assert f"a shipped model ({' | '.join(NAMES)})" in capsys.readouterr().out and len(NAMES) == 4
