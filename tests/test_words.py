"""Word-level data: the authors' Vocab, text8-mini as words, the WikiText download/cache path
(a small fake WikiText zip served from tmp_path or fed through an opener, never the network)
and word ids through LMOrderedIterator and evaluate."""

import hashlib
import io
import re
import zipfile
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from txl_minimal.data import (SPLITS, WIKITEXT, CorpusError, LMOrderedIterator, decode,
                              load_corpus, load_text8_mini, load_text8_mini_words, load_wikitext, word_stats)
from txl_minimal.words import Vocab, coverage


pytestmark = pytest.mark.usefixtures("no_network")  # (tests/conftest.py: file:// URLs only)


# ---------------------------------------------------------------- Vocab


def test_vocab_orders_as_the_authors():
    """Specials first, then by falling count, ties in first-seen order; min_freq and max_size cut."""
    lines = ["b a c a", "c a d", ""]
    v = Vocab(special=["<eos>"], add_eos=True)
    v.count_lines(lines)
    v.build_vocab()
    assert v.idx2sym == ["<eos>", "a", "c", "b", "d"]  # a:3, <eos>:3 (special, first), c:2, b then d: 1 each
    assert v.encode_lines(["a d", ""]).tolist() == [1, 4, 0, 0]  # one <eos> per line, empty lines too
    v = Vocab(special=["<unk>"], min_freq=2)
    v.count_lines(lines)
    v.build_vocab()
    assert v.idx2sym == ["<unk>", "a", "c"] and v.encode_lines(["b a zz"]).tolist() == [0, 1, 0]
    v = Vocab(special=["<unk>"], max_size=1)
    v.count_lines(lines)
    v.build_vocab()
    assert v.idx2sym == ["<unk>", "a"]
    assert coverage(v, v.encode_lines(["a b a c"])) == 0.5


def test_word_outside_a_vocab_without_unk_is_named():
    v = Vocab(special=["<eos>"])
    v.count_lines(["a b"])
    v.build_vocab()
    with pytest.raises(KeyError, match="'zebra' is not in the vocabulary.*<unk>"):
        v.encode_lines(["a zebra"])


def test_encode_lines_chunks_agree_with_one_list():
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in rng.integers(0, 50, 3 * (1 << 20) // 2)]  # more than one 2^20 chunk
    v = Vocab(special=["<unk>"])
    v.count_lines([" ".join(words)])
    v.build_vocab()
    ids = v.encode_lines([" ".join(words[:1000]), " ".join(words[1000:])])
    assert ids.dtype == np.int32 and ids.tolist() == [v.sym2idx[w] for w in words]


# ---------------------------------------------------------------- text8-mini-words


def test_text8_mini_words_is_the_char_corpus_split_into_words():
    c = load_corpus("text8-mini-words")
    chars = load_text8_mini()
    assert c.unit == "word" and c.name == "text8-mini-words" and c.vocab_size == 10_001
    assert c.vocab[0] == "<unk>" and c.vocab[1:4] == ("the", "of", "and")
    for ids, char_ids in zip((c.train, c.valid, c.test), (chars.train, chars.valid, chars.test)):
        words = decode(char_ids).split()  # the same split as the characters
        assert ids.dtype == np.int32 and len(ids) == len(words)
        vocab = set(c.vocab)
        kept = np.array([w in vocab for w in words])
        assert np.array_equal(ids == 0, ~kept)  # <unk> exactly for the words left out
        assert [c.vocab[i] for i in ids[kept][:50]] == [w for w in words if w in vocab][:50]
    counts = Counter(decode(chars.train).split())
    assert set(c.vocab[1:]) == {w for w, _ in counts.most_common(10_000)}  # top 10,000 of train
    stats = word_stats(c)
    n = sum(s["words"] for s in stats.values())
    assert 500_000 < n < 520_000 and 0.06 < stats["train"]["unk"] < 0.08


def test_word_ids_through_the_iterator_and_evaluate():
    """LMOrderedIterator and evaluate take int32 word ids unchanged."""
    from txl_minimal import TXLConfig, TransformerXL
    from txl_minimal.evaluate import evaluate
    c = load_text8_mini_words(max_size=300)
    data = c.valid[:2003]
    it = LMOrderedIterator(data, 4, 50, evaluation=True)
    ys = torch.cat([y for _, y in it], dim=1)
    assert ys.dtype == torch.long and torch.equal(ys, torch.as_tensor(data[:2000].astype(np.int64)).view(4, -1)[:, 1:])
    torch.manual_seed(0)
    model = TransformerXL(TXLConfig(vocab_size=c.vocab_size, n_layer=1, n_head=2, d_model=32, d_head=16,
                                    d_inner=64, tgt_len=16, mem_len=16, dropout=0.0)).eval()
    r = evaluate(model, data, max_tokens=200)
    assert r["tokens"] == 200 and r["ppl"] == pytest.approx(np.exp(r["loss"]))
    assert abs(np.log(r["ppl"]) - np.log(c.vocab_size)) < 1.0  # untrained: near uniform


# ---------------------------------------------------------------- WikiText download and cache


def fake_wikitext(tmp_path: Path, name: str = "wt2"):
    """A tiny archive laid out as wikitext-2-v1.zip, and a source that expects it."""
    real = WIKITEXT[name]
    text = {"train": " = Valkyria = \n\n the game <unk> began in 2010 . \n the game is a game \n",
            "valid": " the <unk> game \n\n", "test": " = began = \n in 2010 the game \n"}
    zpath = tmp_path / "server" / real.zip_name
    zpath.parent.mkdir()
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as zf:
        for split, member in zip(SPLITS, real.members):  # {folder}/wiki.{split}.tokens
            zf.writestr(member, text[split])
    raw = zpath.read_bytes()
    src = replace(real, url=zpath.as_uri(), zip_md5=hashlib.md5(raw).hexdigest(),
                  zip_sha256=hashlib.sha256(raw).hexdigest())
    return src, zpath, text


def never_called(url, timeout=None):
    raise AssertionError("must not download again")


def names(d: Path) -> set[str]:
    return {p.name for p in d.iterdir()} if d.exists() else set()


def test_wikitext_download_vocab_cache_and_no_second_fetch(tmp_path):
    src, _, text = fake_wikitext(tmp_path)
    d = tmp_path / "data"
    c = load_wikitext("wt2", d, source=src, progress=False)
    assert c.unit == "word" and c.name == "wt2"
    # the authors' Vocab(special=['<eos>']): <eos> first, then train words by count, first seen first
    assert c.vocab == ("<eos>", "game", "=", "the", "Valkyria", "<unk>", "began", "in", "2010", ".", "is", "a")
    assert names(d) == {"wikitext-2-v1.zip", "wt2.train.npy", "wt2.valid.npy", "wt2.test.npy", "wt2.vocab.txt"}
    for split in SPLITS:  # one <eos> per line, blank lines included
        expected = [w for line in text[split].splitlines() for w in line.split() + ["<eos>"]]
        assert [c.vocab[i] for i in getattr(c, split)] == expected
    again = load_wikitext("wt2", d, source=src, opener=never_called)
    assert isinstance(again.train, np.memmap) and again.vocab == c.vocab
    for p in d.glob("*.npy"):  # cache gone, the zip still there: rebuilt without fetching
        p.unlink()
    assert np.array_equal(load_wikitext("wt2", d, source=src, opener=never_called).test, c.test)


def test_wikitext_through_an_injected_opener(tmp_path):
    src, zpath, _ = fake_wikitext(tmp_path, "wt103")
    seen = []

    class Response(io.BytesIO):
        headers = {"Content-Length": str(zpath.stat().st_size)}

    def opener(url, timeout):
        seen.append(url)
        return Response(zpath.read_bytes())

    c = load_wikitext("wt103", tmp_path / "data", source=replace(src, url="https://example.org/w.zip"),
                      opener=opener, progress=False)
    assert seen == ["https://example.org/w.zip"] and c.name == "wt103" and len(c.valid) == 5


@pytest.mark.parametrize("corrupt", ["checksum", "truncated", "html"])
def test_bad_wikitext_download_raises_and_leaves_nothing(tmp_path, corrupt):
    src, zpath, _ = fake_wikitext(tmp_path)
    if corrupt == "checksum":
        src = replace(src, zip_md5="0" * 32)
    elif corrupt == "truncated":
        zpath.write_bytes(zpath.read_bytes()[:-100])
    else:
        zpath.write_bytes(b"<!DOCTYPE html><html><body>403 Forbidden</body></html>")
    d = tmp_path / "data"
    with pytest.raises(CorpusError, match="is not wikitext-2-v1.zip: expected MD5") as e:
        load_wikitext("wt2", d, source=src, progress=False)
    msg = str(e.value)
    assert "text8-mini-words" in msg and str(d) in msg and "delete or replace" not in msg
    assert ("HTML page" in msg) == (corrupt == "html")
    assert names(d) == set()  # no zip, no .part, no cache


def test_bad_hand_placed_wikitext_zip_says_to_remove_it(tmp_path):
    src, zpath, _ = fake_wikitext(tmp_path)
    d = tmp_path / "data"
    d.mkdir()
    (d / src.zip_name).write_bytes(zpath.read_bytes()[:-10])
    with pytest.raises(CorpusError, match=f"delete or replace {re.escape(str(d / src.zip_name))},"):
        load_wikitext("wt2", d, source=src, opener=never_called)
    assert names(d) == {src.zip_name}  # the user's file is not deleted for them


def test_sha256_mismatch_only_warns(tmp_path):
    src, _, _ = fake_wikitext(tmp_path)
    with pytest.warns(UserWarning, match="SHA-256"):
        c = load_wikitext("wt2", tmp_path / "data", source=replace(src, zip_sha256="f" * 64), progress=False)
    assert len(c.test) == 9


def test_truncated_word_cache_is_named_and_rebuilt(tmp_path):
    src, _, _ = fake_wikitext(tmp_path)
    d = tmp_path / "data"
    good = np.array(load_wikitext("wt2", d, source=src, progress=False).train)
    bad = d / "wt2.train.npy"
    bad.write_bytes(bad.read_bytes()[:-8])
    with pytest.warns(UserWarning, match=f"{re.escape(str(bad))} is truncated or corrupt.*rebuilding"):
        assert np.array_equal(load_wikitext("wt2", d, source=src, opener=never_called).train, good)


def test_wikitext_names_in_load_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path))
    with pytest.raises(CorpusError, match="wikitext-103-v1.zip not found.*download=False"):
        load_corpus("wt103", download=False)
    with pytest.raises(CorpusError, match="wikitext-2-v1.zip not found"):
        load_corpus("wt2", download=False)
    with pytest.raises(ValueError, match="'text8-mini-words', 'wt103', 'wt2'"):
        load_corpus("wt3")
    assert WIKITEXT["wt103"].url.endswith("/wikitext-103-v1.zip") and len(WIKITEXT["wt103"].zip_md5) == 32


# ---------------------------------------------------------------- reporting: ppl for words, bpc for characters


def test_train_and_evaluate_clis_report_perplexity_on_words(tmp_path, capsys):
    """The training lines, the final line and `python -m txl_minimal.evaluate` say ppl on words;
    a character model on a word corpus is refused with the fix."""
    from txl_minimal.evaluate import main as evaluate_main
    from txl_minimal.train import main as train_main
    out = tmp_path / "run"
    train_main(["--corpus", "text8-mini-words", "--max-steps", "2", "--out", str(out), "--no-progress", "--set",
                "vocab_size=10001", "d_model=16", "d_head=8", "d_inner=32", "eval_tokens=64", "eval_interval=2"])
    printed = capsys.readouterr().out
    lines = re.findall(r"^step 2: train ppl (\d+\.\d+), valid ppl (\d+\.\d+)", printed, re.M)
    assert len(lines) == 2 and "bpc" not in printed  # the evaluation line and the final one
    assert 1000 < float(lines[0][1]) < 30_000  # two steps: near uniform over 10,001 words
    evaluate_main([str(out), "--max-predictions", "50", "--no-progress"])
    printed = capsys.readouterr().out
    assert re.search(r"on text8-mini-words valid: ppl \d+\.\d{4} over 50 predictions", printed), printed
    with pytest.raises(SystemExit):
        train_main(["--corpus", "text8-mini-words", "--max-steps", "1", "--out", str(tmp_path / "x"),
                    "--no-progress"])
    assert "vocab_size is 27 but text8-mini-words has 10,001 symbols. Fix: --set vocab_size=10001" \
        in capsys.readouterr().err


def test_training_with_cutoffs_has_a_loss_equal_to_the_full_softmax():
    """In train mode the adaptive softmax's per-target NLL gives out.loss (it was None), equal to
    the cross-entropy of the full log-probabilities that eval mode returns."""
    from txl_minimal import TXLConfig, TransformerXL
    torch.manual_seed(0)
    model = TransformerXL(TXLConfig(vocab_size=50, n_layer=1, n_head=2, d_model=16, d_head=8, d_inner=32,
                                    tgt_len=8, mem_len=8, dropout=0.0, cutoffs=[10, 30], div_val=2))
    x, y = torch.randint(0, 50, (2, 8)), torch.randint(0, 50, (2, 8))
    out = model.train()(x, targets=y)
    out.loss.backward()
    full = model.eval()(x, targets=y)
    assert out.logits is None and torch.allclose(out.loss, full.loss, atol=1e-6)
    assert all(p.grad is not None for p in model.crit.parameters())


def test_a_tied_adaptive_model_is_stored_once_and_loads_back(tmp_path):
    """save_recall_model stores a tied weight once (the shipped word pair: half the file);
    load_recall_model ties it again, and a file missing an untied weight is refused."""
    from txl_minimal import TXLConfig, TransformerXL
    from txl_minimal.tasks import load_recall_model, round_to_float16, save_recall_model
    torch.manual_seed(0)
    model = round_to_float16(TransformerXL(TXLConfig(vocab_size=300, n_layer=1, n_head=2, d_model=16, d_head=8,
                                                     d_inner=32, tgt_len=8, mem_len=8, cutoffs=[50, 100])).eval())
    from txl_minimal.safetensors_io import load_file, save_file
    save_recall_model(model, tmp_path / "m.safetensors")
    stored, metadata = load_file(tmp_path / "m.safetensors")
    assert "word_emb.emb_layers.0.weight" in stored and "crit.out_layers.0.weight" not in stored
    back = load_recall_model(tmp_path / "m.safetensors")
    x = torch.randint(0, 300, (1, 8))
    assert torch.equal(back(x).logits, model(x).logits)
    assert back.crit.out_layers[0].weight is back.word_emb.emb_layers[0].weight  # tied again
    del stored["crit.out_layers.0.bias"]
    save_file(stored, tmp_path / "bad.safetensors", metadata)
    with pytest.raises(ValueError, match=r"missing \['crit.out_layers.0.bias'\].*Fix"):
        load_recall_model(tmp_path / "bad.safetensors")
