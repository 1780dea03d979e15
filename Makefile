# Two commands set up a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: install lint demo test bench chaos clean check-java jvm maven apt-maven postgres-server apt-postgres

check-java:
	@java -version >/dev/null 2>&1 || { echo "sparklink needs Java 17 or newer on PATH (PySpark runs on the JVM): install openjdk-17-jre-headless"; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1); \
	  [ "$${v:-0}" -ge 17 ] || { echo "sparklink needs Java 17 or newer; found Java $$v"; exit 1; }

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: check-java $(STAMP)

demo: install
	$(VENV)/bin/sparklink demo

# First lint and types of src/ (seconds: ruff's rules and mypy's modules are in pyproject.toml), then the tests.
# pytest's exit status passes through; 5 (nothing collected) is a failure, said as such.
lint: install
	$(VENV)/bin/ruff check src
	$(VENV)/bin/mypy

# What the tests need from the system and a fresh machine may lack, installed through apt when
# missing (as root, or through sudo); each step does nothing when it is there already.
APT_GET = $(if $(filter 0,$(shell id -u)),,sudo )env DEBIAN_FRONTEND=noninteractive apt-get
define apt_install
	@$(if $(filter 0,$(shell id -u)),true,command -v sudo >/dev/null 2>&1) || { echo "$(1): not found, and installing it needs root (or sudo): apt-get install $(2)"; exit 1; }
	@echo "installing $(1) through apt: $(2)"
	$(APT_GET) update -qq
	$(APT_GET) install -y -qq --no-install-recommends $(2)
endef

# Maven, which fetches the JVM artifacts of the tests and benchmarks
maven:
	@if ! command -v mvn >/dev/null 2>&1; then $(MAKE) --no-print-directory apt-maven; fi

apt-maven:
	$(call apt_install,Maven (mvn),maven)

# PostgreSQL's server binaries (initdb, pg_ctl): the PostgreSQL tests start private servers with them
postgres-server:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then $(MAKE) --no-print-directory apt-postgres; fi

apt-postgres:
	$(call apt_install,PostgreSQL's server binaries (/usr/lib/postgresql/*/bin/initdb),postgresql)

# The JVM artifacts of the tests and benchmarks (tests/jvm/<set>/pom.xml): resolved by Maven into
# ~/.cache/sparklink/jvm (outside git) when missing or when a manifest changed; seconds once cached. Then
# the peers' own PySpark venvs (Spark connectors that serve no Spark 4.3 yet: docs/peers.md), made once.
jvm: install maven
	$(PY) -m sparklink.testing.maven
	$(PY) -m sparklink.testing.peers

# Two worker processes (pytest-xdist): the suite keeps one core busy on average, so a second worker
# fills the other; the work units and their order are sparklink.testing.fixtures' (docs/testing.md).
TEST_WORKERS ?= 2
test: lint jvm postgres-server
	@PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q --durations=25 -n $(TEST_WORKERS) --dist loadgroup \
	  --no-loadscope-reorder tests examples/conformance; status=$$?; \
	  if [ $$status -eq 5 ]; then echo "pytest collected no tests (exit 5): check the test paths"; fi; exit $$status

# The chaos soak (sparklink.testing.chaos): 20 SIGKILLs, at moments drawn from commit-log progress, of a continuous pipeline (file source -> file sink and
# PostgreSQL two-phase), then 20 of the CDC pipeline (sparklink.postgres-cdc on two changing tables -> file sink: changes in, rows
# out, mismatches, slot lag). KILLS=n to change; the test suite runs a short version of the first.
KILLS ?= 20
chaos: install
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m sparklink.testing.chaos --kills $(KILLS) --cdc-kills $(KILLS)

bench: install jvm postgres-server
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache
