"""txl_minimal: a readable, tested Transformer-XL (Dai et al., 2019) for teaching.

    from txl_minimal import TXLConfig, TransformerXL, load_corpus, load_pretrained
"""
from .data import VOCAB, VOCAB_SIZE, Corpus, LMOrderedIterator, decode, encode, load_corpus
from .model import TXLConfig, TXLOutput, TransformerXL
from .pretrained import load_pretrained

__all__ = ["TXLConfig", "TXLOutput", "TransformerXL", "VOCAB", "VOCAB_SIZE", "Corpus",
           "LMOrderedIterator", "decode", "encode", "load_corpus", "load_pretrained"]
__version__ = "0.1.0"
