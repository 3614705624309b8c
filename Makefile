# trajectory-streams: developer entry points.  `make help` lists them.
#
# Everything installs what it needs: `make test` on a fresh clone pip-installs the
# project with its test extras, downloads Kafka 3.9.1's jars with mvn (once, into
# .cache/), and runs unit + integration tests; the integration tests start and
# stop their own broker on free ports unless KAFKA_BOOTSTRAP names one.

PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
PYTEST_TIMEOUT ?= 300
PYTEST_ARGS ?=
# pytest-xdist: test and integration run on PYTEST_WORKERS processes (0: one process).
# The integration tests of all workers share one Kafka broker (tests/integration/conftest.py).
# --dist loadgroup: our scheduler (tests/xdist_scopes.py): one unit per integration module,
# so module-scoped fixtures run once per run; heavy units first.
PYTEST_WORKERS ?= 6
PYTEST_DIST ?= loadgroup
XDIST := $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist $(PYTEST_DIST))
CACHE ?= .cache
# Reinstall when pyproject.toml changes or another interpreter is used.
INSTALL_STAMP := $(CACHE)/install-$(subst /,_,$(shell command -v $(PYTHON) 2>/dev/null || echo $(PYTHON))).stamp

.DEFAULT_GOAL := help
.PHONY: help install jars browser broker broker-stop broker-status test unit integration lint format demo bench aims clean

help:
	@echo "make install        pip install -e '.[test]' (only when pyproject.toml changed)"
	@echo "make test           install, fetch Kafka jars, run unit + integration tests"
	@echo "make unit           unit tests only (no broker)"
	@echo "make integration    integration tests only (starts its own broker unless KAFKA_BOOTSTRAP)"
	@echo "make broker         start a local Kafka on 127.0.0.1:9092 (background)"
	@echo "make broker-stop    stop it; make broker-status: is it running and answering?"
	@echo "make lint           ruff check + ruff format --check + mypy --strict streams"
	@echo "make demo           install, then python -m streams demo"
	@echo "make bench          run the benchmark scripts in tests/bench"
	@echo "make aims           issue #12's aims side by side, best of 3 (~8 min)"
	@echo "variables: PYTHON=$(PYTHON) PYTEST_TIMEOUT=$(PYTEST_TIMEOUT) PYTEST_ARGS='$(PYTEST_ARGS)'"
	@echo "           PYTEST_WORKERS=$(PYTEST_WORKERS) (pytest-xdist processes; 0: none) PYTEST_DIST=$(PYTEST_DIST)"

install: $(INSTALL_STAMP)

$(INSTALL_STAMP): pyproject.toml
	@mkdir -p $(CACHE)
	$(PIP) install -q -e '.[test]'
	@touch $@

jars: install
	$(PYTHON) -c "from streams.broker import ensure_jars; print('kafka jars:', ensure_jars())"

broker: install
	$(PYTHON) -m streams broker start

broker-stop:
	$(PYTHON) -m streams broker stop

broker-status:
	$(PYTHON) -m streams broker status

# Headless Chromium renders the HTML report in tests/integration/test_report_browser.py.
# Installed from Debian's packages when we are root and apt-get exists; otherwise
# that one test skips and says why.
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the report browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "chromium not installed (needs root + apt-get): the browser test will skip"; fi

test: install jars browser
	$(PYTHON) -m pytest -q --timeout=$(PYTEST_TIMEOUT) $(XDIST) $(PYTEST_ARGS)

unit: install
	$(PYTHON) -m pytest -q --timeout=$(PYTEST_TIMEOUT) -m "not integration" $(PYTEST_ARGS)

integration: install jars
	$(PYTHON) -m pytest -q --timeout=$(PYTEST_TIMEOUT) -m integration $(XDIST) $(PYTEST_ARGS)

lint: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy --strict streams

format: install
	$(PYTHON) -m ruff format .
	$(PYTHON) -m ruff check --fix .

demo: install
	$(PYTHON) -m streams demo

# Benchmarks that need Kafka use $$KAFKA_BOOTSTRAP; if unset, a broker of our own
# is started on BENCH_PORT (data in .cache/bench-broker) and stopped afterwards.
BENCH_PORT ?= 29092
BENCH_CONTROLLER_PORT ?= 29093
BENCH_BROKER = --port $(BENCH_PORT) --controller-port $(BENCH_CONTROLLER_PORT) --data-dir $(CACHE)/bench-broker

bench: install jars
	@set -e; \
	if [ -z "$${KAFKA_BOOTSTRAP:-}" ]; then \
		trap '$(PYTHON) -m streams broker stop $(BENCH_BROKER)' EXIT; \
		$(PYTHON) -m streams broker start $(BENCH_BROKER); \
		export KAFKA_BOOTSTRAP=127.0.0.1:$(BENCH_PORT); \
	fi; \
	for script in tests/bench/*.py; do \
		echo "== $$script (KAFKA_BOOTSTRAP=$$KAFKA_BOOTSTRAP)"; $(PYTHON) $$script; \
	done

# Every aim of issue #12 in one run on one broker, best of 3 (tests/bench/bench_aims.py;
# it starts a broker of its own on $$KAFKA_BOOTSTRAP's port when none answers).
aims: install jars
	$(PYTHON) tests/bench/bench_aims.py

clean:
	rm -rf build *.egg-info .pytest_cache .mypy_cache .ruff_cache $(INSTALL_STAMP)
