"""Bad input gets a clear error and loses nothing: one group per kind of mistake
(the corpus cache and the text8 download's leftovers are tested in test_data.py; a used --out and a
killed run's leftovers in test_run_folder.py)."""
from __future__ import annotations

import os
import random
import warnings

import pytest
import torch

from txl_minimal.checkpoint import load_checkpoint, save, save_checkpoint
from txl_minimal.evaluate import evaluate, main as evaluate_main, sliding_window_eval
from txl_minimal.train import TrainConfig, main as train_main, train

from tiny import TINY_SET, cli_error, synthetic_corpus, tiny_cfg, tiny_train_cfg


# 1. booleans given as strings ---------------------------------------------------------------

def test_boolean_strings_are_parsed_by_set_and_refused_by_the_configs(tmp_path, capsys, tiny_config,
                                                                      tiny_model):
    train_main(["--out", str(tmp_path), "--max-steps", "1", "--no-progress", "--set", *TINY_SET,
                "adaptive_span=FALSE", "tie_weights=no", "same_length=Yes", "compile=0", "eval_same_length=none"])
    ckpt = load_checkpoint(tmp_path / "ckpt.pt")
    assert (ckpt["model_config"]["adaptive_span"], ckpt["model_config"]["tie_weights"],
            ckpt["model_config"]["same_length"]) == (False, False, True)
    assert ckpt["train_config"]["compile"] is False and ckpt["train_config"]["eval_same_length"] is None
    err = cli_error(train_main, ["--out", str(tmp_path / "b"), "--set", "adaptive_span=maybe"], capsys)
    assert "adaptive_span is true or false (also yes/no, 1/0)" in err
    assert not (tmp_path / "b").exists()

    with pytest.raises(ValueError, match="tie_weights must be True or False, got 'no'"):
        tiny_config(tie_weights="no")
    model = tiny_model()
    with pytest.raises(ValueError, match="same_length must be True or False, got 'yes'"):
        model.set_lengths(same_length="yes")
    assert model.cfg.same_length is False
    for field in ("compile", "eval_same_length"):
        with pytest.raises(ValueError, match=f"TrainConfig.{field} must be True or False, .*got 'no'"):
            TrainConfig(**{field: "no"})


# 2. TrainConfig is validated ------------------------------------------------------------------

@pytest.mark.parametrize("field,value", [
    ("eval_interval", 0), ("log_interval", 0), ("batch_size", 0), ("lr", 0), ("lr", float("nan")),
    ("max_steps", 0), ("max_steps", -5), ("max_steps", "abc"), ("max_steps", 2.5), ("eval_batch_size", -1),
    ("eval_tokens", 0), ("warmup_steps", -1), ("grad_clip", 0.0), ("min_lr", -1e-4), ("eval_mem_len", -1),
    ("amp", "fp8"), ("corpus", "text9"), ("device", "gpu"), ("out", 3)])
def test_bad_train_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"TrainConfig.{field} must be"):
        TrainConfig(**{field: value})


def test_train_config_checks_lr_floor_device_and_changes_after_construction(tmp_path):
    with pytest.raises(ValueError, match=r"min_lr \(0.01\) must not exceed lr"):
        TrainConfig(lr=1e-3, min_lr=1e-2)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="TrainConfig.device is 'cuda'.*Fix"):
            TrainConfig(device="cuda")
    cfg = tiny_train_cfg(tmp_path / "run")
    cfg.eval_interval = 0  # set after the config was made: train() checks again, before writing
    with pytest.raises(ValueError, match="eval_interval"):
        train(tiny_cfg(), cfg, synthetic_corpus("abc def "), progress=False)
    with pytest.raises(ValueError, match="stop_at"):
        train(tiny_cfg(), tiny_train_cfg(tmp_path / "run"), synthetic_corpus("abc def "), stop_at=0)
    assert not (tmp_path / "run").exists()
    assert TrainConfig(out=tmp_path).out == str(tmp_path)  # a Path is kept as text (checkpoints load it)


@pytest.mark.parametrize("argv, message", [
    (["--set", "eval_interval=0"], "TrainConfig.eval_interval must be an integer >= 1, got 0"),
    (["--set", "log_interval=0"], "TrainConfig.log_interval must be"),
    (["--set", "lr=0"], "TrainConfig.lr must be a number > 0, got 0"),
    (["--set", "max_steps=abc"], "TrainConfig.max_steps must be an integer >= 1, got 'abc'"),
    (["--set", "eval_batch_size=-1"], "TrainConfig.eval_batch_size must be"),
    (["--max-steps", "-5"], "argument --max-steps: must be an integer >= 1, got '-5'"),
    (["--batch-size", "0"], "argument --batch-size: must be an integer >= 1"),
    (["--set", "lr"], "--set expects KEY=VALUE"),
])
def test_train_cli_turns_bad_settings_into_a_usage_error(tmp_path, capsys, argv, message):
    err = cli_error(train_main, ["--out", str(tmp_path / "run"), "--no-progress", *argv], capsys)
    assert message in err and "Traceback" not in err and err.startswith("usage: python -m txl_minimal.train")
    assert not (tmp_path / "run").exists()  # refused before anything was written


# 3. damaged checkpoints ------------------------------------------------------------------------

@pytest.fixture
def tiny_checkpoint(tmp_path, tiny_model):
    """A checkpoint of a tiny float32 model, as txl_minimal.save writes it."""
    path = tmp_path / "model.pt"
    save(tiny_model(dtype=torch.float32), path)
    return path


@pytest.mark.parametrize("damage", ["truncated", "random bytes", "empty", "no model_config", "no model",
                                    "a list", "one bit flipped"])
def test_damaged_checkpoint_is_refused_with_what_to_do(tiny_checkpoint, damage):
    raw = tiny_checkpoint.read_bytes()
    ckpt = torch.load(tiny_checkpoint, weights_only=True)
    if damage == "truncated":
        tiny_checkpoint.write_bytes(raw[: len(raw) // 2])
    elif damage == "random bytes":
        tiny_checkpoint.write_bytes(os.urandom(1000))
    elif damage == "empty":
        tiny_checkpoint.write_bytes(b"")
    elif damage.startswith("no "):
        del ckpt[damage[3:]]
        torch.save(ckpt, tiny_checkpoint)
    elif damage == "a list":
        torch.save([ckpt], tiny_checkpoint)
    else:  # a bit of one weight flipped on disk: torch.load itself does not notice
        where = raw.find(ckpt["model"]["out_bias"].numpy().tobytes())
        assert where > 0
        tiny_checkpoint.write_bytes(raw[:where] + bytes([raw[where] ^ 1]) + raw[where + 1:])
    with pytest.raises(ValueError, match=f"checkpoint {tiny_checkpoint} is corrupt or incomplete.*Fix") as err:
        load_checkpoint(tiny_checkpoint)
    assert "weights_only=False" not in str(err.value)
    if damage == "one bit flipped":
        assert "do not match the SHA-256" in str(err.value)


def test_any_random_bytes_are_refused_as_corrupt(tmp_path):
    # random bytes fail in many places inside torch.load (seen: UnicodeDecodeError, IndexError,
    # KeyError, UnpicklingError); every one must become the same clear error
    rng = random.Random(0)
    for k in range(200):
        path = tmp_path / f"junk{k}.pt"
        path.write_bytes(bytes(rng.getrandbits(8) for _ in range(1000)))
        with pytest.raises(ValueError, match=f"checkpoint {path} is corrupt or incomplete.*Fix"):
            load_checkpoint(path)


def test_checkpoint_without_checksum_loads_with_a_warning(tiny_checkpoint):
    ckpt = torch.load(tiny_checkpoint, weights_only=True)
    del ckpt["model_sha256"]
    torch.save(ckpt, tiny_checkpoint)  # as written before checksums existed
    with pytest.warns(UserWarning, match="has no checksum.*re-save it.*--update-json"):
        ckpt = load_checkpoint(tiny_checkpoint)
    save_checkpoint(ckpt, tiny_checkpoint)  # the fix the warning names
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_checkpoint(tiny_checkpoint)["model_sha256"]


def test_evaluate_cli_fails_on_a_damaged_checkpoint_or_nan_weights(tiny_checkpoint, capsys):
    ckpt = torch.load(tiny_checkpoint, weights_only=True)
    argv = [str(tiny_checkpoint), "--corpus", "text8-mini", "--max-predictions", "20", "--no-progress"]
    weights = dict(ckpt["model"],
                   out_bias=ckpt["model"]["out_bias"].clone().index_fill_(0, torch.tensor([3]), float("nan")))
    save_checkpoint(dict(ckpt, model=weights), tiny_checkpoint)  # a diverged run (checksums match)
    err = cli_error(evaluate_main, argv, capsys)  # refused before a bpc nan is computed
    assert "NaN or inf in weights out_bias (1 of 27 values)" in err and "Traceback" not in err
    save_checkpoint(dict(ckpt, model=dict(ckpt["model"], out_bias=ckpt["model"]["out_bias"] + float("inf"))),
                    tiny_checkpoint)
    with pytest.raises(ValueError, match="NaN or inf in weights out_bias"):
        load_checkpoint(tiny_checkpoint)
    tiny_checkpoint.write_bytes(b"")
    assert "is corrupt or incomplete" in cli_error(evaluate_main, argv, capsys)


# 4. non-positive counts -------------------------------------------------------------------------

@pytest.mark.parametrize("call, name", [
    (lambda m, ids: evaluate(m, ids, max_tokens=-5), "max_tokens"),  # used to score a wrong count
    (lambda m, ids: evaluate(m, ids, max_tokens=0), "max_tokens"),
    (lambda m, ids: evaluate(m, ids, batch_size=-1), "batch_size"),
    (lambda m, ids: sliding_window_eval(m, ids, 8, max_predictions=-5), "max_predictions"),
    (lambda m, ids: sliding_window_eval(m, ids, 8, batch_size=0), "batch_size"),
    (lambda m, ids: sliding_window_eval(m, ids, 0), "context"),
])
def test_evaluation_counts_must_be_positive(tiny_model, call, name):
    with pytest.raises(ValueError, match=f"{name} must be a positive integer"):
        call(tiny_model(), torch.randint(0, 27, (40,)))


@pytest.mark.parametrize("flag, value", [("--max-predictions", "-5"), ("--batch-size", "-1"),
                                         ("--sliding-window", "0"), ("--mem-len", "-1")])
def test_evaluate_cli_rejects_non_positive_counts(capsys, flag, value):
    err = cli_error(evaluate_main, ["txl", flag, value, "--no-progress"], capsys)
    assert f"argument {flag}: must be an integer >=" in err


# 5. memory that does not fit the model ----------------------------------------------------------

def test_mems_of_another_size_dtype_or_device_are_named(tiny_model):
    model = tiny_model(dtype=torch.float32)
    x = torch.randint(0, 27, (2, 6))
    mems = model(x).mems
    other = tiny_model(d_model=32, d_head=16, dtype=torch.float32)(x).mems
    cases = {r"mems\[0\] \(2, 6, 32\)": other, r"mems\[0\] \(2, 6, 16\) torch.float64": [m.double() for m in mems],
             "on meta": [m.to("meta") for m in mems], r"mems\[0\] None": [None, None], "got 1,": mems[:1]}
    for got, bad in cases.items():
        with pytest.raises(ValueError, match=f"mems must be a previous out.mems: n_layer=2 tensors "
                                             f"\\(batch=2, mlen, d_model=16\\) torch.float32 on cpu.*{got}.*Fix"):
            model(x, bad)
    with pytest.raises(ValueError, match="batch=1"):
        model(x[:1], mems)
    assert model(x, mems).logits.shape == (2, 6, 27)  # the right memory still works


# 6. float ids, and generate's mode after an error -----------------------------------------------

def test_float_ids_are_refused_and_generate_restores_the_mode(tiny_model):
    model = tiny_model()
    x = torch.randint(0, 27, (2, 6))
    with pytest.raises(ValueError, match="targets must be an integer tensor.*float"):
        model(x, targets=x.float() + 0.7)  # used to be truncated to x silently
    with pytest.raises(ValueError, match="prompt must hold at least one integer token id"):
        model.generate(torch.tensor([1.5, 2.0]), 3)
    with pytest.raises(ValueError, match="n_new must be an integer"):
        model.generate(x, 2.5)
    model.train()
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 26\]"):
        model.generate(torch.tensor([3, 30]), 3)  # raises inside generate's read of the prompt
    assert model.training and model.cfg.tgt_len == 6
