"""txl_minimal: a readable, tested Transformer-XL (Dai et al., 2019) for teaching.

    from txl_minimal import TXLConfig, TransformerXL, load_corpus, load_pretrained, generate_text

The public API, by module (each imports only those above it; model.py needs torch alone,
plus validation.py's clear errors and adaptive.py's word-level layers inside the package):

    adaptive     AdaptiveEmbedding, ProjectedAdaptiveLogSoftmax   (words: TXLConfig(cutoffs=[...]))
    model        TXLConfig, TransformerXL, TXLOutput             (the paper, Sec. 3; token ids in and out)
    fast         the model's faster subclasses, swapped in by ``model.fast_attn`` (the same numbers)
    variants     Shaw et al.'s encoding, adaptive span (registered on import)
    words        Vocab                                           (the authors' word vocabulary)
    symbols      encode_symbols, decode_symbols, UNKNOWN_CHAR    (text <-> ids of any vocabulary)
    text8        VOCAB, encode, decode, Corpus, load_text8, load_text8_mini   (characters)
    text_file    load_text_file                                  (your own UTF-8 file: characters or words)
    word_corpora load_wikitext, load_text8_mini_words, word_stats  (words: WikiText-103/-2, text8-mini)
    enwik8       load_enwik8, encode_bytes, decode_bytes          (bytes: the Hutter Prize file, as the authors)
    batching     LMOrderedIterator, as_ids                       (in order, batch first, for the memory)
    data         load_corpus, generate_text(model, "the king ", n_new)   (text in, text out);
                 the corpora's front door: text8's, word_corpora's, enwik8's and batching's names import from it too
    checkpoint   save, load, save_checkpoint, load_checkpoint, model_from_checkpoint,
                 official_state_dict, load_official_state_dict   (the authors' weights)
    stats        paired_difference, pooled                       (error bars: the same tokens scored twice)
    evaluate     read_segments, evaluate, sliding_window_eval    (python -m txl_minimal.evaluate)
    generate     python -m txl_minimal.generate                  (sampled text, as nanoGPT's sample.py)
    train        TrainConfig, preset, train                      (python -m txl_minimal.train), over
                 presets (PRESETS), devices (DDP, precision, compile, Adam), run_folder (--out: lock,
                 log.csv, checkpoints, resume, Ctrl-C; TrainResult) and command_line (its flags)
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
from . import fast  # noqa: E402,F401  sets model.SPEEDUP: models are built with the fast paths on
from .data import (VOCAB, VOCAB_SIZE, Corpus, LMOrderedIterator, as_ids, decode, encode,  # noqa: E402
                   generate_text, load_corpus)
from .model import TXLConfig, TXLOutput, TransformerXL  # noqa: E402

# Imported on first use, so that `python -m txl_minimal.train` (or .evaluate, .pretrained)
# runs a module that the package has not imported already.
_LAZY = {"TrainConfig": "train", "preset": "train", "save": "checkpoint", "load": "checkpoint",
         "save_checkpoint": "checkpoint", "load_checkpoint": "checkpoint", "model_from_checkpoint": "checkpoint",
         "official_state_dict": "checkpoint", "load_official_state_dict": "checkpoint",
         "read_segments": "evaluate", "sliding_window_eval": "evaluate", "load_pretrained": "pretrained",
         "TrainResult": "run_folder", "paired_difference": "stats", "pooled": "stats"}

__all__ = ["TXLConfig", "TXLOutput", "TransformerXL", "VOCAB", "VOCAB_SIZE", "Corpus",
           "LMOrderedIterator", "as_ids", "decode", "encode", "generate_text", "load_corpus"] + list(_LAZY)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
