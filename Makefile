# The two commands a user needs are `make run` and `make test`; both set everything up first.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# Debian packages the integration tests use: kcat (a librdkafka CLI client).
APT_PACKAGES := kcat

.PHONY: install run test bench clean generate system-deps

install: $(STAMP)

$(STAMP): pyproject.toml setup.py storage/_records.c
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

# Installs missing Debian packages; needs root (or sudo) the first time only.
system-deps:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

run: install
	bin/kafka-server-start.sh config/server.properties

test: install system-deps
	$(PY) -m pytest

bench: install system-deps
	$(PY) -m bench

# Regenerates protocol/messages and protocol/internal from ../shared/kafka-protocol.
generate: install
	$(PY) -m protocol.codegen ../shared/kafka-protocol

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
