"""The files that ship with the package (the corpus, the pretrained models): each folder's
MANIFEST.json lists their sizes and SHA-256, checked before one is used (``check_shipped``) and
rewritten with them (``write_shipped``, all or nothing). ``shipped_out_problem``: the sentence that
keeps a script from writing into a shipped folder (a clone's results/, the package's models and
corpus) unless asked to by name."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from txl_minimal.files import atomic_write, file_sha256, read_json, replace_together  # noqa: F401 (file_sha256: it lived here)

MANIFEST = "MANIFEST.json"  # beside the files it lists: {name: {"bytes": size, "sha256": hex}}
# what ships, and what the notebooks and docs read: a clone's results/ (the scripts' runs), the package's
# models and corpus
SHIPPED_FOLDERS = (Path(__file__).resolve().parents[1] / "results", Path(__file__).resolve().with_name("pretrained"),
                   Path(__file__).resolve().with_name("corpus"))


def shipped_fix(path: str | Path) -> str:
    """How to get a good copy of a file that ships with the package."""
    path = Path(path).resolve()
    repo = Path(__file__).resolve().parents[1]
    if (repo / ".git").exists() and path.is_relative_to(repo):  # a clone: git has the right bytes
        return (f"Fix: git checkout -- {path.relative_to(repo)} (in {repo}), or reinstall the package "
                "(pip install --force-reinstall txl-minimal).")
    return "Fix: reinstall the package (pip install --force-reinstall txl-minimal)."


def shipped_folder(path: str | Path) -> Path | None:
    """The shipped folder (``SHIPPED_FOLDERS``) that ``path`` is or lies in, or None."""
    path = Path(path).expanduser().resolve()
    return next((folder for folder in SHIPPED_FOLDERS if path.is_relative_to(folder)), None)


def shipped_out_problem(out: str | Path, script: str, own: str) -> str | None:
    """Why ``script`` may not write into ``out`` (a shipped folder, or one inside it: the shipped results,
    which the notebooks read), or None; ``own``: a folder of one's own to suggest instead. A script's
    --replace-shipped is the user asking for it by name.

    Examples:
        >>> shipped_out_problem("runs/mine", "scripts/ablation.py", "runs/ablation") is None
        True
        >>> "--replace-shipped" in shipped_out_problem(SHIPPED_FOLDERS[0] / "ablation", "scripts/ablation.py",
        ...                                            "runs/ablation")
        True
    """
    folder = shipped_folder(out)
    if folder is None:
        return None
    where = folder if Path(out).expanduser().resolve() == folder else f"{out}, in the shipped folder {folder}"
    return (f"{script} would write into {'the shipped folder ' * (where == folder)}{where} (the notebooks and docs "
            f"read what is there; nothing was written). Fix: --out {own} (a folder of your own), or --replace-shipped "
            "to re-make the shipped files")


class ManifestDamaged(ValueError):
    """A ``MANIFEST.json`` entry that cannot be right (a key renamed, a number as text) or that
    disagrees with an intact file: the manifest is the damaged one, not the file it lists."""


def _manifest_entry(path: Path) -> dict | None:
    """``path``'s entry in the MANIFEST.json beside it ({"bytes": int, "sha256": 64 hex digits}), None if
    unlisted; ``ManifestDamaged`` naming the manifest if the entry is malformed."""
    manifest = path.parent / MANIFEST
    entry = read_json(manifest, shipped_fix(manifest)).get(path.name)
    if entry is None:
        return None
    sha = entry.get("sha256") if isinstance(entry, dict) else None
    if not (isinstance(entry, dict) and type(entry.get("bytes")) is int and isinstance(sha, str)
            and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
        raise ManifestDamaged(f"{manifest} is damaged: its entry for {path.name} is {json.dumps(entry)[:120]}, not "
                              '{"bytes": <an integer>, "sha256": <64 hex digits>} (a key renamed or a value edited; '
                              f"{path.name} itself may be intact). {shipped_fix(manifest)}")
    return entry


def shipped_file_problem(path: str | Path) -> str | None:
    """What is wrong with a file listed in the ``MANIFEST.json`` beside it (size, then SHA-256),
    or None: it matches, or it is not listed (a file the package did not ship). Where the manifest
    is the one in the wrong, ``ManifestDamaged`` says so: its entry is malformed, or the file's
    SHA-256 is the shipped one under another size, or differs from it in a digit or two (another
    file's would differ in nearly all 64)."""
    path = Path(path)
    if not (path.parent / MANIFEST).exists():  # a file outside the package's folders
        return None
    entry = _manifest_entry(path)
    if entry is None:
        return None
    size, want, sha = path.stat().st_size, entry["bytes"], file_sha256(path)
    edited = sum(a != b for a, b in zip(sha, entry["sha256"]))
    if (sha == entry["sha256"] and size != want) or (size == want and 0 < edited <= 4):
        what = (f'"bytes": {want:,}, but {path.name} has {size:,} bytes and exactly the SHA-256 it lists'
                if sha == entry["sha256"] else f'a "sha256" that differs from {path.name}\'s in only {edited} of its '
                '64 digits (a changed file changes nearly all of them)')
        manifest = path.parent / MANIFEST
        raise ManifestDamaged(f"{manifest} is damaged, not {path.name}: its entry says {what}. "
                              f"{shipped_fix(manifest)}")
    if size != want:
        kind = "empty" if size == 0 else "truncated" if size < want else "longer than shipped"
        return f"{kind}: {size:,} bytes, shipped with {want:,}"
    if sha != entry["sha256"]:
        return f"wrong content: SHA-256 {sha[:16]}..., shipped with {entry['sha256'][:16]}... (same size)"
    return None


def check_shipped(path: str | Path, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` naming a shipped file whose size or SHA-256 differs from its manifest, or
    naming the manifest where its entry is the damaged one."""
    try:
        problem = shipped_file_problem(path)
    except ValueError as e:  # the manifest: unreadable, or its entry the damaged one (ManifestDamaged)
        raise (e if error is ValueError else error(str(e))) from None
    if problem:
        raise error(f"{path} is damaged ({problem}). {shipped_fix(path)}")


def update_manifest(path: str | Path) -> None:
    """Record a (re)written shipped file's size and SHA-256 in the manifest beside it."""
    path = Path(path)
    manifest_path = path.parent / MANIFEST
    manifest = read_json(manifest_path, shipped_fix(manifest_path)) if manifest_path.exists() else {}
    manifest[path.name] = dict(bytes=path.stat().st_size, sha256=file_sha256(path))
    text = json.dumps(dict(sorted(manifest.items())), indent=1) + "\n"
    atomic_write(manifest_path, lambda f: f.write(text.encode()))


def write_shipped(files: dict[Path, bytes]) -> None:
    """(Re)write files that ship with the package together with their entries in the manifest beside
    them, all or nothing (``replace_together``): a failure leaves every file and the manifest as they were."""
    files = {Path(p): content for p, content in files.items()}
    folders = {p.parent for p in files}
    if len(folders) != 1:
        raise ValueError(f"write_shipped writes into one folder, got {sorted(map(str, folders))}")
    manifest_path = folders.pop() / MANIFEST
    manifest = read_json(manifest_path, shipped_fix(manifest_path)) if manifest_path.exists() else {}
    for path, content in files.items():
        manifest[path.name] = dict(bytes=len(content), sha256=hashlib.sha256(content).hexdigest())
    text = json.dumps(dict(sorted(manifest.items())), indent=1) + "\n"
    replace_together({**files, manifest_path: text.encode()})  # the manifest last
