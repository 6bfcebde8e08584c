"""python -m txl_minimal.generate: the text generate_text samples, from a shipped name, a run folder or a
checkpoint file, and every bad argument refused in a sentence (an argparse error: exit 2, no traceback)."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from tiny import ROOT, cli_error, tiny_cfg, tiny_train_cfg
from txl_minimal import generate_text, load, load_corpus, load_pretrained
from txl_minimal.checkpoint import save
from txl_minimal.data import UNKNOWN_CHAR
from txl_minimal.generate import main
from txl_minimal.model import TransformerXL
from txl_minimal.train import train


def test_it_prints_what_generate_text_samples_with_the_same_seed(capsys):
    main(["txl-tiny", "--prompt", "the king of ", "--length", "30", "--temperature", "0.8", "--top-k", "5",
          "--seed", "3"])
    expected = generate_text(load_pretrained("txl-tiny"), "the king of ", 30, temperature=0.8, top_k=5,
                             generator=torch.Generator().manual_seed(3))
    assert capsys.readouterr().out == expected + "\n" and len(expected) == 12 + 30
    main(["txl-tiny", "--prompt", "the king of ", "--length", "20", "--temperature", "0"])  # greedy
    assert capsys.readouterr().out == generate_text(load_pretrained("txl-tiny"), "the king of ", 20, top_k=1) + "\n"


def test_it_samples_from_a_run_folder_its_last_state_and_a_file_in_the_run_text(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "my.txt").write_text("Мороз и солнце; день чудесный!\n" * 200, encoding="utf-8")
    corpus = load_corpus(tmp_path / "my.txt")
    run = tmp_path / "run"
    train(tiny_cfg(vocab_size=corpus.vocab_size), tiny_train_cfg(run, max_steps=2, eval_interval=2,
                                                                  corpus=str(tmp_path / "my.txt")),
          corpus, progress=False)
    for argv, state in (([str(run)], "best.pt"), ([str(run), "--last"], "ckpt.pt"),
                        ([str(run / "ckpt.pt")], "ckpt.pt")):
        main([*argv, "--prompt", "Мороз", "--length", "15"])
        expected = generate_text(load(run / state), "Мороз", 15, generator=torch.Generator().manual_seed(0))
        assert capsys.readouterr().out == expected + "\n" and set(expected) <= set(corpus.vocab)
    assert "ж" not in corpus.vocab
    err = cli_error(main, [str(run), "--prompt", "жук"], capsys)
    assert "'жк' (U+0436, U+043A) are not in the vocabulary" in err
    assert "Fix: write the prompt in characters of the model's training text" in err


@pytest.mark.parametrize("argv, message", [
    (["txl-tiny", "--prompt", "the", "--length", "-1"], "argument --length: must be an integer >= 0, got '-1'"),
    (["txl-tiny", "--prompt", "the", "--length", "ten"], "argument --length: must be an integer >= 0"),
    (["txl-tiny", "--prompt", "the", "--temperature", "-0.5"], "argument --temperature: must be a finite number >= 0"),
    (["txl-tiny", "--prompt", "the", "--temperature", "nan"], "argument --temperature: must be a finite number >= 0"),
    (["txl-tiny", "--prompt", "the", "--top-k", "0"], "argument --top-k: must be an integer >= 1, got '0'"),
    (["txl-tiny", "--length", "5"], "the following arguments are required: --prompt"),
    (["txl-tiny", "--prompt", ""], "generate_text got an empty prompt"),
    (["txl-tiny", "--prompt", "The King"], "character 'T' at position 0 is not in VOCAB ' abcdefghijklmnopqrstuvwxyz'. "
                                           "Fix: write the prompt in text8's characters, space and a-z"),
    (["txl-huge", "--prompt", "the"], "'txl-huge' is neither a shipped model (txl, vanilla, txl-tiny, vanilla-tiny) "
                                      "nor a run directory or checkpoint file"),
    (["txl-tiny", "--prompt", "the", "--last"], "txl-tiny is not a run directory. Fix: drop --last"),
    (["txl-tiny", "--prompt", "the", "--seed", "1.5"], "argument --seed: invalid int value: '1.5'"),
    (["txl-tiny", "--prompt", "the", "--length", "3", "--length", "4"], "--length is given twice"),
])
def test_bad_arguments_are_refused_in_a_sentence(argv, message, capsys):
    assert message in cli_error(main, argv, capsys)


def test_a_file_that_is_no_model_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a model\n")
    assert "Fix" in cli_error(main, [str(tmp_path / "notes.txt"), "--prompt", "the"], capsys)


def test_it_runs_as_a_module_and_its_help_lists_every_shipped_name():
    run = subprocess.run([sys.executable, "-m", "txl_minimal.generate", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert run.returncode == 0 and run.stdout.startswith("usage: python -m txl_minimal.generate ")
    assert "txl | vanilla | txl-tiny | vanilla-tiny" in run.stdout and "nanoGPT's sample.py" in run.stdout


# ----------------------------------------------------------------------------- what is generated (issue 48)

def word_model(symbols: tuple, unknown: int | None, prefer: str | None = None):
    """A tiny word model that knows ``symbols`` and the corpus record's count of <unk> (``unknown``); with
    ``prefer``, that word is by far the likeliest next one (its output bias raised)."""
    from txl_minimal.checkpoint import attach_vocab, vocab_entry
    torch.manual_seed(0)
    model = TransformerXL(tiny_cfg(vocab_size=len(symbols))).eval()
    attach_vocab(model, vocab_entry("word", symbols), dict(name="w.txt", unit="word", reading=None, unknown=unknown))
    if prefer is not None:
        with torch.no_grad():
            model.out_bias[symbols.index(prefer)] = 50.0
    return model


def test_a_word_models_line_breaks_are_eos_in_the_prompt_and_in_the_text(monkeypatch):
    """generate_text(w, "the quick\\nbrown", 3) dropped the line break (its corpus reads it as <eos>), and a
    generated <eos> was printed as the text "<eos>"."""
    symbols = ("<eos>", "<unk>", "the", "quick", "brown", "fox")
    model = word_model(symbols, unknown=3, prefer="<eos>")
    seen = []
    real = model.generate
    monkeypatch.setattr(model, "generate", lambda ids, *a, **kw: seen.append(ids.tolist()) or real(ids, *a, **kw))
    text = generate_text(model, "the quick\nbrown", 3, top_k=1)
    assert seen == [[2, 3, 0, 4]]  # the quick <eos> brown: as load_corpus(f, unit="word") reads those lines
    assert text == "the quick\nbrown\n\n\n"  # three <eos>: three line breaks, no "<eos>", no space before one
    model = word_model(symbols, unknown=3, prefer="fox")
    assert generate_text(model, "the\n", 2, top_k=1) == "the\nfox fox"  # after a line break: no space


@pytest.mark.parametrize("unknown, drawn", [(0, False), (None, True), (5, True)])
def test_unk_is_drawn_only_where_the_training_text_held_it(unknown, drawn):
    """<unk> of a file read without a cap never occurs in its training ids, yet was sampled and printed;
    a record that does not say (an older checkpoint, a WikiText model) keeps it."""
    model = word_model(("<eos>", "<unk>", "the", "cat"), unknown=unknown, prefer="<unk>")
    text = generate_text(model, "the cat", 5, top_k=1)
    assert ("<unk>" in text) == drawn
    assert "<unk>" in generate_text(model, "the cat", 5, top_k=1, allow_unknown=True)


def test_the_unknown_character_is_not_drawn_unless_the_text_held_it(tmp_path, monkeypatch, capsys):
    """U+FFFD is id 0 of a text file's characters, a stand-in for ones seen only in valid or test: it was
    sampled and printed although the training text never held it."""
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "data"))
    (tmp_path / "my.txt").write_text("Мороз и солнце; день чудесный!\n" * 200, encoding="utf-8")
    corpus = load_corpus(tmp_path / "my.txt")
    run = tmp_path / "run"
    train(tiny_cfg(vocab_size=corpus.vocab_size), tiny_train_cfg(run, max_steps=2, eval_interval=2), corpus,
          progress=False)
    model = load(run)
    assert model.corpus_record["unknown"] == 0 and model.vocab[0] == UNKNOWN_CHAR
    with torch.no_grad():
        model.out_bias[0] = 50.0  # U+FFFD the likeliest character by far
    assert UNKNOWN_CHAR not in generate_text(model, "Мороз", 30, generator=torch.Generator().manual_seed(0))
    assert generate_text(model, "Мороз", 3, top_k=1, allow_unknown=True) == "Мороз" + UNKNOWN_CHAR * 3
    save(model, tmp_path / "m.safetensors")  # the record travels with a saved model
    main([str(tmp_path / "m.safetensors"), "--prompt", "Мороз", "--length", "30"])
    assert UNKNOWN_CHAR not in capsys.readouterr().out
    main([str(tmp_path / "m.safetensors"), "--prompt", "Мороз", "--length", "3", "--temperature", "0",
          "--allow-unknown"])
    assert capsys.readouterr().out == "Мороз" + UNKNOWN_CHAR * 3 + "\n"


def test_exclude_is_checked_where_it_is_called():
    model = word_model(("<eos>", "<unk>", "the", "cat"), unknown=0)
    assert set(model.generate(torch.tensor([2]), 20, exclude=[0, 1, 3]).tolist()) == {2}  # only "the" is left
    for bad, said in (([7], r"exclude holds ids outside \[0, 4\)"), (["x"], "exclude must be token ids"),
                      ([0, 1, 2, 3], "exclude holds every id the model could draw")):
        with pytest.raises(ValueError, match=said):
            model.generate(torch.tensor([2]), 3, exclude=bad)
