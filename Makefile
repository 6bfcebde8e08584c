# Two commands for a fresh machine (Python 3.10+):
#   make lab    set up .venv, register its Jupyter kernel, open JupyterLab on notebooks/
#   make test   set up .venv, lint (ruff, codespell), run pytest (package) + nbval (notebooks)
# Both create .venv on first use; `make clean` removes it.
#   make demo   train the cpu-tiny preset, execute every notebook headless into
#               runs/notebooks/ (.ipynb and .html)
#   make test-min  the oldest declared versions (requirements-min.txt) in .venv-min, then pytest tests
#   make e2e    the book's tests (tests/test_book.py) and JupyterLab and the book in a real browser
#               (chromium, tests/e2e); the browser tests skip, saying what to install, without one
#   make book   the executed notebooks as a static site in build/book/html (nothing re-run; offline)
#   make lint   ruff and codespell alone (`make test` runs them first)
#   make test-gpu  tests/gpu on a CUDA GPU (skipped, in one line, without one); needs no setup step:
#               the GPU machine's own python3 runs it (scripts/gpu_wheels.sh brings nbclient there)
#   make gpu-journey  every GPU part in one command (scripts/gpu_journey.py, docs/gpu.md): the pair, notebook 04,
#               test-gpu, gpu_compare, the scores; JOURNEY="--detach --wait 540" where a command is cut at 10 minutes

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Extra pip flags, e.g. PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu"
# to get the small CPU build of torch on a machine without a GPU.
PIP_ARGS ?=
# Deterministic, quiet runs: fixed thread count (notebook outputs depend on it),
# no progress bars in compared output, headless matplotlib.
TEST_ENV := OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 TQDM_DISABLE=1 MPLBACKEND=Agg PYTHONHASHSEED=0 TXL_CORPUS=text8-mini
# make test: the tests and the notebooks in one pytest session, two files at a time (pytest-xdist, a file per
# worker), one thread each (TXL_THREADS=1 replaces the notebooks' seed_everything(0, threads=2)); their outputs
# pass at 1 and 2 threads. Files are handed out in the order given (--no-loadscope-reorder): the three longest
# notebooks first, so that the tests and the short notebooks fill the other worker's time.
PAR_ENV  := OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TXL_THREADS=1 TQDM_DISABLE=1 MPLBACKEND=Agg PYTHONHASHSEED=0 TXL_CORPUS=text8-mini
PAR      := -n 2 --dist loadfile --no-loadscope-reorder
LONGEST  := notebooks/06_context_usage.ipynb notebooks/01_context_fragmentation.ipynb notebooks/03_segment_recurrence.ipynb
NBVAL    := --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg --nbval-cell-timeout 900
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9]*.ipynb))

# Extra JupyterLab flags, e.g. LAB_ARGS="--no-browser --port=8899"; as root (containers)
# the server needs --allow-root, which is added then.
LAB_ARGS ?=
LAB_ROOT := $(if $(filter 0,$(shell id -u 2>/dev/null)),--allow-root)

.PHONY: setup lab demo test test-fast test-min test-gpu gpu-journey e2e book lint notebooks benchmark clean

$(VENV)/.installed: requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(PIP_ARGS) -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

setup: $(VENV)/.installed

# The venv's kernel, by the absolute path of its python, inside the venv (--sys-prefix):
# the notebooks ask for "python3", and get this one.
$(VENV)/.kernel: $(VENV)/.installed
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (.venv)"
	touch $@

lab: $(VENV)/.kernel
	$(PY) -m jupyterlab --ServerApp.root_dir=notebooks $(LAB_ROOT) $(LAB_ARGS)

demo: setup
	$(PY) -m txl_minimal.train --preset cpu-tiny --out runs/cpu-tiny
	@mkdir -p runs/notebooks
	@for nb in $(NOTEBOOKS); do \
	  echo "executing $$nb"; \
	  MPLBACKEND=Agg $(VENV)/bin/jupyter nbconvert --to notebook --execute \
	    --ExecutePreprocessor.timeout=1800 --output-dir runs/notebooks $$nb || exit 1; \
	  $(VENV)/bin/jupyter nbconvert --to html --log-level=WARN runs/notebooks/$$(basename $$nb) || exit 1; \
	done
	@echo "executed notebooks are in runs/notebooks/ (open the .html files in any browser)"

# The gensim wheel carries the Wikipedia excerpt text8-mini is built from; with it
# the tests check that data/build_text8_mini.py rebuilds the shipped file bit for bit.
data/cache/.gensim-fetched:
	@mkdir -p data/cache
	@$(PY) -m pip download -q --no-deps gensim==4.4.0 -d data/cache \
	  || echo "gensim wheel unavailable: the text8-mini rebuild test will be skipped"
	@touch $@

# The browser tests are left to `make e2e` (CI runs both), so that a browser's presence adds nothing to this.
test: setup $(VENV)/.kernel data/cache/.gensim-fetched lint
	$(PAR_ENV) $(PY) -m pytest -q $(PAR) $(NBVAL) --ignore=tests/e2e $(LONGEST) tests $(filter-out $(LONGEST),$(NOTEBOOKS))

test-fast: setup $(VENV)/.kernel
	$(PAR_ENV) $(PY) -m pytest -q $(PAR) --ignore=tests/e2e tests

# The oldest versions the project declares (requirements-min.txt, equal to pyproject's floors),
# alone in their own venv, rebuilt from scratch when the list changes. About 5.4 GB: PyPI's
# Linux torch wheels bring the CUDA libraries, which libtorch links against even on a CPU.
VENV_MIN ?= .venv-min
$(VENV_MIN)/.installed: requirements-min.txt pyproject.toml
	rm -rf $(VENV_MIN)
	$(PYTHON) -m venv $(VENV_MIN)
	$(VENV_MIN)/bin/python -m pip install -q --upgrade pip
	$(VENV_MIN)/bin/python -m pip install -q $(PIP_ARGS) -r requirements-min.txt
	$(VENV_MIN)/bin/python -m pip install -q --no-deps -e .
	touch $@

# The package's tests (the notebooks' stored outputs come from requirements-dev.txt's versions).
test-min: $(VENV_MIN)/.installed
	$(TEST_ENV) $(VENV_MIN)/bin/python -m pytest -q -p no:cacheprovider tests

# JupyterLab driven by chromium through chromium-driver and selenium: notebooks 00 and 05 run
# through the UI, screenshots in runs/e2e/. It also builds the book once (with the book's packages,
# which it installs) and reads its HTML (tests/test_book.py), then visits every page in chromium
# (tests/e2e/test_book_browser.py). CI runs it after `make test` (.ci/run).
e2e: setup $(VENV)/.kernel $(VENV)/.book
	$(TEST_ENV) $(PY) -m pytest -q -rs -s -p no:cacheprovider tests/test_book.py tests/e2e

# The book: README (landing page), the notebooks as built from their stored outputs, docs/ (the
# manual), a package map and CONTRIBUTING, by Sphinx + MyST-NB, with MathJax served from the site
# (book/build.py).
# Needs only requirements-book.txt (no torch: nothing runs), installed into .venv on first use.
BOOK_OUT ?= build/book
$(VENV)/.book: requirements-book.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q $(PIP_ARGS) -r requirements-book.txt
	touch $@

book: $(VENV)/.book
	$(PY) book/build.py --out $(BOOK_OUT)

# Lint: ruff (rules in pyproject.toml) over the code, codespell over the code and the notebooks'
# markdown (scripts/codespell_notebooks.py). `make test` runs it first.
LINT_PATHS := txl_minimal tests scripts benchmarks book data
lint: setup
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/codespell $(LINT_PATHS) README.md CONTRIBUTING.md CITATION.cff .github docs
	$(PY) scripts/codespell_notebooks.py notebooks

# What only a CUDA GPU can check (tests/gpu; docs/gpu.md). No venv is made: a GPU machine may have
# no network, so its own python (GPU_PY: the venv's if there is one, else python3) runs the tests with
# this checkout first on PYTHONPATH (then what PYTHONPATH held: /tmp/site from scripts/gpu_wheels.sh).
# GPU_TESTS adds pytest arguments, e.g. GPU_TESTS='-k "not notebook"' (notebook 04 trains for minutes).
GPU_PY ?= $(if $(wildcard $(PY)),$(PY),python3)
GPU_TESTS ?=
# Without a GPU every module is skipped at collection, which pytest reports as exit status 5.
test-gpu:
	@PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} TQDM_DISABLE=1 MPLBACKEND=Agg PYTHONHASHSEED=0 \
	  $(GPU_PY) -m pytest -q -rs -p no:cacheprovider tests/gpu $(GPU_TESTS); rc=$$?; \
	  if [ $$rc -eq 5 ] && $(GPU_PY) -c "import torch, sys; sys.exit(torch.cuda.is_available())"; then \
	    echo "make test-gpu: no GPU here, nothing to run"; exit 0; fi; exit $$rc

# The GPU journey (docs/gpu.md): the GPU pair, notebook 04, test-gpu, gpu_compare and the scores, as background
# processes of one launch writing runs/gpu-journey/; run again, it skips what is done and resumes what was cut.
# JOURNEY adds arguments: "--detach --wait 540", "--status", "--device cpu --tiny" (the rehearsal), "--prepare".
JOURNEY ?=
gpu-journey:
	$(GPU_PY) scripts/gpu_journey.py $(JOURNEY)

# Re-run the notebooks in place with the test environment (to refresh stored outputs).
notebooks: setup
	@for nb in $(NOTEBOOKS); do \
	  echo "executing $$nb"; \
	  $(TEST_ENV) $(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=1800 --ExecutePreprocessor.record_timing=False $$nb || exit 1; \
	done

# Writes benchmarks/results.json; benchmarks/results-cpu.json is the committed reference run
# (made with --threads 1, see benchmarks/README.md) and is not overwritten.
benchmark: setup
	$(PY) benchmarks/bench.py --json benchmarks/results.json

clean:
	rm -rf $(VENV) $(VENV_MIN)
