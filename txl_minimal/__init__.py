"""txl_minimal: a readable, tested Transformer-XL (Dai et al., 2019) for teaching.

    from txl_minimal import TXLConfig, TransformerXL, load_corpus
"""
from .data import VOCAB, VOCAB_SIZE, Corpus, LMOrderedIterator, decode, encode, load_corpus
from .model import TXLConfig, TXLOutput, TransformerXL

__all__ = ["TXLConfig", "TXLOutput", "TransformerXL", "VOCAB", "VOCAB_SIZE", "Corpus",
           "LMOrderedIterator", "decode", "encode", "load_corpus"]
__version__ = "0.1.0"
