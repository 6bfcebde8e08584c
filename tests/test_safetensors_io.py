"""The shipped weights as safetensors: the format's reader and writer (txl_minimal/safetensors_io.py)
against a file the ``safetensors`` package wrote, every damage named, checkpoints saved and loaded
without pickle, and the shipped files themselves: safetensors, holding the weights shipped before."""
from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
import torch

import txl_minimal
from tiny import ROOT
from txl_minimal import load_pretrained
from txl_minimal.checkpoint import CHECKSUM, NAMES, PRETRAINED_DIR, load_checkpoint, save_checkpoint, weights_sha256
from txl_minimal.evaluate import main as evaluate_main
from txl_minimal.safetensors_io import SafetensorsError, from_bytes, load_file, save_file, to_bytes
from txl_minimal.tasks import load_recall_model

# Written by safetensors 0.8.0 (pip install safetensors==0.8.0) with
#   safetensors.torch.save_file(golden(), GOLDEN, metadata=GOLDEN_METADATA)
GOLDEN = Path(__file__).with_name("data") / "written_by_safetensors_0.8.0.safetensors"
GOLDEN_METADATA = {"config": '{"d_model": 16}'}


def golden() -> dict[str, torch.Tensor]:
    """Every dtype the reader knows, a 0-d and an empty tensor: the content of GOLDEN."""
    return {"f64": torch.arange(6, dtype=torch.float64).reshape(2, 3) / 3,
            "f32": torch.arange(4, dtype=torch.float32) - 1.5,
            "f16": torch.tensor([0.1, -2.0, 65504.0], dtype=torch.float16),
            "bf16": torch.tensor([1.0, -0.5], dtype=torch.bfloat16),
            "i64": torch.tensor([-(2 ** 40), 7]), "i32": torch.tensor([[1, -2]], dtype=torch.int32),
            "i16": torch.tensor([-3], dtype=torch.int16), "i8": torch.tensor([-128, 127], dtype=torch.int8),
            "u8": torch.tensor([0, 255], dtype=torch.uint8), "bool": torch.tensor([True, False, True]),
            "scalar": torch.tensor(2.5), "empty": torch.zeros(0, 3)}


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Equal names, dtypes, shapes and values."""
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
                                        and torch.equal(a[k], b[k]) for k in a)


# 1. the format ------------------------------------------------------------------------------------

def test_reads_a_file_the_safetensors_package_wrote():
    tensors, metadata = load_file(GOLDEN)
    assert same(tensors, golden()) and metadata == GOLDEN_METADATA


def test_writes_the_bytes_the_safetensors_package_writes(tmp_path):
    """Same layout: compact JSON header padded to 8 bytes, tensors by falling dtype size, then name."""
    assert to_bytes(golden(), GOLDEN_METADATA) == GOLDEN.read_bytes()
    save_file(golden(), tmp_path / "mine.safetensors", GOLDEN_METADATA)
    assert (tmp_path / "mine.safetensors").read_bytes() == GOLDEN.read_bytes()


def test_round_trip_of_views_devices_and_metadata(tmp_path):
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    tensors = {"transposed": base.t(), "column": base[:, 1], "big": torch.randn(300, 7, dtype=torch.float64)}
    metadata = {"config": json.dumps({"name": "é", "cutoffs": [1, 2]}), "note": "line\nbreak"}
    back, meta = from_bytes(to_bytes(tensors, metadata))
    assert same(back, {k: v.contiguous() for k, v in tensors.items()}) and meta == metadata
    assert all(t.is_contiguous() for t in back.values())
    with pytest.raises(TypeError, match="metadata maps str to str"):
        to_bytes(tensors, {"step": 5})
    with pytest.raises(TypeError, match="is torch.complex64"):
        to_bytes({"z": torch.zeros(2, dtype=torch.complex64)})


def damaged(how: str) -> bytes:
    """GOLDEN's bytes, damaged one way (the header rewritten where the damage is in it)."""
    raw = GOLDEN.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])

    def rewrite(edit) -> bytes:
        edit(header)
        text = json.dumps(header).encode()
        return struct.pack("<Q", len(text)) + text + raw[8 + n:]
    return {
        "empty": lambda: b"",
        "cut in the length": lambda: raw[:5],
        "truncated": lambda: raw[: len(raw) - 3],
        "cut in the header": lambda: raw[:100],
        "longer": lambda: raw + b"\0",
        "random bytes": lambda: bytes(range(256)) * 3,
        "header not JSON": lambda: struct.pack("<Q", 4) + b"{abc" + raw[8 + n:],
        "header a list": lambda: struct.pack("<Q", 2) + b"[]",
        "unknown dtype": lambda: rewrite(lambda h: h["f32"].update(dtype="F8_E4M3")),
        "wrong size": lambda: rewrite(lambda h: h["f32"].update(shape=[5])),
        "a gap": lambda: rewrite(lambda h: h.pop("u8")),
        "negative shape": lambda: rewrite(lambda h: h["i8"].update(shape=[-2])),
        "an extra field": lambda: rewrite(lambda h: h["i8"].update(offset=3)),
        "metadata not strings": lambda: rewrite(lambda h: h["__metadata__"].update(step=5)),
    }[how]()


@pytest.mark.parametrize("how, message", [
    ("empty", "0 bytes, shorter than the 8-byte header length"),
    ("cut in the length", "5 bytes, shorter than"),
    ("truncated", "the header describes 111 bytes of tensors, the file holds 108"),
    ("cut in the header", "its header length says 752 bytes, the file has 92 after it"),
    ("longer", "the header describes 111 bytes of tensors, the file holds 112"),
    ("random bytes", "its header length says"),
    ("header not JSON", "its header is not JSON"),
    ("header a list", "its header is a JSON list, not an object"),
    ("unknown dtype", "tensor f32 has dtype 'F8_E4M3'; this reader knows BOOL, U8"),
    ("wrong size", r"tensor f32 \(F32 \[5\]\) needs 20 bytes, its offsets \[\d+, \d+\] give 16"),
    ("a gap", "starts at byte"),
    ("negative shape", "expected lists of non-negative integers"),
    ("an extra field", "header entry 'i8' is not"),
    ("metadata not strings", "its __metadata__ is not a map of strings to strings"),
])
def test_every_damage_is_one_clear_error(how, message):
    with pytest.raises(SafetensorsError, match=message):
        from_bytes(damaged(how))


def test_the_safetensors_package_reads_what_this_writes_and_the_shipped_files(tmp_path):
    """Other tools read the shipped files: the safetensors package itself (where installed)."""
    st = pytest.importorskip("safetensors.torch")
    from safetensors import safe_open
    save_file(golden(), tmp_path / "mine.safetensors", GOLDEN_METADATA)
    assert same(st.load_file(tmp_path / "mine.safetensors"), golden())
    for path in [*PRETRAINED_DIR.glob("*.safetensors"), *ROOT.glob("results/*/*.safetensors")]:
        ours, metadata = load_file(path)
        assert same(st.load_file(path), ours), path
        with safe_open(str(path), "pt") as f:
            assert f.metadata() == metadata
    assert same(from_bytes(st.save(golden(), metadata=GOLDEN_METADATA))[0], golden())


# 2. checkpoints as safetensors ------------------------------------------------------------------

def test_save_and_load_a_model_as_safetensors(tmp_path, tiny_model, capsys, monkeypatch):
    monkeypatch.delenv("TXL_CORPUS", raising=False)
    model = tiny_model(dtype=torch.float32, cutoffs=[10], div_val=2, tie_projs=[False, True])
    path = tmp_path / "mine.safetensors"
    txl_minimal.save(model, path)
    tensors, metadata = load_file(path)
    assert json.loads(metadata["model_config"]) == model.cfg.to_dict()
    assert json.loads(metadata[CHECKSUM]) == weights_sha256(model.state_dict())
    back = txl_minimal.load(path)
    assert back.cfg == model.cfg and same(back.state_dict(), model.state_dict())
    x = torch.randint(0, 27, (1, 6))
    assert torch.equal(back(x).logits, model(x).logits)
    evaluate_main([str(path), "--corpus", "text8-mini", "--max-predictions", "20", "--no-progress"])
    assert "on text8-mini valid: bpc" in capsys.readouterr().out


def test_a_training_checkpoint_is_not_saved_as_safetensors(tmp_path):
    state = dict(model={"w": torch.ones(2)}, model_config={}, optimizer={"state": {0: {"exp_avg": torch.ones(2)}}})
    with pytest.raises(ValueError, match="its entry 'optimizer' is not plain JSON.*Fix: save a training "
                                         "checkpoint .* as a .pt file"):
        save_checkpoint(state, tmp_path / "ckpt.safetensors")
    with pytest.raises(ValueError, match="no 'model' entry"):
        save_checkpoint({"step": 1}, tmp_path / "ckpt.safetensors")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("edit", ["a weight", "the config", "the step", "damaged bytes"])
def test_an_edited_or_damaged_safetensors_checkpoint_is_refused(tmp_path, tiny_model, edit):
    """Its checksums cover the metadata too: a file edited outside this package is refused."""
    path = tmp_path / "model.safetensors"
    txl_minimal.save(tiny_model(dtype=torch.float32), path)
    tensors, metadata = load_file(path)
    if edit == "a weight":
        tensors["out_bias"][0] += 1e-3
    elif edit == "the config":
        metadata["model_config"] = metadata["model_config"].replace('"mem_len": 6', '"mem_len": 7')
    elif edit == "the step":
        metadata["step"] = "5"
    if edit == "damaged bytes":
        path.write_bytes(path.read_bytes()[:-10])
    else:
        save_file(tensors, path, metadata)
    expected = {"a weight": "its weights do not match the SHA-256", "the step": "its content",
                "the config": "its content", "damaged bytes": "bytes; safetensors: SafetensorsError"}[edit]
    with pytest.raises(ValueError, match=f"checkpoint {re.escape(str(path))} is corrupt or incomplete "
                                         f".*{expected}.*Fix"):
        load_checkpoint(path)


# 3. the shipped files ----------------------------------------------------------------------------

# weights_sha256 of each file's weights as they were shipped in torch pickles (.pt) until
# these safetensors replaced them: the same names, dtypes (float32; float16 for results/),
# shapes and bits, so every number the notebooks print is unchanged.
WEIGHTS_BEFORE = {
    "txl": "6c8063efc8e9f1ddd7a451bf8e844b58492dd90e808f699dd67ed1ad71961f76",
    "vanilla": "a38ed15a937253ae8fbd4fa8f88868de525bf6f967168755abc9234f70232710",
    "txl-tiny": "5555b4db9615643920270a0965a1e1940e977ac0a5d8102f182dc67b154e8b55",
    "vanilla-tiny": "96d41dbf81c1ccd6d0898c33ad3b1057338e38b20ed4dab62278c6d6c7ec5044",
    "results/long_range/lstm": "9bc9a0141e23103d0c0a7261fd960bc6234d5784aefc3c1fc1512305f6e7f375",
    "results/long_range/vanilla": "5ee9058ecd89988876d98ebc37025e410b3cd926035fab1d5f65ef60d7852e90",
    "results/long_range/xl": "008a4e72e95c2d9c57d453d28a8d4390c2eca7e4c07ce4d8e125d00cb1f18cd1",
    "results/lstm_text/lstm": "a952b7db783a365f6761f4385518187410302b957150c0adc2a5877741dc9216",
    "results/word_level/txl": "efbb59d3357e69ad276fc61cae989a7fb8f0f79ee56c5e5d99969dd322ad5b4d",
    "results/word_level/vanilla": "d7f38f04771ab50a3739c1f728748519c313477d070df57df783da2d2c547e2c",
}


def test_no_pickle_ships():
    """Every weight file of the package and of results/ is safetensors; none is a torch pickle."""
    assert not list(PRETRAINED_DIR.glob("*.pt")) and not list(ROOT.glob("results/**/*.pt"))
    shipped = {p.stem for p in PRETRAINED_DIR.glob("*.safetensors")}
    results = {str(p.relative_to(ROOT).with_suffix("")) for p in ROOT.glob("results/*/*.safetensors")}
    assert shipped == set(NAMES) and shipped | results == set(WEIGHTS_BEFORE) | set(OWN_TEXT_WEIGHTS)


# notebook 09's seed-0 models (scripts/own_text.py), rounded to float16 as scored in results/own_text/results.json
# and results/memory_by_position.json (the seed-1 models are scored there, not shipped: the clone stays small)
OWN_TEXT_WEIGHTS = {
    "results/own_text/code-m0": "529d2da179f8ccb0aec5e413ad2020ab61c51a88b0338fa9554302cfe47c4b98",
    "results/own_text/code-m64": "b39f8d2d30e0ce33c9015eff263b6165c556bb2c2296091fd4b958b78570f790",
    "results/own_text/text8-m0": "1336e117d8a0039f1f5347fabc13adc9fe3180b4f41f66b780971e5b1802d19d",
    "results/own_text/text8-m64": "8d2e592f7e32e1d647549a0c857ac1b6ad631269e090593876ec6ce38b694866",
}


@pytest.mark.parametrize("name", OWN_TEXT_WEIGHTS)
def test_own_text_weights_are_float16_with_their_checksum_and_vocabulary(name):
    tensors, _ = load_file(ROOT / f"{name}.safetensors")
    assert weights_sha256(tensors) == OWN_TEXT_WEIGHTS[name] and {t.dtype for t in tensors.values()} == {torch.float16}
    state = load_checkpoint(ROOT / f"{name}.safetensors")
    vocab = state["vocab"]
    assert state[CHECKSUM] == OWN_TEXT_WEIGHTS[name] and len(vocab["symbols"]) == state["model_config"]["vocab_size"]


@pytest.mark.parametrize("name", NAMES)
def test_shipped_models_hold_the_weights_shipped_before_and_their_configs(name):
    path = PRETRAINED_DIR / f"{name}.safetensors"
    tensors, metadata = load_file(path)
    assert weights_sha256(tensors) == WEIGHTS_BEFORE[name] and {t.dtype for t in tensors.values()} == {torch.float32}
    summary = json.loads((PRETRAINED_DIR / f"{name}.json").read_text())
    assert json.loads(metadata["model_config"]) == summary["model_config"]
    assert json.loads(metadata["train_config"]) == summary["train_config"]
    assert json.loads(metadata["step"]) == summary["step"] == 5000
    assert load_checkpoint(path)[CHECKSUM] == WEIGHTS_BEFORE[name]


@pytest.mark.parametrize("name", [n for n in WEIGHTS_BEFORE if n.startswith("results/")])
def test_result_weights_are_float16_as_before(name):
    path = ROOT / f"{name}.safetensors"
    tensors, metadata = load_file(path)
    assert weights_sha256(tensors) == WEIGHTS_BEFORE[name] and {t.dtype for t in tensors.values()} == {torch.float16}
    model = load_recall_model(path)
    assert json.loads(metadata["kind"]) == ("lstm" if name.endswith("lstm") else model.cfg.attn_type)


def test_load_pretrained_runs_no_unpickler(monkeypatch):
    """The shipped models load without torch.load, so without pickle."""
    def no_pickle(*args, **kwargs):
        raise AssertionError("torch.load called")
    monkeypatch.setattr(torch, "load", no_pickle)
    model = load_pretrained("txl-tiny")
    assert weights_sha256(model.state_dict()) == WEIGHTS_BEFORE["txl-tiny"]
