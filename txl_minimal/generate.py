"""Sample text from a trained model, as nanoGPT's sample.py: ``generate_text`` on the command line.

    python -m txl_minimal.generate txl-tiny --prompt "the king of " --length 200
    python -m txl_minimal.generate runs/mine --prompt "Мороз" --length 300 --temperature 0.8 --top-k 20
    python -m txl_minimal.generate runs/mine/ckpt.pt --prompt "def " --temperature 0   # greedy

RUN_OR_NAME is a shipped model (its names are listed under RUN_OR_NAME below), a run directory
(its best.pt; --last: its ckpt.pt, the last state) or a checkpoint file. The prompt is written in
the model's own symbols (a text8 model: space and a-z; a model of your file: that file's
characters; a word model: words, a line break read as <eos>), and --length tokens (characters; a
word model: words, <eos> printed as a line break) are sampled after it, the memory carried (Sec.
3.2); the unknown symbol (U+FFFD, <unk>) only where the training text held it (--allow-unknown:
anyway). The prompt and its continuation are printed; --seed fixes the draw, so the same command
prints the same text. Nothing is written.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Optional

import torch

from txl_minimal.checkpoint import NAMES, checkpoint_file, load_checkpoint, model_from_checkpoint
from txl_minimal.cli import stopped_by_ctrl_c
from txl_minimal.data import CorpusError, generate_text
from txl_minimal.utils import Once, check_device, int_at_least


def temperature(text: str) -> float:
    """An argparse ``type``: a finite number >= 0 (0: greedy)."""
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (0: greedy, 1: the model's own "
                                         f"distribution), got {text!r}")
    return value


def main(argv: Optional[list[str]] = None) -> None:
    """The command line: print the prompt and ``--length`` tokens sampled after it (see the module docstring)."""
    p = argparse.ArgumentParser(prog="python -m txl_minimal.generate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.register("action", None, Once)  # a flag given twice with two values is refused, not the last kept
    p.add_argument("model", metavar="RUN_OR_NAME",
                   help=f"a shipped model ({' | '.join(NAMES)}), a run directory or a checkpoint file")
    p.add_argument("--prompt", required=True, help="the text to continue, in the model's symbols")
    p.add_argument("--length", type=int_at_least(0), default=200, metavar="N",
                   help="tokens to add: characters (a word model: words); default 200")
    p.add_argument("--temperature", type=temperature, default=1.0, metavar="T",
                   help="divides the logits: below 1 safer, above 1 wilder, 0 greedy (default 1)")
    p.add_argument("--top-k", type=int_at_least(1), metavar="K", help="draw only from the K most likely tokens")
    p.add_argument("--seed", type=int, default=0, help="the random draw (default 0: the same text every time)")
    p.add_argument("--allow-unknown", action="store_true",
                   help="draw the unknown symbol (U+FFFD, <unk>) even where the training text never held it")
    p.add_argument("--last", action="store_true",
                   help="a run directory: sample from its last state, ckpt.pt, instead of its best.pt")
    p.add_argument("--device", default="cpu", help='"cpu" (default), "auto" (a GPU if there is one), "cuda:1" ...')
    args = p.parse_args(argv)
    if args.model not in NAMES and not Path(args.model).exists():
        p.error(f"{args.model!r} is neither a shipped model ({', '.join(NAMES)}) nor a run directory or checkpoint "
                "file. Fix: pass a training run's --out folder, a checkpoint file, or one of those names")
    try:
        device = check_device(args.device, "--device")
        path = checkpoint_file(args.model, args.last)
        model = model_from_checkpoint(load_checkpoint(path, map_location=device), device)
        generator = torch.Generator(device=device).manual_seed(args.seed)
        text = generate_text(model, args.prompt, args.length, temperature=args.temperature, top_k=args.top_k,
                             generator=generator, allow_unknown=args.allow_unknown)
    except (ValueError, FileNotFoundError, CorpusError) as e:  # bad input: the message, no traceback
        text8 = str(e).startswith("encode:")  # text8's encoder names the character, not the fix
        p.error(f"{e}. Fix: write the prompt in text8's characters, space and a-z" if text8 else str(e))
    except KeyboardInterrupt as e:
        stopped_by_ctrl_c(e, "stopped by Ctrl-C: nothing was written (generate only prints)")
    print(text)


if __name__ == "__main__":
    main()
