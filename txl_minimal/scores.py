"""What a corpus is scored in: bits per character (or byte) for characters, perplexity for words;
LN2 turns a loss in nats into bits."""
from __future__ import annotations

import math

LN2 = math.log(2.0)  # nats per bit: bpc = loss / LN2


def score_name(unit: str) -> str:
    """What a corpus is scored in: "bpc" (bits per character) for characters and for enwik8's
    bytes (the paper's "bpc" there is per byte), "ppl" (perplexity per word) for words."""
    if unit not in ("character", "byte", "word"):
        raise ValueError(f"unit must be 'character', 'byte' or 'word', got {unit!r}")
    return "ppl" if unit == "word" else "bpc"


def score_of(loss: float, unit: str) -> float:
    """A mean NLL in nats as ``score_name(unit)``: loss / ln 2 for characters and bytes, exp(loss) for words."""
    return loss / LN2 if score_name(unit) == "bpc" else math.exp(min(loss, 700.0))
