# execd: `make run` starts the daemon in the foreground on the default config;
# `make test` installs what it needs and runs every test tier.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint venv clean docs bench bench-pool gpu-bundle

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(PY) -m execd run --stderr

lint: $(STAMP)
	$(PY) -m ruff check execd tests bench
	$(PY) -m mypy --strict execd

test: $(STAMP)
	$(MAKE) --no-print-directory lint
	$(PY) tests/tiers.py setup
	$(PY) tests/run_tiers.py

docs: $(STAMP)
	$(PY) -m execd.config.docgen > docs/config.md

# bench_pool.py is left to `make bench-pool`: it needs the pool tier's chroot
# (`python tests/tiers.py setup`) and runs two 200-job clusters (~10 minutes).
bench: $(STAMP)
	for b in $(filter-out bench/bench_pool.py,$(wildcard bench/bench_*.py)); do $(PY) $$b || exit 1; done

# condor_startd against execd in one real pool; EXECD_POOL_ROOT picks the chroot,
# BENCH_POOL_ARGS passes options (e.g. --check, --jobs 50, --only condor).
bench-pool: $(STAMP)
	$(PY) bench/bench_pool.py $(BENCH_POOL_ARGS)

# .gpu/: the pool chroot pruned and compressed, plus wheels, for a GPU machine without
# network (tests/gpu/README.md); as root, from EXECD_POOL_ROOT's chroot.
gpu-bundle: $(STAMP)
	$(PY) tests/gpu/bundle.py build

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
