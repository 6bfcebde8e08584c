"""Rebuild txl_minimal/corpus/text8-mini.txt.gz, bit for bit, from gensim's Wikipedia excerpt.

The file ships inside the package (txl_minimal.data.MINI_PATH), so that an installed
package has it too; this script and its README stay in the repository's data/.

    pip download --no-deps gensim -d /tmp/gensim        # the wheel; no need to install it
    python data/build_text8_mini.py /tmp/gensim/gensim-*.whl   # or the extracted .bz2

The source is checked against SOURCE_SHA256, the cleaned text against TEXT_SHA256
and the gzip file against GZ_SHA256 (gzip with mtime=0 and no file name, so the
bytes depend only on the text and on zlib; a different zlib may compress
differently, which only earns a warning since the text itself is identical).
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import io
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a clone, uninstalled
from txl_minimal.data import MINI_PATH, VOCAB, encode
from txl_minimal.files import atomic_write
from txl_minimal.shipped_files import shipped_folder, write_shipped
from txl_minimal.wikifil import wikifil

FIXTURE = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
MEMBER = "gensim/test/test_data/" + FIXTURE  # its path inside the gensim wheel
SOURCE_SHA256 = "a53f4648dec40467ebdcbc7a1307eddb51fe6e28e9309f6ebde81ba0d04bea2d"
TEXT_SHA256 = "092ab03dd063d1e0afb0e948fba8728eed854111c1183046571cb5c7ef2ebe3c"
GZ_SHA256 = "68514d14b1a026d1e6e80cd82e286e93b5bcfbd2ba82139b790abffbb41301e0"
OUT = MINI_PATH  # txl_minimal/corpus/, so that it ships inside the package


def read_source(path: str | Path) -> bytes:
    """The .bz2 fixture's bytes, from the file itself or from inside a gensim wheel."""
    path = Path(path)
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as whl:
            data = whl.read(MEMBER)
    else:
        data = path.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    if sha != SOURCE_SHA256:
        raise SystemExit(f"{path}: SHA-256 {sha} is not the expected {SOURCE_SHA256}; "
                         f"get {FIXTURE} from the gensim wheel (pip download --no-deps gensim)")
    return data


def build_text(source_bz2: bytes) -> str:
    """Run our wikifil on the XML and check the result against TEXT_SHA256."""
    text = wikifil(io.BytesIO(bz2.decompress(source_bz2)))
    encode(text)  # raises if anything outside the 27 symbols slipped through
    sha = hashlib.sha256(text.encode("ascii")).hexdigest()
    if sha != TEXT_SHA256:
        raise SystemExit(f"cleaned text SHA-256 {sha} differs from TEXT_SHA256 {TEXT_SHA256}: "
                         "txl_minimal/wikifil.py changed? If on purpose, update the constants.")
    return text


def compress(text: str) -> bytes:
    """Deterministic gzip: fixed mtime, no file name, fixed level."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as f:
        f.write(text.encode("ascii"))
    return buf.getvalue()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", help=f"gensim-*.whl or {FIXTURE}")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--replace-shipped", action="store_true", help="into the package even where the gzip bytes "
                    "differ from the shipped ones (another zlib), with its MANIFEST.json entry")
    args = ap.parse_args(argv)
    text = build_text(read_source(args.source))
    gz = compress(text)
    gz_sha = hashlib.sha256(gz).hexdigest()
    if (folder := shipped_folder(args.out)) is not None and gz_sha != GZ_SHA256 and not args.replace_shipped:
        ap.error(f"the rebuilt {args.out.name} holds the same text in other gzip bytes (SHA-256 {gz_sha[:16]}..., "
                 f"shipped {GZ_SHA256[:16]}...: another zlib), so writing it into {folder} would change a shipped "
                 "file (nothing was written). Fix: --out /tmp/text8-mini.txt.gz, or --replace-shipped (its "
                 "MANIFEST.json entry is rewritten with it)")
    if folder is not None and (args.out.parent / "MANIFEST.json").exists():
        write_shipped({args.out: gz})  # the file and its manifest entry together
    else:
        atomic_write(args.out, lambda f: f.write(gz))  # a killed build leaves the old file whole
    if gz_sha != GZ_SHA256:
        print(f"warning: {args.out.name} SHA-256 {gz_sha} != {GZ_SHA256} (another zlib?); "
              "the text inside is verified identical", file=sys.stderr)
    print(f"wrote {args.out}: {len(text):,} characters of {VOCAB!r}, {len(gz):,} bytes, "
          f"sha256 {gz_sha}")


if __name__ == "__main__":
    main()
