"""What a notebook's first cell imports: ``check`` (a claim, named when it fails), ``seed_everything``
and ``LN2``.

The helpers this module held before each job had a module of its own are imported here too (the two
above among them), so that ``from txl_minimal.utils import ...`` still finds them:
scores.py (bpc or perplexity), machine.py (devices, seeds), files.py (atomic writes, folder checks),
shipped_files.py (MANIFEST.json and checksums), finite.py (NaN and inf), cli.py (what the command
lines share) and run_lock.py (OUT/train.lock). A patch goes where a name lives now."""
from __future__ import annotations

from txl_minimal.cli import Once, callable_module, int_at_least, terminal_progress  # noqa: F401
from txl_minimal.files import (NO_SPACE, NOT_WRITABLE, WriteError, atomic_write, atomic_write_text,  # noqa: F401
                               file_in_the_way, folder_problem, os_error_in, read_json, refuse_empty_path,
                               remove_leftovers, replace_together, write_problem)
from txl_minimal.finite import all_finite, non_finite  # noqa: F401
from txl_minimal.machine import bf16_speedup, check_device, default_device, seed_everything  # noqa: F401
from txl_minimal.run_lock import lock_is_stale, read_lock, training_now  # noqa: F401
from txl_minimal.scores import LN2, score_name, score_of  # noqa: F401
from txl_minimal.shipped_files import (MANIFEST, ManifestDamaged, check_shipped, file_sha256,  # noqa: F401
                                       shipped_file_problem, shipped_fix, update_manifest, write_shipped)


def check(condition: bool, claim: str) -> None:
    """A notebook's claim, checked at the end of the cell that makes it: silent when it holds,
    an ``AssertionError`` naming the claim when it does not (say, for a reader's own model)."""
    if not condition:
        raise AssertionError(f"this claim does not hold here: {claim}")
