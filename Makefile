# The README's two commands. Both bootstrap .venv with pinned dependencies on a fresh machine.
# torch is installed first and pinned on its own: an unpinned torch would pull GBs of CUDA wheels.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.titan-installed
TORCH_VERSION := 2.13.0
# A second environment with upstream torchtitan, which titan's own never has: migrations to
# torchtitan==0.3.0 are checked against the real package there.
UPSTREAM_VENV := .venv-upstream
UPSTREAM_PY := $(UPSTREAM_VENV)/bin/python
UPSTREAM_STAMP := $(UPSTREAM_VENV)/.titan-upstream-installed
# torchtitan 0.3.0's wheel, downloaded and never installed: `make test` reads the registry modules
# in it to check titan-validate's static check of upstream modules without torchtitan.
UPSTREAM_VERSION := $(shell sed -n 's/^torchtitan==//p' requirements-upstream.txt)
UPSTREAM_WHEEL := $(VENV)/upstream-wheel/torchtitan-$(UPSTREAM_VERSION)-py3-none-any.whl

.PHONY: demo test test-fast test-torch test-upstream lint bench bench-upstream schema schema-upstream clean

$(STAMP): requirements.txt pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==$(TORCH_VERSION)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $(STAMP)

$(UPSTREAM_STAMP): requirements-upstream.txt
	test -x $(UPSTREAM_PY) || $(PYTHON) -m venv $(UPSTREAM_VENV)
	$(UPSTREAM_PY) -m pip install --quiet --disable-pip-version-check torch==$(TORCH_VERSION)
	$(UPSTREAM_PY) -m pip install --quiet --disable-pip-version-check -r requirements-upstream.txt
	touch $(UPSTREAM_STAMP)

$(UPSTREAM_WHEEL): requirements-upstream.txt | $(STAMP)
	$(PY) -m pip download --quiet --disable-pip-version-check --no-deps \
		torchtitan==$(UPSTREAM_VERSION) -d $(VENV)/upstream-wheel

demo: $(STAMP)
	$(PY) -m titan.demo

# Two pytest-xdist workers, a fixed number (CI has two cores); --dist loadgroup keeps each
# module's multi-process tests, which tests/conftest.py groups by module, on one worker, one at a
# time.
PARALLEL := -n 2 --dist loadgroup

test: $(STAMP) $(UPSTREAM_WHEEL)
	TITAN_UPSTREAM_WHEEL=$(abspath $(UPSTREAM_WHEEL)) $(PY) -m pytest -q --durations=15 $(PARALLEL) --ignore=tests/upstream

# Everything except the tests marked `slow` (real training runs and multi-process launches).
test-fast: $(STAMP) $(UPSTREAM_WHEEL)
	TITAN_UPSTREAM_WHEEL=$(abspath $(UPSTREAM_WHEEL)) $(PY) -m pytest -q --durations=15 $(PARALLEL) -m "not slow" --ignore=tests/upstream

# `make test-fast` on another torch release, in its own environment .venv-torch-VERSION (made on
# first use, with the same pinned dependencies): how both ends of the supported range
# (titan/torch_support.py) are proven. On PyPI, torch for Linux x86_64 is a CUDA build (several
# GB); the suite runs it on the CPU. setuptools (titan's build backend, >= 68) is left to agree
# with that torch's own bounds.
TORCH ?= 2.11.0
TORCH_VENV := .venv-torch-$(TORCH)

test-torch: $(UPSTREAM_WHEEL)
	test -x $(TORCH_VENV)/bin/python || $(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check torch==$(TORCH) 'setuptools>=68'
	$(TORCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(TORCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	$(TORCH_VENV)/bin/python -c "import torch; assert torch.__version__.startswith('$(TORCH)'), torch.__version__"
	TITAN_UPSTREAM_WHEEL=$(abspath $(UPSTREAM_WHEEL)) $(TORCH_VENV)/bin/python -m pytest -q --durations=15 $(PARALLEL) -m "not slow" --ignore=tests/upstream

# The tests against upstream torchtitan itself, in .venv-upstream (made on first use), on two
# workers (790 s on one here, 538 s on two).
test-upstream: $(STAMP) $(UPSTREAM_STAMP)
	TITAN_UPSTREAM_PYTHON=$(abspath $(UPSTREAM_PY)) $(PY) -m pytest -q -n 2 tests/upstream

lint: $(STAMP)
	$(VENV)/bin/ruff check schemas migrate titan tests bench examples
	$(VENV)/bin/ruff format --check schemas migrate titan tests bench examples

bench: $(STAMP) $(UPSTREAM_WHEEL)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-bench.txt
	$(PY) bench/validate_corpus.py
	$(PY) bench/config_help.py
	$(PY) bench/migrate_corpus.py
	$(PY) bench/trainer_overhead.py
	$(PY) bench/validate_registry.py
	$(PY) bench/upstream_static.py --wheel $(UPSTREAM_WHEEL)
	$(PY) bench/migrate_tree.py
	$(PY) bench/fix_scaling.py
	$(PY) bench/suite_launches.py

# titan-train against upstream torchtitan 0.3.0 on the same weights and batches (fp32, CPU):
# both losses and the step-time ratio; exits 1 when the losses disagree (bench/RESULTS.md).
bench-upstream: $(STAMP) $(UPSTREAM_STAMP)
	OMP_NUM_THREADS=1 $(PY) bench/vs_torchtitan.py --family llama3
	OMP_NUM_THREADS=1 $(PY) bench/vs_torchtitan.py --family llama3 --upstream-attention sdpa
	OMP_NUM_THREADS=1 $(PY) bench/vs_torchtitan.py --family qwen3 --shape small --steps 6

# Regenerate the files derived from schemas/legacy.py, titan's config classes and its families'
# flavors (tests fail while they are stale).
schema: $(STAMP)
	$(PY) -m titan.schemas.spec_codegen
	$(VENV)/bin/ruff format -q schemas/legacy_spec.py
	$(PY) -m titan.migrate.specgen.target_codegen
	$(VENV)/bin/ruff format -q migrate/targets/titan_spec.py
	$(PY) -m titan.schemas.flavor_codegen
	$(VENV)/bin/ruff format -q schemas/flavor_table.py schemas/flavor_configs.py
	$(VENV)/bin/titan-validate --export-json-schema schemas/json/torchtitan-v0.2.2.schema.json

# Regenerate migrate/targets/upstream_spec_030.py (what a migration writes) and
# upstream_api_030.py (what a registry module can call: the static check's table) from the
# torchtitan installed in .venv-upstream (tests/upstream fail while they are stale).
schema-upstream: $(STAMP) $(UPSTREAM_STAMP)
	PYTHONPATH=$(CURDIR) $(UPSTREAM_PY) -m titan.migrate.specgen.upstream_codegen
	PYTHONPATH=$(CURDIR) $(UPSTREAM_PY) -m titan.migrate.specgen.upstream_api_codegen
	$(VENV)/bin/ruff format -q migrate/targets/upstream_spec_030.py migrate/targets/upstream_api_030.py

clean:
	rm -rf $(VENV) $(UPSTREAM_VENV) .pytest_cache .hypothesis
