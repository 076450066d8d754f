# The two commands a user needs are `make run` and `make test`; both set everything up first.
# `make help` lists every target.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
# What each install step put into .venv: the broker alone (make run), or everything.
BROKER_STAMP := $(VENV)/.installed-broker
STAMP        := $(VENV)/.installed
# Debian packages the integration tests use: kcat (a librdkafka CLI client) and zookeeper
# (ZooKeeper 3.8's jars, for ZooKeeper mode and bin/zookeeper-*.sh; it depends on default-jre,
# so it brings Java too, and it starts no service).
APT_PACKAGES := kcat zookeeper
# Node.js clients the integration tests run (kafkajs), pinned in tests/js/package-lock.json.
JS_STAMP := tests/js/node_modules/.installed

.PHONY: help install install-broker run test soak bench clean generate system-deps js-deps

help:
	@echo "make run             install the broker's dependencies into .venv and start a broker"
	@echo "                     with config/server.properties (127.0.0.1:9092, data in /tmp/kafka-logs)"
	@echo "make test            install everything (also Debian's kcat, zookeeper and, when npm is missing,"
	@echo "                     nodejs via apt-get; kafkajs via npm) and run the tests"
	@echo "make soak            the cluster fault run (kill -9, SIGSTOP, SIGTERM) for longer than make test's,"
	@echo "                     and a crash at every filesystem step of a log clean"
	@echo "make install         install everything into .venv: broker, Spark jobs, test clients"
	@echo "make install-broker  install only what the broker and bin/ tools need"
	@echo "make bench           run every benchmark (README, "Performance")"
	@echo "make generate        regenerate protocol/ from Kafka's message specs in protocol/spec"
	@echo "make clean           remove .venv and build leftovers"

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

install-broker: $(BROKER_STAMP)

$(BROKER_STAMP): pyproject.toml setup.py storage/_records.c | $(VENV)/bin/python
	$(PY) -m pip install -q -e .
	@touch $@

install: $(STAMP)

$(STAMP): pyproject.toml setup.py storage/_records.c | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[spark,test]'
	@touch $@ $(BROKER_STAMP)

# Installs missing Debian packages; needs root (or sudo) the first time only.
system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi
	@if ! command -v npm >/dev/null 2>&1; then \
	  echo "installing Debian packages: nodejs npm"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq nodejs npm; \
	fi

js-deps: $(JS_STAMP)

$(JS_STAMP): tests/js/package.json tests/js/package-lock.json | system-deps
	npm ci --prefix tests/js --no-audit --no-fund --silent
	@touch $@

run: install-broker
	bin/kafka-server-start.sh config/server.properties

test: install system-deps js-deps
	$(PY) -m pytest

# The replication fault test of `make test`, for KBROKER_FAULT_ROUNDS rounds of its schedule.
KBROKER_FAULT_ROUNDS ?= 10
soak: install system-deps
	KBROKER_FAULT_ROUNDS=$(KBROKER_FAULT_ROUNDS) $(PY) -m pytest -s -p no:cacheprovider \
	    --timeout=$$(( $(KBROKER_FAULT_ROUNDS) * 300 + 300 )) tests/integration/test_replication_faults.py
	KBROKER_CLEAN_CRASH_STEPS=all $(PY) -m pytest -p no:cacheprovider --timeout=1200 \
	    tests/storage/test_cleaner.py -k crash

bench: install system-deps
	$(PY) -m bench

# Regenerates protocol/messages and protocol/internal from protocol/spec (Kafka's message specs).
generate: install
	$(PY) -m protocol.codegen protocol/spec

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis tests/js/node_modules
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
