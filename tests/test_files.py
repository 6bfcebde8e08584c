"""Every file the package ships, caches or writes is checked before use: each kind, damaged
four ways (truncated, empty, random bytes, wrong content), gets one error naming the file,
what is wrong and how to get a good copy; never a traceback from inside gzip, numpy or torch.
Then the training run's own files: the full-state checksum (bit flips); the --out lock, Ctrl-C
and resume are test_run_folder.py's."""
from __future__ import annotations

import gzip
import io
import json
import os
import random
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tiny import DAMAGES, ROOT, cli_error, damage, synthetic_corpus, tiny_cfg, tiny_train_cfg
from txl_minimal import checkpoint, corpora, data, pretrained
from txl_minimal.checkpoint import _feed, load_checkpoint, load_official_state_dict, official_state_dict, state_sha256
from txl_minimal.data import CorpusError, load_text8, load_text8_mini
from txl_minimal.evaluate import main as evaluate_main
from txl_minimal.train import LOCK, main as train_main, preset, train
from txl_minimal.tutorial.ablation import load_results
from txl_minimal.utils import MANIFEST, file_sha256, shipped_fix

SHIPPED = {ROOT / "txl_minimal" / "pretrained": ("*.safetensors", "*.json", "*.csv"),
           ROOT / "txl_minimal" / "corpus": ("*.gz",)}
# 1. the manifests of the shipped files -----------------------------------------------------------

@pytest.mark.parametrize("folder", sorted(SHIPPED), ids=lambda p: p.name)
def test_manifest_lists_every_shipped_file_with_its_size_and_sha256(folder):
    manifest = json.loads((folder / MANIFEST).read_text())
    files = sorted(p.name for pattern in SHIPPED[folder] for p in folder.glob(pattern) if p.name != MANIFEST)
    assert sorted(manifest) == files
    for name, entry in manifest.items():
        assert entry == dict(bytes=(folder / name).stat().st_size, sha256=file_sha256(folder / name)), name


def test_the_manifests_ship_with_the_package():
    text = (ROOT / "pyproject.toml").read_text()
    assert '"pretrained/*"' in text and '"corpus/MANIFEST.json"' in text


def test_fix_for_a_shipped_file_names_git_checkout_and_reinstall():
    fix = shipped_fix(pretrained.PRETRAINED_DIR / "txl-tiny.safetensors")
    assert "git checkout -- txl_minimal/pretrained/txl-tiny.safetensors" in fix
    assert "pip install --force-reinstall" in fix


# 2. each kind of file, damaged four ways ----------------------------------------------------------

@pytest.fixture
def shipped_copy(tmp_path, monkeypatch):
    """The shipped models' folder copied (txl-tiny, vanilla-tiny, the JSONs, the manifest) and used."""
    folder = tmp_path / "pretrained"
    folder.mkdir()
    for name in ("txl-tiny.safetensors", "vanilla-tiny.safetensors", "txl-tiny.json", "table.json", MANIFEST):
        shutil.copy(pretrained.PRETRAINED_DIR / name, folder / name)
    monkeypatch.setattr(pretrained, "PRETRAINED_DIR", folder)
    monkeypatch.setattr(checkpoint, "PRETRAINED_DIR", folder)
    return folder


@pytest.mark.parametrize("manifest", [True, False], ids=["with manifest", "manifest removed"])
@pytest.mark.parametrize("how", DAMAGES)
def test_shipped_corpus(tmp_path, how, manifest):
    path = tmp_path / "text8-mini.txt.gz"
    shutil.copy(data.MINI_PATH, path)
    if manifest:
        shutil.copy(data.MINI_PATH.with_name(MANIFEST), tmp_path / MANIFEST)
    damage(path, how, gzip.compress(b"Hello, World! " * 100))
    expected = {"truncated": "truncated" if manifest else "not a complete gzip file",
                "empty": "empty" if manifest else "holds only 0 characters",
                "random bytes": "wrong content" if manifest else "not a complete gzip file",
                "wrong content": "truncated" if manifest else "does not hold text8-style text"}[how]
    with pytest.raises(CorpusError, match=f"{re.escape(str(path))} .*{expected}.*Fix") as err:
        load_text8_mini(path)
    assert err.value.__context__ is None or err.value.__suppress_context__  # no gzip traceback above it


@pytest.mark.parametrize("how", DAMAGES)
def test_shipped_model(shipped_copy, capsys, how):
    path = shipped_copy / "txl-tiny.safetensors"
    damage(path, how, (shipped_copy / "vanilla-tiny.safetensors").read_bytes())
    expected = {"truncated": "truncated: 1,723,702 bytes, shipped with 3,447,404", "empty": "empty: 0 bytes",
                "random bytes": "wrong content: SHA-256", "wrong content": "truncated: 3,183,692 bytes"}[how]
    with pytest.raises(ValueError, match=f"{re.escape(str(path))} is damaged \\({expected}.*reinstall"):
        pretrained.load_pretrained("txl-tiny")
    err = cli_error(evaluate_main, ["txl-tiny", "--max-predictions", "5", "--no-progress"], capsys)
    assert expected in err and "Traceback" not in err
    (shipped_copy / MANIFEST).unlink()  # without the manifest the loader's own checks remain
    if how == "wrong content":  # another model of the same kind: only the manifest can tell
        assert pretrained.load_pretrained("txl-tiny").cfg.attn_type == "abs"
    else:
        with pytest.raises(ValueError, match=f"checkpoint {re.escape(str(path))} is corrupt or incomplete.*Fix"):
            pretrained.load_pretrained("txl-tiny")


@pytest.mark.parametrize("how", DAMAGES)
def test_shipped_summary_json(shipped_copy, how):
    path = shipped_copy / "txl-tiny.json"
    assert pretrained.pretrained_summary("txl-tiny")["name"] == "txl-tiny"
    damage(path, how, (shipped_copy / "table.json").read_bytes())
    with pytest.raises(ValueError, match=f"{re.escape(str(path))} is damaged.*Fix"):
        pretrained.pretrained_summary("txl-tiny")
    (shipped_copy / MANIFEST).unlink()
    expected = {"truncated": "not valid JSON, truncated or edited", "empty": "empty",
                "random bytes": "not text", "wrong content": "not the summary of 'txl-tiny'"}[how]
    with pytest.raises(ValueError, match=f"{re.escape(str(path))} is damaged.*{expected}.*Fix"):
        pretrained.pretrained_summary("txl-tiny")


def fake_text8(folder: Path) -> tuple[data.Text8Source, bytes]:
    """A small random text8 zipped as text8.zip in ``folder``, and a Text8Source that expects it."""
    import hashlib
    text = data.decode(np.random.default_rng(0).integers(0, 27, 20_000)).encode()
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / "text8.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("text8", text)
    return data.Text8Source(url="http://localhost/text8.zip", zip_bytes=0,
                            zip_sha256=hashlib.sha256((folder / "text8.zip").read_bytes()).hexdigest(),
                            text_bytes=len(text), text_md5=hashlib.md5(text).hexdigest()), text


def no_network(*args, **kwargs):
    raise AssertionError("no download expected")


@pytest.mark.parametrize("how", DAMAGES)
def test_text8_cache(tmp_path, how):
    src, text = fake_text8(tmp_path)
    good = load_text8(tmp_path, source=src, opener=no_network, progress=False).valid.copy()
    path = tmp_path / "text8.valid.npy"
    other = io.BytesIO()
    np.save(other, np.roll(good, 1))  # the right shape and dtype, other ids
    damage(path, how, other.getvalue())
    expected = "do not hold text8" if how == "wrong content" else "truncated or corrupt"
    with pytest.warns(UserWarning, match=f"{re.escape(str(path)) if how != 'wrong content' else 'text8.valid.npy'}"
                                         f".*{expected}.*rebuilding the text8 cache"):
        corpus = load_text8(tmp_path, source=src, opener=no_network, progress=False)
    assert np.array_equal(corpus.valid, good)  # rebuilt from text8.zip, which is kept


@pytest.mark.parametrize("how", DAMAGES)
def test_text8_zip(tmp_path, how):
    src, _ = fake_text8(tmp_path)
    path = tmp_path / "text8.zip"
    other = io.BytesIO()
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("text8", b"abc " * 100)
    damage(path, how, other.getvalue())
    expected = "does not hold text8" if how == "wrong content" else "is not a valid zip"
    with pytest.raises(CorpusError, match=f"{re.escape(str(path))} {expected}.*Fix: delete or replace"):
        load_text8(tmp_path, source=src, opener=no_network, progress=False)
    assert path.exists()  # the user's file is named, never deleted


def test_text8_zip_with_a_damaged_deflate_stream(tmp_path):
    src, text = fake_text8(tmp_path)
    raw = bytearray((tmp_path / "text8.zip").read_bytes())
    raw[100:140] = bytes(40)  # inside the compressed member: zlib fails, not the zip index
    (tmp_path / "text8.zip").write_bytes(bytes(raw))
    with pytest.raises(CorpusError, match="text8.zip is not a valid zip.*Fix"):
        load_text8(tmp_path, source=src, opener=no_network, progress=False)


@pytest.mark.parametrize("how", DAMAGES)
def test_training_checkpoint(run_dir, tmp_path, capsys, how):
    out = tmp_path / "run"
    shutil.copytree(run_dir, out)
    path = out / "ckpt.pt"
    ckpt = torch.load(path, weights_only=True)
    for state in ckpt["optimizer"]["state"].values():  # an edit torch.load cannot notice
        state["exp_avg"][0] = float("nan")
    edited = io.BytesIO()
    torch.save(ckpt, edited)
    damage(path, how, edited.getvalue())
    expected = "does not match the SHA-256" if how == "wrong content" else "bytes; torch.load"
    with pytest.raises(ValueError,
                       match=f"checkpoint {re.escape(str(path))} is corrupt or incomplete.*{expected}.*Fix"):
        load_checkpoint(path)
    err = cli_error(evaluate_main, [str(out), "--last", "--corpus", "text8-mini", "--no-progress"], capsys)
    assert "is corrupt or incomplete" in err and "Traceback" not in err
    before = path.read_bytes()
    with pytest.raises(ValueError, match="is corrupt or incomplete"):
        train(tiny_cfg(), tiny_train_cfg(out, max_steps=9, eval_interval=3), synthetic_corpus("the cat sat "),
              resume=True, progress=False)
    assert path.read_bytes() == before and not (out / LOCK).exists()  # nothing lost, no lock left


@pytest.mark.parametrize("how", DAMAGES)
def test_results_json(tmp_path, how):
    path = tmp_path / "results.json"
    shutil.copy(ROOT / "results" / "ablation" / "results.json", path)
    damage(path, how, (ROOT / "results" / "long_range.json").read_bytes())
    expected = {"truncated": "not valid JSON", "empty": "empty", "random bytes": "not text",
                "wrong content": "not an ablation's results"}[how]
    with pytest.raises(ValueError, match=f"{re.escape(str(path))} is damaged.*{expected}.*Fix: git checkout"):
        load_results(path)


# 3. the training checkpoint's checksum covers everything a resume uses ----------------------------

def test_every_single_bit_flip_is_refused_or_harmless(run_dir):
    """Flip one bit at 400 places spread over a training checkpoint: each copy is refused, or
    loads to exactly the original content (a flip in bytes torch.load does not read)."""
    raw = (run_dir / "ckpt.pt").read_bytes()

    def digest(state: dict) -> str:  # everything, the checksums included
        import hashlib
        h = hashlib.sha256()
        _feed(h, state)
        return h.hexdigest()

    original = digest(torch.load(run_dir / "ckpt.pt", weights_only=True))
    rng = random.Random(0)
    places = sorted({*range(0, len(raw), len(raw) // 200), *(rng.randrange(len(raw)) for _ in range(200))})
    refused = harmless = 0
    path = run_dir.parent / "flipped.pt"
    for i in places:
        path.write_bytes(raw[:i] + bytes([raw[i] ^ (1 << rng.randrange(8))]) + raw[i + 1:])
        try:
            loaded = load_checkpoint(path)
        except ValueError as e:
            assert "is corrupt or incomplete" in str(e) and "Fix" in str(e)
            refused += 1
        else:
            assert digest(loaded) == original, f"a flip at byte {i} changed what a resume reads"
            harmless += 1
    assert refused + harmless == len(places) >= 380 and refused > len(places) // 2
    print(f"{len(places)} flips: {refused} refused, {harmless} harmless")


def test_state_checksum_covers_optimizer_memory_rng_and_steps(run_dir):
    ckpt = torch.load(run_dir / "ckpt.pt", weights_only=True)
    assert ckpt["format"] == 2 and ckpt["state_sha256"] == state_sha256(ckpt)
    edits = {"optimizer": lambda c: c["optimizer"]["state"][0]["exp_avg"].add_(1e-7),
             "memory": lambda c: c["mems"][1].view(-1)[5].add_(1e-7),
             "rng": lambda c: c["rng"][0]["python"]["state"].__setitem__(3, c["rng"][0]["python"]["state"][3] ^ 1),
             "step": lambda c: c.__setitem__("step", c["step"] + 1),
             "data position": lambda c: c["data"].__setitem__("segment", 0),
             "scheduler": lambda c: c["scheduler"].__setitem__("last_epoch", 0),
             "config": lambda c: c["train_config"].__setitem__("lr", 0.1),
             "checksum removed": lambda c: c.pop("state_sha256")}
    for edit in edits.values():
        c = torch.load(run_dir / "ckpt.pt", weights_only=True)
        edit(c)
        path = run_dir.parent / "edited.pt"
        torch.save(c, path)
        with pytest.raises(ValueError, match="corrupt or incomplete"):
            load_checkpoint(path)


# 4. the authors' weights, and the memory as one tensor ---------------------------------------------

def test_official_state_dict_with_nan_or_a_wrong_shape_is_refused(tiny_model):
    model = tiny_model(dtype=torch.float32)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    sd = official_state_dict(model)
    bad = dict(sd, **{"layers.0.dec_attn.qkv_net.weight": sd["layers.0.dec_attn.qkv_net.weight"] * float("nan")})
    with pytest.raises(ValueError, match=r"NaN or inf in official state dict tensor layers.0.dec_attn.qkv_net.weight"):
        load_official_state_dict(model, bad)
    bad = dict(sd, **{"crit.out_layers.0.bias": torch.zeros(30)})
    with pytest.raises(ValueError, match=r"crit.out_layers.0.bias has shape \(30,\), this model expects \(27,\)"):
        load_official_state_dict(model, bad)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # nothing half-loaded
    load_official_state_dict(model, sd)


def test_stacked_memory_gets_a_clear_error(tiny_model):
    model = tiny_model()
    x = torch.randint(0, 27, (2, 6))
    out = model(x)
    with pytest.raises(ValueError,
                       match=r"mems must be the list out.mems.*\(2, 2, 6, 16\).*not torch.stack\(out.mems\)"):
        model(x, torch.stack(out.mems))


# 5. kept right: each gets a test -----------------------------------------------------------------

def test_unknown_preset_is_refused(capsys):
    with pytest.raises(ValueError, match="unknown preset 'cpu-huge'; choose one of"):
        preset("cpu-huge")
    assert "invalid choice: 'cpu-huge'" in cli_error(train_main, ["--preset", "cpu-huge"], capsys)


def test_evaluating_a_folder_a_text_file_or_a_malicious_pickle(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    err = cli_error(evaluate_main, [str(tmp_path / "empty"), "--no-progress"], capsys)
    assert "no model at" in err and "Fix" in err
    (tmp_path / "notes.txt").write_text("not a model\n")
    err = cli_error(evaluate_main, [str(tmp_path / "notes.txt"), "--no-progress"], capsys)
    # (it used to be called "corrupt or incomplete": a text file is no damaged checkpoint)
    assert "notes.txt is a text file (it begins 'not a model\\n'), not a checkpoint" in err and "Traceback" not in err
    assert "corrupt" not in err and "--corpus FILE" in err

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {tmp_path / 'pwned'}",))

    torch.save({"model": Evil(), "model_config": {}}, tmp_path / "evil.pt")
    err = cli_error(evaluate_main, [str(tmp_path / "evil.pt"), "--no-progress"], capsys)
    assert "evil.pt is corrupt or incomplete" in err and "weights_only=False" not in err
    assert not (tmp_path / "pwned").exists()  # refused, not executed


def test_text8_dir_with_home_unset_and_data_dir_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(corpora, "REPO_DATA", tmp_path / "site-packages" / "data")  # as an installed package
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("HOME", raising=False)
    assert data.text8_dir().name == "text8"  # the password database's home, no KeyError
    monkeypatch.setenv("TXL_DATA_DIR", str(tmp_path / "missing"))
    monkeypatch.delenv("TXL_CORPUS", raising=False)  # (make test sets it to text8-mini, which would win)
    with pytest.raises(CorpusError, match=f"text8 not found in {re.escape(str(tmp_path / 'missing'))}.*Fix"):
        data.load_corpus("text8", download=False)


def test_shipping_a_run_records_it_in_the_manifest(run_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(pretrained, "PRETRAINED_DIR", tmp_path / "package")
    monkeypatch.setattr(checkpoint, "PRETRAINED_DIR", tmp_path / "package")
    path = pretrained.export_pretrained(run_dir, "txl")
    manifest = json.loads((tmp_path / "package" / MANIFEST).read_text())
    assert manifest["txl.safetensors"] == dict(bytes=path.stat().st_size, sha256=file_sha256(path))
    assert set(manifest) == {"txl.safetensors", "txl.log.csv"}
    assert pretrained.load_pretrained("txl").cfg.d_model == 16  # loads against its new entry


def test_a_damaged_manifest_is_named(shipped_copy):
    (shipped_copy / MANIFEST).write_text('{"txl-tiny.safetensors": {"bytes": 3')
    with pytest.raises(ValueError, match=f"{re.escape(str(shipped_copy / MANIFEST))} is damaged.*not valid JSON"):
        pretrained.load_pretrained("txl-tiny")


@pytest.mark.parametrize("how", [*DAMAGES, "NaN weights"])
def test_recall_model(tmp_path, how):
    """The long-range task's models that notebooks 03 and 06 load (results/long_range, results/lstm_text)."""
    from txl_minimal.tasks import load_recall_model
    from txl_minimal.safetensors_io import load_file, save_file
    path = tmp_path / "xl.safetensors"
    shutil.copy(ROOT / "results" / "long_range" / "xl.safetensors", path)
    if how == "NaN weights":
        weights, metadata = load_file(path)
        weights["out_bias"] = weights["out_bias"] * float("nan")
        save_file(weights, path, metadata)
    else:
        damage(path, how, (ROOT / "results" / "long_range" / "lstm.safetensors").read_bytes()[:-1])
    expected = "NaN or inf in weights out_bias" if how == "NaN weights" else "not a recall model"
    with pytest.raises(ValueError, match=f"{re.escape(str(path))} is damaged.*{expected}.*Fix: git checkout"):
        load_recall_model(path)
    assert load_recall_model(ROOT / "results" / "long_range" / "lstm.safetensors").training is False


# -- issue 41: which of a file and its manifest entry is damaged; files that are not what they seem ------

def _edit_entry(folder: Path, name: str, edit) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    edit(manifest[name])
    (folder / MANIFEST).write_text(json.dumps(manifest))


def _one_digit_off(sha: str) -> str:
    return sha[:9] + ("0" if sha[9] != "0" else "1") + sha[10:]


ENTRY_EDITS = {"key renamed": lambda e: e.update(byte=e.pop("bytes")), "number as text":
               lambda e: e.update(bytes=str(e["bytes"])), "size digit": lambda e: e.update(bytes=e["bytes"] + 10),
               "sha256 digit": lambda e: e.update(sha256=_one_digit_off(e["sha256"]))}


@pytest.mark.parametrize("how", ENTRY_EDITS)
def test_a_damaged_manifest_entry_names_the_manifest_not_the_weights(shipped_copy, how):
    _edit_entry(shipped_copy, "txl-tiny.safetensors", ENTRY_EDITS[how])
    with pytest.raises(ValueError, match=f"{re.escape(str(shipped_copy / MANIFEST))} is damaged.*Fix") as err:
        pretrained.load_pretrained("txl-tiny")  # was KeyError: 'bytes', a TypeError, or the weights blamed
    assert "txl-tiny.safetensors is damaged" not in str(err.value)


def test_the_weights_are_still_blamed_when_they_are_the_damaged_ones(shipped_copy):
    path = shipped_copy / "txl-tiny.safetensors"
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 1  # one bit of a weight: the same size, a wholly different SHA-256
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=f"{re.escape(str(path))} is damaged \\(wrong content"):
        pretrained.load_pretrained("txl-tiny")


@pytest.mark.parametrize("how", ENTRY_EDITS)
def test_a_damaged_corpus_manifest_entry_is_a_corpus_error_naming_it(tmp_path, how):
    shutil.copy(data.MINI_PATH, tmp_path / data.MINI_PATH.name)
    shutil.copy(data.MINI_PATH.with_name(MANIFEST), tmp_path / MANIFEST)
    _edit_entry(tmp_path, data.MINI_PATH.name, ENTRY_EDITS[how])
    with pytest.raises(CorpusError, match=f"{re.escape(str(tmp_path / MANIFEST))} is damaged"):
        load_text8_mini(tmp_path / data.MINI_PATH.name)


@pytest.mark.parametrize("where", ["TXL_DATA_DIR", "data_dir"])
def test_a_data_folder_that_is_a_file_says_so(tmp_path, monkeypatch, where):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    if where == "TXL_DATA_DIR":
        monkeypatch.setenv("TXL_DATA_DIR", str(notes))
    kwargs = {"data_dir": notes} if where == "data_dir" else {}
    for name in ("text8", "wt2", "enwik8"):  # enwik8 used to try a download into it: "File exists"
        with pytest.raises(CorpusError, match=f"{where}=.*notes.txt.* is a file, not a folder.*Fix: .*{where}") as e:
            data.load_corpus(name, **kwargs)
        assert "File exists" not in str(e.value)
    assert notes.read_text() == "mine"


def test_a_pickled_whole_model_is_named_with_how_to_save(tmp_path, capsys, tiny_model):
    torch.save(tiny_model(dtype=torch.float32), tmp_path / "whole.pt")
    with pytest.raises(ValueError, match=r"whole.pt holds a whole pickled model \(torch.save\(model\).*Fix: save the "
                                         r"model with txl_minimal.save\(model, path\)") as e:
        checkpoint.load(tmp_path / "whole.pt")
    assert "corrupt" not in str(e.value)
    err = cli_error(evaluate_main, [str(tmp_path / "whole.pt"), "--no-progress"], capsys)
    assert "holds a whole pickled model" in err and "Traceback" not in err


def test_saving_onto_a_folder_and_loading_a_run_as_pretrained(tmp_path, run_dir, tiny_model):
    from txl_minimal.utils import WriteError
    folder = tmp_path / "mine"
    folder.mkdir()
    with pytest.raises(WriteError, match=f"cannot write {re.escape(str(folder))}: it is a folder. Fix: name a "
                                         f"file, e.g. {re.escape(str(folder / 'model.pt'))}"):
        checkpoint.save(tiny_model(), folder)  # was IsADirectoryError naming a temporary file
    assert [p.name for p in tmp_path.iterdir()] == ["mine"] and not any(folder.iterdir())  # nothing left behind
    with pytest.raises(ValueError, match=r"unknown pretrained model .*Fix: .*txl_minimal.load\(path\)"):
        pretrained.load_pretrained(str(run_dir))
    assert checkpoint.load(run_dir).cfg.d_model == 16  # what the message points at works

