"""Bad input gets a clear error and loses nothing: one group per kind of mistake
(the corpus cache and the text8 download's leftovers are tested in test_data.py; a used --out and a
killed run's leftovers in test_run_folder.py)."""
from __future__ import annotations

import dataclasses
import os
import random
import re
import warnings

import numpy as np
import pytest
import torch

from txl_minimal.checkpoint import load, load_checkpoint, save, save_checkpoint
from txl_minimal.evaluate import evaluate, main as evaluate_main, read_segments, sliding_window_eval
from txl_minimal.model import TransformerXL, TXLConfig
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


# 7. lengths a model would ignore (issue 41) -----------------------------------------------------

@pytest.mark.parametrize("attn_type", ["abs", "abs_far", "shaw"])
def test_clamp_len_is_refused_where_the_attention_has_no_sinusoid_distances(tiny_model, attn_type):
    model = tiny_model(attn_type=attn_type)
    ids = torch.randint(0, 27, (30,))
    calls = {"set_lengths": lambda: model.set_lengths(clamp_len=5),
             "lengths": lambda: model.lengths(clamp_len=5).__enter__(),
             "read_segments": lambda: list(read_segments(model, ids[None], clamp_len=5)),
             "evaluate": lambda: evaluate(model, ids, clamp_len=5),
             "model.cfg": lambda: setattr(model, "cfg", dataclasses.replace(model.cfg, clamp_len=5))}
    for name, call in calls.items():
        with pytest.raises(ValueError, match=f"clamp_len=5 has no effect on attn_type '{attn_type}'.*Fix"):
            call()
        assert model.cfg.clamp_len == 0 and not model.training, name
    assert evaluate(model, ids, clamp_len=0)["bpc"] > 0  # "no clamp" is what it does: accepted
    rel = tiny_model()
    assert evaluate(rel, ids, clamp_len=2)["bpc"] != evaluate(rel, ids)["bpc"]  # where it matters it is used


def test_same_length_is_refused_without_memory(tiny_model):
    model = tiny_model(mem_len=0)
    ids = torch.randint(0, 27, (30,))
    for call in (lambda: model.set_lengths(same_length=True), lambda: evaluate(model, ids, same_length=True),
                 lambda: evaluate(tiny_model(), ids, mem_len=0, same_length=True)):
        with pytest.raises(ValueError, match="same_length=True has no effect at mem_len 0.*Fix"):
            call()
    assert evaluate(model, ids, mem_len=4, same_length=True)["settings"]["same_length"] is True  # with memory: used


def test_the_evaluate_cli_refuses_a_length_the_model_ignores_and_notes_its_own(tmp_path, capsys, tiny_config):
    argv = ["--corpus", "text8-mini", "--max-predictions", "30", "--no-progress"]
    err = cli_error(evaluate_main, ["vanilla-tiny", "--clamp-len", "5", *argv], capsys)
    assert "clamp_len=5 has no effect on attn_type 'abs'" in err and "Traceback" not in err
    err = cli_error(evaluate_main, ["vanilla-tiny", "--same-length", *argv], capsys)
    assert "same_length=True has no effect at mem_len 0" in err
    save(TransformerXL(tiny_config(attn_type="abs", clamp_len=5)), tmp_path / "old.pt")  # built so, before the checks
    evaluate_main([str(tmp_path / "old.pt"), *argv])
    assert "clamp_len=5 (no effect on attn_type 'abs')" in capsys.readouterr().out


def test_training_refuses_eval_lengths_the_model_ignores_before_writing(tmp_path, capsys):
    err = cli_error(train_main, ["--preset", "paper-base", "--out", str(tmp_path / "run"), "--no-progress",
                                 "--max-steps", "1", "--batch-size", "2", "--set", *TINY_SET, "n_layer=1",
                                 "tgt_len=8", "attn_type=abs", "mem_len=0", "corpus=text8-mini"], capsys)
    assert "TrainConfig.eval_clamp_len=820 has no effect on attn_type 'abs'" in err  # was refused mid-run
    with pytest.raises(ValueError, match="TXLConfig.clamp_len=3 has no effect on attn_type 'shaw'"):
        train(tiny_cfg(attn_type="shaw", clamp_len=3), tiny_train_cfg(tmp_path / "run"), synthetic_corpus("ab "),
              progress=False)
    assert not (tmp_path / "run").exists()


# 8. a built model's config changed directly --------------------------------------------------------

def test_a_model_cfg_is_frozen_and_a_new_one_may_change_only_its_lengths(tiny_model, tmp_path):
    model = tiny_model()
    x = torch.randint(0, 27, (1, 61))
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.cfg.mem_len = -3  # the memory used to grow 61 -> 122 -> 183 tokens
    with pytest.raises(ValueError, match="TXLConfig.mem_len must be an integer >= 0, got -3"):
        model.cfg = dataclasses.replace(model.cfg, mem_len=-3)
    assert model.cfg.mem_len == 6
    mems = None
    for _ in range(3):
        mems = model(x, mems).mems
    assert mems[0].shape[1] == 6
    model.cfg = dataclasses.replace(model.cfg, mem_len=10)  # a valid length works as set_lengths(mem_len=10) does
    assert model(x, mems).mems[0].shape[1] == 10
    assert all(layer.dec_attn.cfg is model.cfg for layer in model.layers)  # the layers read the same lengths
    for field, value in (("n_layer", 1), ("d_model", 32), ("dropout", 0.3), ("attn_type", "abs")):
        with pytest.raises(ValueError, match=f"model.cfg.{field} is fixed once the model is built.*Fix"):
            model.cfg = dataclasses.replace(model.cfg, **{field: value})  # was accepted: 4 layers ran on
    with pytest.raises(ValueError, match="model.cfg must be a TXLConfig, got dict"):
        model.cfg = model.cfg.to_dict()
    assert len(model.layers) == model.cfg.n_layer == 2 and model.cfg.mem_len == 10
    save(model, tmp_path / "m.pt")  # what save writes, load reads back (a replaced config made it unloadable)
    assert load(tmp_path / "m.pt").cfg == model.cfg
    cfg = tiny_cfg()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_layer = 1  # a plain config is frozen too: dataclasses.replace makes a changed copy


# 9. lengths and counts at 0, negative and huge --------------------------------------------------------

@pytest.mark.parametrize("kwargs, said", [
    (dict(first_len=-5), "read_segments: first_len must be a positive integer, got -5"),  # was "invalid storage offset"
    (dict(first_len=0), "read_segments: first_len must be a positive integer, got 0"),  # was silently tgt_len
    (dict(first_len=2.5), "first_len must be a positive integer, got 2.5"),
    (dict(attn_last=-1), "read_segments: attn_last must be an integer >= 0, got -1"),
    (dict(tgt_len=0), "tgt_len must be an integer >= 1, got 0"),
    (dict(mem_len=-1), "mem_len must be an integer >= 0, got -1"),
    (dict(clamp_len=-1), "clamp_len must be an integer >= 0, got -1"),
])
def test_read_segments_counts(tiny_model, kwargs, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        list(read_segments(tiny_model(), torch.randint(0, 27, (1, 30)), **kwargs))


@pytest.mark.parametrize("kwargs, said", [
    (dict(mem_len=-1), "evaluate: mem_len must be an integer >= 0, got -1"),
    (dict(clamp_len=-2), "evaluate: clamp_len must be an integer >= 0, got -2"),
    (dict(tgt_len=-1), "evaluate: tgt_len must be a positive integer, got -1"),
    (dict(batch_size=0), "evaluate: batch_size must be a positive integer, got 0"),
])
def test_evaluate_counts_zero_or_negative(tiny_model, kwargs, said):
    with pytest.raises(ValueError, match=re.escape(said)):
        evaluate(tiny_model(), torch.randint(0, 27, (30,)), **kwargs)


def test_huge_lengths_and_batches_are_capped_and_said(tiny_model, capsys):
    model = tiny_model()
    ids = torch.randint(0, 27, (41,))
    plain = evaluate(model, ids, tgt_len=40, mem_len=40)
    huge = evaluate(model, ids, tgt_len=10 ** 6, mem_len=10 ** 9, max_tokens=10 ** 12)
    assert huge["bpc"] == pytest.approx(plain["bpc"], rel=1e-12) and huge["tokens"] == 40
    assert (huge["settings"]["tgt_len"], huge["settings"]["mem_len"]) == (40, 40)
    assert huge["capped"] == {"tgt_len": (10 ** 6, "a column holds 40 tokens"),
                              "mem_len": (10 ** 9, "a column holds 40 tokens")}
    wide = evaluate(model, ids, batch_size=10 ** 8)
    assert wide["settings"]["batch_size"] == 40 and wide["capped"]["batch_size"][0] == 10 ** 8  # was printed as asked
    assert evaluate(model, ids)["capped"] == {}  # the model's own lengths fit: nothing said
    window = sliding_window_eval(model, ids, 10 ** 6, batch_size=10 ** 9)
    assert window["settings"]["context"] == 40 and window["capped"]["context"][0] == 10 ** 6
    assert window["bpc"] == pytest.approx(plain["bpc"], rel=1e-9)
    argv = ["vanilla-tiny", "--tgt-len", "1000000", "--batch-size", "100000000", "--max-predictions", "50",
            "--no-progress"]
    evaluate_main(argv)
    out = capsys.readouterr().out
    assert "tgt_len=1 (capped from 1,000,000: a column holds 1 token)" in out
    assert "batch_size=50 (capped from 100,000,000: one column per prediction at most, and there are 50)" in out


def _allocation_fails(*args, **kwargs):
    raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
                       "you tried to allocate 23437500000 bytes. Error code 12 (Cannot allocate memory)")


def test_an_allocation_failure_names_the_length_to_lower(tiny_model, monkeypatch):
    model = tiny_model()
    ids = torch.randint(0, 27, (80,))
    monkeypatch.setattr(model, "segment", _allocation_fails)  # no 23 GB allocated: the failure it gives
    monkeypatch.setattr(model, "forward", _allocation_fails)
    segments = "tgt_len=50.*GB.*the allocation failed. Fix: a smaller tgt_len \\(this model's own is 6\\)"
    window = "windows of 50 tokens.*GB.*the allocation failed. Fix: a shorter context \\(--sliding-window C"
    for caller, call, said in (("evaluate", lambda: evaluate(model, ids, tgt_len=50), segments),
                               ("read_segments", lambda: list(read_segments(model, ids[None], tgt_len=50)), segments),
                               ("sliding_window_eval", lambda: sliding_window_eval(model, ids, 50), window)):
        with pytest.raises(ValueError, match=f"{caller}.*{said}") as e:
            call()
        assert e.value.__cause__ is None and e.value.__suppress_context__  # torch's traceback not chained on
    monkeypatch.setattr(model, "segment", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("another bug")))
    with pytest.raises(RuntimeError, match="another bug"):  # only an allocation failure is reworded
        evaluate(model, ids)


def test_a_segment_larger_than_the_machine_is_refused_before_it_runs(tiny_model, monkeypatch):
    from txl_minimal import segments
    model = tiny_model()
    monkeypatch.setattr(segments, "device_memory", lambda device: 10_000)  # bytes; 40 x 40 x 2 heads: 12,800
    with monkeypatch.context() as patch:
        patch.setattr(model, "segment", lambda *a, **k: pytest.fail("ran the segment"))
        with pytest.raises(ValueError, match=r"evaluate: segments of tgt_len=40 with mem_len=6 in 1 column\(s\) need "
                                             r"0.0 GB .*this machine has 0.0 GB in all. Fix: a smaller tgt_len"):
            evaluate(model, torch.randint(0, 27, (41,)), tgt_len=40)
    assert evaluate(model, torch.randint(0, 27, (41,)), tgt_len=4, mem_len=0)["tokens"] == 40  # 4 x 4 x 2 heads fits


# 10. token ids as lists, arrays, other dtypes and devices ----------------------------------------------

def test_token_ids_in_a_list_tuple_or_array_are_read_as_a_tensor(tiny_model):
    model = tiny_model()
    ids = [[1, 2, 3, 4]]
    want = model(torch.tensor(ids), targets=torch.tensor(ids))
    for form in (ids, tuple(map(tuple, ids)), np.array(ids), torch.tensor(ids, dtype=torch.int8)):
        got = model(form, targets=form)  # was AttributeError: 'list' object has no attribute 'dim'
        assert torch.equal(got.logits, want.logits) and torch.equal(got.nll, want.nll)
    assert [s for s, _ in read_segments(model, ids)] == [0]
    assert model.generate(np.array([1, 2]), 2).shape == (4,)


@pytest.mark.parametrize("bad, said", [
    ("abc", "tokens must be token ids, not text.*Fix: encode it"),
    ({1, 2, 3}, "got a set \\(a set has no order\\)"),
    ((i for i in range(3)), "got a generator.*torch.tensor\\(list\\(ids\\)\\)"),
    ([[1, 2], [3]], "rows of one length"),
    ([[0.5, 1.0]], "integer tensor of shape \\(batch, seq\\); got \\(1, 2\\) torch.float32"),
    (torch.tensor([[1, 2]], device="meta"), "tokens are on the meta device, which holds shapes but no values"),
    (torch.tensor([[1, 2]], dtype=torch.uint32), "got \\(1, 2\\) torch.uint32. Fix: .long\\(\\)"),
])
def test_token_ids_of_another_kind_get_a_sentence(tiny_model, bad, said):
    model = tiny_model()
    with pytest.raises(ValueError, match=said):
        model(bad)


@pytest.mark.parametrize("bad, said", [
    ("abc", "read_segments' tokens must be token ids, not text"), ({1, 2}, "a set has no order"),
    ((i for i in range(3)), "got a generator"), (torch.tensor([[1, 2]], device="meta"), "meta device"),
])
def test_read_segments_given_another_kind_of_ids(tiny_model, bad, said):
    with pytest.raises(ValueError, match=said):
        list(read_segments(tiny_model(), bad))


@pytest.mark.parametrize("bad, said", [
    ([], r"prompt is empty \(shape \(0,\)\).*Fix"), ({1, 2}, "got a set"), ((i for i in range(2)), "a generator"),
    (["a"], "integer token ids"), (torch.tensor([1], device="meta"), "meta device"),
])
def test_generate_given_another_kind_of_prompt(tiny_model, bad, said):
    with pytest.raises(ValueError, match=said):
        tiny_model().generate(bad, 2)


def test_numpy_floats_in_a_model_config_become_python_floats():
    cfg = TXLConfig(dropout=np.float32(0.25), span_init=np.float64(0.5), dropatt=np.float16(0.5))
    assert (cfg.dropout, cfg.span_init, cfg.dropatt) == (0.25, 0.5, 0.5)
    assert all(type(v) is float for v in (cfg.dropout, cfg.span_init, cfg.dropatt))  # as TrainConfig stores them
    assert TrainConfig(lr=np.float32(0.25)).lr == 0.25
    with pytest.raises(ValueError, match="TXLConfig.dropout must be a number in \\[0, 1\\]"):
        TXLConfig(dropout=np.float32(1.5))


@pytest.mark.parametrize("bad, said", [
    ("the cat", "text must be token ids, not text.*Fix: encode it, txl_minimal.encode\\(text\\)$"),
    ({1, 2, 3}, "a set has no order"), ((i for i in range(30)), "got a generator"),
    (torch.arange(30, device="meta"), "token ids on the meta device hold no values"),
])
def test_evaluations_given_another_kind_of_text(tiny_model, bad, said):
    for call in (lambda: evaluate(tiny_model(), bad), lambda: sliding_window_eval(tiny_model(), bad, 4)):
        with pytest.raises(ValueError, match=said):  # was "got shape ()" or torch's "Cannot copy out of meta"
            call()
    assert evaluate(tiny_model(), list(range(27)))["tokens"] == 26  # a list of ids is read
