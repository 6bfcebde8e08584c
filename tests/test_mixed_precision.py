"""Mixed precision: a model trained or evaluated under autocast evaluates, generates and reads
segments afterwards as a fresh copy of its weights does, outside autocast and inside it.

What is kept between calls (fast.py's W_k,R R and mask bias, the memory's keys and values) is
kept with the autocast state it was made under; memories are stored in the parameters' dtype
(float32 here) whatever the autocast state (issue 30, issue 33). On a GPU, notebook 04 trains
with amp="auto" (bf16) and then evaluates outside autocast: the last test replays its calls.
"""
from __future__ import annotations

import contextlib
import math
import warnings

import pytest
import torch

import txl_minimal.variants  # noqa: F401  (registers "shaw" and the adaptive span)
from tiny import TINY, synthetic_corpus, tiny_cfg, tiny_train_cfg
from txl_minimal import fast
from txl_minimal.evaluate import evaluate, read_segments, sliding_window_eval
from txl_minimal.model import TransformerXL, TXLConfig
from txl_minimal.pretrained import paired_difference
from txl_minimal.tasks import stream_predictions
from txl_minimal.train import train


def _cpu_autocast_makes(dtype: torch.dtype) -> bool:
    """Whether CPU autocast computes a matmul in ``dtype`` on this torch (else it warns and is off)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast("cpu", dtype=dtype):
            return torch.mm(torch.ones(1, 1), torch.ones(1, 1)).dtype == dtype


DTYPES = [torch.bfloat16,
          pytest.param(torch.float16, marks=pytest.mark.skipif(
              not _cpu_autocast_makes(torch.float16), reason=f"torch {torch.__version__}: no fp16 CPU autocast"))]
WORDS = dict(vocab_size=60, cutoffs=[10, 30])  # head [0, 10), tails [10, 30), [30, 60)
CONFIGS = {"rel": {}, "abs": dict(attn_type="abs"), "abs_far": dict(attn_type="abs_far"),
           "shaw": dict(attn_type="shaw"), "span": dict(adaptive_span=True, span_ramp=2, span_init=0.3),
           "untie_r": dict(untie_r=True), "words-div1-d_embed8": dict(WORDS, d_embed=8),
           "words-div2": dict(WORDS, div_val=2)}
EXACT = dict(rtol=1e-6, atol=1e-6)  # float32 outside autocast: the same operations as a fresh copy
LOW = dict(rtol=2e-2, atol=2e-2)  # inside autocast: bf16 / fp16 rounding (8 / 11 bits)
ACROSS = dict(rtol=0.1, atol=0.1)  # an autocast run against a float32 run: the rounding of every layer


def _trained(overrides: dict, mem_len: int, dtype: torch.dtype) -> TransformerXL:
    """A tiny model trained 3 steps under autocast, with a validation under autocast after each
    (as train.py does), so that whatever an evaluation keeps was made under autocast. The
    validation reads one full segment per column: the shape every later evaluation starts with."""
    torch.manual_seed(0)
    model = TransformerXL(TXLConfig(**{**TINY, "mem_len": mem_len, **overrides}))
    with torch.no_grad():  # off the init's small weights: every term of the score counts
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = torch.randint(0, model.cfg.vocab_size, (2, 19))
    mems = None
    for s in range(0, 18, 6):
        model.train()
        with torch.autocast("cpu", dtype=dtype):
            out = model(data[:, s:s + 6], mems, targets=data[:, s + 1:s + 7])
            mems = out.mems
            out.loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            evaluate(model, data[0, :13], batch_size=2)  # 12 predictions: 2 columns of tgt_len 6
    return model


def _fresh(model: TransformerXL) -> TransformerXL:
    """A new model with the same weights and nothing kept from earlier calls."""
    copy = TransformerXL(model.cfg)
    copy.load_state_dict(model.state_dict())
    return copy.eval()


def _calls(model: TransformerXL, ids: torch.Tensor) -> dict:
    """What the package does with a trained model: evaluate, generate, read_segments, the sliding
    window, tasks.py's stream of predictions."""
    segments = [(s, out.nll, out.mems) for s, out in read_segments(model, ids[None, :-1], ids[None, 1:])]
    for _, _, mems in segments:  # the memory contract: the parameters' dtype, whatever autocast does
        assert all(m.dtype == torch.float32 for m in mems)
    gen = torch.Generator().manual_seed(0)
    return dict(evaluate=evaluate(model, ids, batch_size=2, per_token=True)["nll"],
                generate=model.generate(ids[:7], 6, temperature=1.0, generator=gen),
                segments=segments, stream=stream_predictions(model, ids.numpy(), tgt_len=6),
                sliding=sliding_window_eval(model, ids, context=5, max_predictions=20, batch_size=4)["loss"])


def _compare(got: dict, want: dict, tol: dict) -> None:
    torch.testing.assert_close(torch.as_tensor(got["evaluate"]), torch.as_tensor(want["evaluate"]), **tol)
    assert got["sliding"] == pytest.approx(want["sliding"], rel=tol["rtol"], abs=tol["atol"])
    for (s, nll, mems), (s2, nll2, mems2) in zip(got["segments"], want["segments"], strict=True):
        assert s == s2
        torch.testing.assert_close(nll, nll2, **tol)
        for m, m2 in zip(mems, mems2, strict=True):
            torch.testing.assert_close(m, m2, **tol)
    if tol is EXACT:  # a sampled token can flip on a rounding difference: only float32 is exact
        assert got["generate"].equal(want["generate"])
        assert (got["stream"] == want["stream"]).all()
    else:
        assert got["generate"].shape == want["generate"].shape == (13,)
        assert got["stream"].shape == want["stream"].shape


def _context(where: str, dtype: torch.dtype):
    return torch.autocast("cpu", dtype=dtype) if where == "in" else contextlib.nullcontext()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mem_len", [0, 6])
@pytest.mark.parametrize("name", CONFIGS)
def test_after_autocast_every_call_equals_a_fresh_copy(name, mem_len, dtype):
    """Trained under autocast, then used outside it, inside it and outside again: each call gives
    what a fresh copy of the weights gives in the same state. Before the fix, the first fp32
    evaluation after the autocast validation reused its bf16 W_k,R R ("expected m1 and m2 to have
    the same dtype"), and word models with projected embeddings stored bf16 memories."""
    model = _trained(CONFIGS[name], mem_len, dtype)
    ids = torch.randint(0, model.cfg.vocab_size, (40,), generator=torch.Generator().manual_seed(1))
    want = {}
    for where in ("out", "in", "out"):  # after autocast (training), after float32, after autocast
        with _context(where, dtype):
            got = _calls(model, ids)
            want[where] = want.get(where) or _calls(_fresh(model), ids)
        _compare(got, want[where], EXACT if where == "out" else LOW)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mem_len", [0, 6])
@pytest.mark.parametrize("name", CONFIGS)
def test_fast_equals_explicit_after_switching_autocast(name, mem_len, dtype):
    """fast.py's paths give the explicit code's log-probabilities after autocast was switched
    on and off (what they kept in one state is not used in the other)."""
    model = _trained(CONFIGS[name], mem_len, dtype).eval()
    xs = torch.randint(0, model.cfg.vocab_size, (4, 2, 6), generator=torch.Generator().manual_seed(2))

    def log_probs(fast_on: bool) -> list[torch.Tensor]:
        model.fast_attn, mems, lps = fast_on, None, []
        with torch.no_grad():
            for x in xs:
                out = model(x, mems)
                mems = out.mems
                lps.append(out.logits.float().log_softmax(-1))
        return lps

    for where in ("out", "in", "out", "in"):  # (the model's last validation ran under autocast)
        with _context(where, dtype):
            fast_lp = log_probs(True)
            slow_lp = log_probs(False)
        for a, b in zip(fast_lp, slow_lp):
            torch.testing.assert_close(a, b, **(dict(rtol=1e-5, atol=1e-5) if where == "out" else LOW))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", CONFIGS)
def test_memory_is_kept_in_the_parameters_dtype_and_read_in_either_state(name, dtype):
    """The contract: out.mems holds the parameters' dtype under autocast too, so that a memory
    made under autocast is accepted outside it and the other way round (and the bf16 keys and
    values kept with it are not reused in float32). Before the fix a word model with projected
    embeddings gave a bf16 first-layer memory, refused at the next segment ("mems must be a
    previous out.mems ... torch.bfloat16"), and other models failed on fast.py's bf16 W_k,R R."""
    model = _trained(CONFIGS[name], 6, dtype).eval()
    x = torch.randint(0, model.cfg.vocab_size, (3, 2, 6), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        high = model(x[0]).mems
        with torch.autocast("cpu", dtype=dtype):
            low = model(x[0]).mems
        assert [m.dtype for m in low] == [torch.float32] * len(low)
        for m, m2 in zip(low, high):
            torch.testing.assert_close(m, m2, **ACROSS)
        mixed = model(x[1], low, targets=x[2]).nll  # autocast's memory, read in float32
        exact = model(x[1], high, targets=x[2]).nll
        with torch.autocast("cpu", dtype=dtype):
            model(x[1], high)  # and float32's memory read under autocast
        # (the keys and values kept with `low` were bf16: they are not reused in float32)
        torch.testing.assert_close(mixed, _fresh(model)(x[1], low, targets=x[2]).nll, **EXACT)
    torch.testing.assert_close(mixed, exact, **ACROSS)


def test_autocast_state_names_the_device_kind_and_dtype(monkeypatch):
    """fast.autocast_state on this torch, and through torch 2.3's per-device functions."""
    def states():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            inside = fast.autocast_state(torch.device("cpu"))
        return fast.autocast_state(torch.device("cpu")), inside

    assert states() == (("cpu", False, None), ("cpu", True, torch.bfloat16))
    if fast._AUTOCAST_BY_DEVICE_TYPE:  # torch >= 2.4: ask as torch 2.3 is asked
        monkeypatch.setattr(fast, "_AUTOCAST_BY_DEVICE_TYPE", False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the per-device functions, deprecated in 2.4
            assert states() == (("cpu", False, None), ("cpu", True, torch.bfloat16))


@pytest.mark.parametrize("word_cfg", [dict(div_val=2), dict(div_val=1, d_embed=32)], ids=["div_val2", "d_embed32"])
def test_word_model_with_projected_embeddings_trains_under_bf16(tmp_path, word_cfg):
    """Issue 33: train --corpus text8-mini-words --set vocab_size=10001 "cutoffs=[2000,6000]"
    div_val=2 (or div_val=1 d_embed=32) under bf16 failed at step 2 on its own memory."""
    corpus = synthetic_corpus("the quick brown fox jumps over the lazy dog ")
    cfg = tiny_cfg(vocab_size=27, cutoffs=[5, 12], **word_cfg)
    res = train(cfg, tiny_train_cfg(tmp_path, amp="bf16", max_steps=4, eval_interval=2), corpus, progress=False)
    assert res.step == 4 and math.isfinite(res.train_bpc) and math.isfinite(res.valid_bpc)
    fresh = _fresh(res.model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert evaluate(res.model, corpus.test)["loss"] == pytest.approx(evaluate(fresh, corpus.test)["loss"], abs=0.02)
    assert evaluate(res.model, corpus.test)["loss"] == pytest.approx(evaluate(fresh, corpus.test)["loss"], rel=1e-6)


def _sample(model: TransformerXL, prompt: list[int], n: int = 30, temperature: float = 0.8) -> torch.Tensor:
    """Notebook 04's sample(): a seeded generator on the model's device, the new ids only."""
    gen = torch.Generator(device=next(model.parameters()).device).manual_seed(0)
    ids = torch.as_tensor(prompt, dtype=torch.long, device=next(model.parameters()).device)
    return model.generate(ids, n, temperature=temperature, generator=gen)[len(ids):]


@pytest.mark.parametrize("amp", ["bf16", pytest.param("fp16", marks=pytest.mark.skipif(
    not _cpu_autocast_makes(torch.float16), reason=f"torch {torch.__version__}: no fp16 CPU autocast"))])
def test_notebook_04_calls_on_models_trained_under_autocast(tmp_path, amp):
    """Notebook 04's GPU branch trains with amp="auto" (bf16; fp16 before Ampere) and then, outside
    autocast, makes these calls on its three ablation runs (cells 15, 18, 22, 23, 28): they run
    and give what fresh copies of the weights give. Before the fix, cell 22's evaluate of "XL
    without memory" failed ("expected m1 and m2 to have the same dtype")."""
    corpus = synthetic_corpus("the history of the city is long and old ", n_train=4 * 80)
    variants = {"Transformer-XL": {}, "XL without memory": dict(mem_len=0),
                "vanilla": dict(attn_type="abs", mem_len=0)}
    runs = {name: train(tiny_cfg(**overrides), tiny_train_cfg(tmp_path / str(i), amp=amp, max_steps=6,
                                                              eval_interval=2), corpus, progress=False)
            for i, (name, overrides) in enumerate(variants.items())}
    prompt = list(corpus.test[:9])
    for run in runs.values():
        fresh = _fresh(run.model)
        for a, b in ((run.model, fresh), (fresh, run.model)):  # either first: nothing carries over
            assert evaluate(a, corpus.test, batch_size=16)["bpc"] == pytest.approx(
                evaluate(b, corpus.test, batch_size=16)["bpc"], rel=1e-6)
        nll = {m: evaluate(m, corpus.test, batch_size=16, per_token=True)["nll"] for m in (run.model, fresh)}
        torch.testing.assert_close(torch.as_tensor(nll[run.model]), torch.as_tensor(nll[fresh]), **EXACT)
        assert _sample(run.model, prompt).equal(_sample(fresh, prompt))
        off = [evaluate(m, corpus.test, mem_len=0, max_tokens=100)["bpc"] for m in (run.model, fresh)]
        assert off[0] == pytest.approx(off[1], rel=1e-6)
    gap, se = paired_difference(*(evaluate(runs[n].model, corpus.test, batch_size=16, per_token=True)["nll"]
                                  for n in ("vanilla", "Transformer-XL")), block=20)
    assert math.isfinite(gap) and math.isfinite(se)
