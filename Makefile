# Two entry points on a fresh machine: `make demo` and `make test` (see README.md).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO := build/demo
# Open MPI refuses to start as root without these; harmless for other users.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: demo test install clean

install: $(STAMP)

# DLIO 2.0.0 declares dependencies that cannot install here (CUDA stubs), so it goes in with
# --no-deps and requirements.txt lists what it really needs.
$(STAMP): requirements.txt requirements-test.txt pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-test.txt
	$(PY) -m pip install -q --no-deps dlio-benchmark==2.0.0
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

# A small end-to-end demo in build/demo: a fresh results tree, a CLOSED training datasize,
# the report and the validator over what exists. Nothing outside build/ is touched.
demo: $(STAMP)
	rm -rf $(DEMO)
	mkdir -p $(DEMO)
	XDG_CONFIG_HOME=$(abspath $(DEMO))/config $(VENV)/bin/mlpstorage init DemoOrg $(DEMO)/results
	XDG_CONFIG_HOME=$(abspath $(DEMO))/config $(VENV)/bin/mlpstorage closed training unet3d datasize \
		--accelerator-type b200 --max-accelerators 8 --client-host-memory-in-gb 32 --num-client-hosts 1 \
		--systemname demo-system
	XDG_CONFIG_HOME=$(abspath $(DEMO))/config $(VENV)/bin/mlpstorage reports reportgen
	XDG_CONFIG_HOME=$(abspath $(DEMO))/config $(VENV)/bin/mlpstorage validate
	@echo "demo results tree: $(DEMO)/results"

clean:
	rm -rf build $(VENV)
