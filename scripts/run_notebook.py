"""Execute a notebook top to bottom with nbclient, cell by cell, and write it after every cell,
so that a run cut off (a machine's time limit) still shows how far it got. Prints each code
cell's time and the first line of its error; exits 1 if any cell raised.

    python scripts/run_notebook.py notebooks/04_training_text8.ipynb /tmp/nb04.ipynb
    python scripts/run_notebook.py IN.ipynb OUT.ipynb --cwd notebooks --timeout 3600

The kernel is the "python3" one, which ipykernel provides for the python running this (no
kernelspec needs installing); the notebook's cells run in --cwd (default: the notebook's folder),
with this process's environment (PYTHONPATH included). nbclient, nbformat and ipykernel are needed:
``scripts/gpu_wheels.sh`` brings them to a machine without a network (docs/gpu.md).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Optional
from collections.abc import Callable


def run_notebook(src: str | Path, dst: Optional[str | Path] = None, cwd: Optional[str | Path] = None,
                 timeout: int = 3600, log: Callable[[str], None] = print) -> dict:
    """Run every code cell of ``src`` in order (on past an error, as a reader would see it), writing the
    executed notebook to ``dst`` after each. Returns {"cells", "errors": [(index, name, message)], "seconds"}."""
    import nbformat
    from nbclient import NotebookClient

    src = Path(src)
    nb = nbformat.read(src, as_version=4)
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(cwd or src.parent)}})
    errors, n, t_start = [], 0, time.perf_counter()
    with client.setup_kernel():
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            t0 = time.perf_counter()
            client.execute_cell(cell, i)
            n += 1
            failed = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if failed:
                errors.append((i, failed[0]["ename"], failed[0]["evalue"]))
            message = f" ERROR {failed[0]['ename']}: {failed[0]['evalue'][:300]}" if failed else ""
            log(f"cell {i}: {time.perf_counter() - t0:.1f} s{message}")
            if dst is not None:
                nbformat.write(nb, str(dst))
    return dict(cells=n, errors=errors, seconds=time.perf_counter() - t_start)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebook")
    p.add_argument("out", nargs="?", help="where the executed notebook is written (after every cell)")
    p.add_argument("--cwd", help="the cells' working directory (default: the notebook's folder)")
    p.add_argument("--timeout", type=int, default=3600, help="seconds for one cell")
    args = p.parse_args(argv)
    res = run_notebook(args.notebook, args.out, args.cwd, args.timeout, log=lambda line: print(line, flush=True))
    print(f"{args.notebook}: {res['cells']} code cells in {res['seconds']:.0f} s, {len(res['errors'])} with an error",
          flush=True)
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
