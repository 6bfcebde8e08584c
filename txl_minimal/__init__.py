"""txl_minimal: a readable, tested Transformer-XL (Dai et al., 2019) for teaching.

    from txl_minimal import TXLConfig, TransformerXL, load_corpus, load_pretrained, generate_text

Every public name (``from txl_minimal import *``; each has its page in the API reference):

    TXLConfig, TransformerXL, TXLOutput      the model's settings, the model, what one call returns
    attention_mask, update_memory, sinusoid_table, rel_shift, RelMultiHeadAttn   its building blocks (Sec. 3)
    load_corpus, Corpus, LMOrderedIterator, as_ids   a text as token ids, its batches in text order
    VOCAB, VOCAB_SIZE, encode, decode        text8's 27 characters and their ids
    generate_text                            text in, sampled text out
    TrainConfig, preset, TrainResult         a training's settings (a preset's) and what it returns;
                                             ``from txl_minimal import train``: ``train(model_cfg, cfg)`` trains
    read_segments, sliding_window_eval       a text read segment by segment with memory; the vanilla sliding window
                                             (``from txl_minimal.evaluate import evaluate``: bpc or perplexity)
    save, load, save_checkpoint, load_checkpoint, model_from_checkpoint   models and run states on disk
    official_state_dict, load_official_state_dict   the authors' parameter names
    load_pretrained                          the shipped models by name ("txl-tiny", ...)

The public API, by module (each imports only those above it; model.py needs torch alone,
plus validation.py's clear errors, adaptive.py's word-level layers and controls.py, its base classes, inside
the package):

    adaptive     AdaptiveEmbedding, ProjectedAdaptiveLogSoftmax   (words: TXLConfig(cutoffs=[...]))
    model        TXLConfig, TransformerXL, TXLOutput             (the paper, Sec. 3; token ids in and out), and its
                 building blocks: attention_mask, update_memory, sinusoid_table, rel_shift, RelMultiHeadAttn
    fast         the model's faster subclasses, swapped in by ``model.fast_attn`` (the same numbers)
    variants     Shaw et al.'s encoding, adaptive span (registered on import)
    words        Vocab                                           (the authors' word vocabulary)
    symbols      VOCAB, encode, decode (text8's 27 characters); encode_symbols, decode_symbols, UNKNOWN_CHAR
                 (text <-> ids of any other vocabulary)
    corpora      Corpus, CorpusError, Source, text8_dir           (the corpus layer: what every corpus shares,
                 the data folder, the split, a zip's download with its checks, the .npy cache)
    text8        load_text8, load_text8_mini                     (characters)
    text_file    load_text_file                                  (your own UTF-8 file: characters or words)
    word_corpora load_wikitext, load_text8_mini_words, word_stats  (words: WikiText-103/-2, text8-mini)
    enwik8       load_enwik8, encode_bytes, decode_bytes          (bytes: the Hutter Prize file, as the authors)
    batching     LMOrderedIterator, as_ids                       (in order, batch first, for the memory)
    data         load_corpus, generate_text(model, "the king ", n_new)   (text in, text out);
                 the corpora's front door: the names of those above (but model's) import from it too
    checkpoint   save, load, save_checkpoint, load_checkpoint, model_from_checkpoint,
                 official_state_dict, load_official_state_dict   (the authors' weights)
    stats        paired_difference, pooled                       (error bars: the same tokens scored twice)
    evaluate     read_segments, evaluate, sliding_window_eval    (python -m txl_minimal.evaluate)
    generate     python -m txl_minimal.generate                  (sampled text, as nanoGPT's sample.py)
    train        TrainConfig, preset, train                      (python -m txl_minimal.train), over
                 train_config (TrainConfig, preset, lr_at), presets (PRESETS), devices (DDP, precision,
                 compile, Adam), bookkeeping (between steps), run_folder (--out; TrainResult: over
                 run_lock, run_log, run_checkpoints and run_signals) and command_line (its flags)
    pretrained   load_pretrained                                 (python -m txl_minimal.pretrained)

Not the library: ``txl_minimal.tutorial`` holds the notebooks' helpers (analysis, context,
attention_maps, plotting, ablation, exercises, solutions); it imports the library, never
the reverse.

    from txl_minimal.tutorial import analysis, plotting
"""
import re
from importlib import import_module

import torch

# The oldest torch the package is tested with (`make test-min`, requirements-min.txt; equal to
# pyproject's floor, tests/test_versions.py). Older ones fail inside training (no
# torch.amp.GradScaler before 2.3): say so once, at import, instead.
TORCH_FLOOR = "2.3.0"


def check_torch_version(version: str) -> None:
    """Raise ImportError naming the fix if torch ``version`` (e.g. "2.1.2+cu121") is below TORCH_FLOOR."""
    found = tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])
    if found < tuple(int(n) for n in TORCH_FLOOR.split(".")):
        raise ImportError(f"txl_minimal needs torch >= {TORCH_FLOOR}, found {version}: "
                          f'upgrade it with  pip install --upgrade "torch>={TORCH_FLOOR}"')


check_torch_version(str(torch.__version__))

from . import variants  # noqa: E402,F401  registers attn_type="shaw" and adaptive_span with the model
from . import fast  # noqa: E402,F401  sets controls.SPEEDUP: models are built with the fast paths on
from .data import (VOCAB, VOCAB_SIZE, Corpus, LMOrderedIterator, as_ids, decode, encode,  # noqa: E402
                   generate_text, load_corpus)
from .model import (RelMultiHeadAttn, TXLConfig, TXLOutput, TransformerXL, attention_mask, rel_shift,  # noqa: E402
                    sinusoid_table, update_memory)

# Imported on first use, so that `python -m txl_minimal.train` (or .evaluate, .pretrained)
# runs a module that the package has not imported already.
_LAZY = {"TrainConfig": "train", "preset": "train", "save": "checkpoint", "load": "checkpoint",
         "save_checkpoint": "checkpoint", "load_checkpoint": "checkpoint", "model_from_checkpoint": "checkpoint",
         "official_state_dict": "checkpoint", "load_official_state_dict": "checkpoint",
         "read_segments": "evaluate", "sliding_window_eval": "evaluate", "load_pretrained": "pretrained",
         "TrainResult": "run_folder", "paired_difference": "stats", "pooled": "stats"}

__all__ = ["TXLConfig", "TXLOutput", "TransformerXL", "VOCAB", "VOCAB_SIZE", "Corpus",
           "LMOrderedIterator", "as_ids", "decode", "encode", "generate_text", "load_corpus"] + list(_LAZY) + [
           "attention_mask", "update_memory", "sinusoid_table", "rel_shift", "RelMultiHeadAttn"]
__version__ = "0.1.0"


def __dir__() -> list[str]:
    """Every name here, the lazily imported ones included: ``help(txl_minimal)`` then documents all of ``__all__``."""
    return sorted(set(globals()) | set(__all__))


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
