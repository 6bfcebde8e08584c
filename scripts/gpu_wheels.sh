#!/usr/bin/env bash
# Bring the Jupyter packages that tests/gpu needs (to execute notebook 04) to a GPU machine that has
# torch, numpy, matplotlib, seaborn, tqdm and pytest but no Jupyter packages and no network.
#
#   scripts/gpu_wheels.sh download   # on a machine with PyPI: wheels for the GPU machine into .whl/
#   scripts/gpu_wheels.sh install    # on the GPU machine: install .whl/ into /tmp/site (no network)
#   export PYTHONPATH=/tmp/site:$PWD # then: make test-gpu
#
# .whl/ is ignored by git: carry it to the GPU machine beside the checkout. The defaults describe
# the machine seen in issue 30 (Python 3.12, manylinux x86_64); change them with the variables below.
# Left out: what that machine had already (attrs, packaging, psutil, pygments, python-dateutil,
# typing-extensions; remove a name from SKIP if yours lacks it), and what executing a notebook does not
# need: debugpy (ipykernel's debugger), jedi (IPython's completions), prompt_toolkit and wcwidth (IPython's
# terminal) and tzdata. Without those five, a notebook with a magic, display(), an error and a last
# expression ran through scripts/run_notebook.py on a bare Python 3.12: 26 wheels, 3.4 MB instead of 31
# and 15 MB (a GPU machine may take only so much along with the checkout).
set -euo pipefail
cd "$(dirname "$0")/.."

WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/site}
PYVER=${PYVER:-3.12}
PACKAGES=${PACKAGES:-"nbclient==0.10.2 ipykernel==7.4.0 nbformat==5.11.1"}
SKIP=${SKIP:-"attrs packaging psutil pygments python_dateutil typing_extensions debugpy jedi prompt_toolkit wcwidth tzdata"}
PY=${PY:-python3}

case "${1:-}" in
  download)
    mkdir -p "$WHEELS"
    # shellcheck disable=SC2086
    "$PY" -m pip download -q --only-binary=:all: --python-version "$PYVER" --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$WHEELS" $PACKAGES
    for name in $SKIP; do
      rm -f "$WHEELS/$name"-*.whl
    done
    echo "$(ls "$WHEELS"/*.whl | wc -l) wheels in $WHEELS/ ($(du -sh "$WHEELS" | cut -f1)); on the GPU machine: $0 install"
    ;;
  install)
    ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "no wheels in $WHEELS/: run '$0 download' where PyPI is reachable" >&2; exit 1; }
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$WHEELS"/*.whl
    echo "installed into $SITE; now: export PYTHONPATH=$SITE:$PWD && make test-gpu"
    ;;
  *)
    echo "usage: $0 download|install   (see the comments at the top)" >&2
    exit 2
    ;;
esac
