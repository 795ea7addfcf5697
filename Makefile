# The two commands of the README: `make run` and `make test`.
VENV   := .venv
PY     := $(VENV)/bin/python
PYTHON ?= $(shell command -v python3.11 || command -v python3)
# Bytecode caches are written even where the environment asks Python not
# to: `make test` starts dozens of Python processes (pytest's workers, the
# servers and workers the tests start), and each would compile the
# studio's modules, and rewrite the tests' asserts, all over again.
unexport PYTHONDONTWRITEBYTECODE

# What `make test` talks to: this machine's PostgreSQL and Redis by default.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/studio
TEST_REDIS_URL    ?= redis://127.0.0.1:6379/0

.PHONY: install install-dev js-install run test test-loaded test-fast test-sqlite lint format services bench clean

PIP := $(PY) -m pip install --quiet --disable-pip-version-check

# What the studio needs to run (requirements.txt) ...
install: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements.txt
	touch $@

# ... and what the tests, the linter and the benchmarks add (requirements-dev.txt),
# with the Python client (clients/python), editable, for its tests to import.
# It depends on the stamp above, so a change to any of these files reinstalls.
install-dev: $(VENV)/.installed-dev

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt clients/python/pyproject.toml
	$(PIP) -r requirements-dev.txt
	$(PIP) -e ./clients/python
	touch $@

# Where `make run` serves the studio: `make run PORT=8010`.
PORT ?= 8000

# ... and, for the JavaScript client's tests (tests/clients/test_js_client.py),
# Node.js and the client's development packages (ws; typescript, for the type
# check of its declarations), from its lock file.
# A machine without Node.js stops here, saying so: its tests are not skipped.
JS := clients/js

js-install: $(JS)/node_modules/.installed

$(JS)/node_modules/.installed: $(JS)/package-lock.json
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) < 18 ? 1 : 0)' 2>/dev/null && command -v npm >/dev/null || { \
	  echo "make test needs Node.js 18 or later and npm, for the JavaScript client's tests ($(JS)):"; \
	  echo "install them (on Debian: apt-get install nodejs npm), then run make test again."; \
	  exit 1; }
	cd $(JS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The studio on the embedded default (SQLite, in-process channel layer,
# compactions without a broker), with a demo game; prints a login and a key.
run: install
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py migrate --noinput
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py collectstatic --noinput -v0
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py seed_demo --url http://127.0.0.1:$(PORT)
	DJANGO_DEBUG=$${DJANGO_DEBUG:-true} $(PY) manage.py runserver 127.0.0.1:$(PORT)

# Lint, then every test, on PostgreSQL and Redis (started here when they are down).
test: install-dev js-install services
	$(VENV)/bin/ruff check .
	$(call every_test,$${DATABASE_URL:-$(TEST_DATABASE_URL)},$(EMBEDDED_LEG))

# `make test` with a CPU hog on every core beside it (stress-ng --cpu N,
# installed from Debian when missing), stopped however the run ends: the
# suite must pass on a loaded machine too (scripts/test_loaded.sh).
test-loaded:
	bash scripts/test_loaded.sh

# Lint, then the tests that neither drive a browser, nor start processes of
# their own, nor are slow by design (pytest.ini's markers). The schema fuzz
# is all slow, and only collecting it (schemathesis builds its cases then)
# cost each worker ~6 s: its file is not read, nor are the plugins only it
# uses (schemathesis's and hypothesis's, ~1.5 s of each worker's start).
test-fast: install-dev services
	$(VENV)/bin/ruff check .
	@export DATABASE_URL=$${DATABASE_URL:-$(TEST_DATABASE_URL)} REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)}; \
	$(PY) -m pytest --ignore=tests/browser --ignore=tests/api/test_schema_fuzz.py \
		-p no:schemathesis -p no:hypothesispytest -m "not browser and not processes and not slow" \
		-n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# The same suites on the embedded SQLite database.
test-sqlite: install-dev js-install services
	$(call every_test,sqlite:///$(CURDIR)/test-db.sqlite3,true)

# The tests of money and sends run again on SQLite, the embedded default
# `make run` serves (SQLite does decimal arithmetic in floats: a ledger
# that is exact on PostgreSQL need not be there). One worker, so it takes
# a Redis database of the workers' (the browser run beside it has its own).
EMBEDDED_TESTS := tests/billing tests/providers/test_charges.py tests/providers/test_waiting.py tests/agents/test_engine.py \
	tests/agents/test_scripted.py tests/memories
EMBEDDED_LEG = echo; echo "--- money and sends on SQLite (the embedded default) ---"; \
	DATABASE_URL=sqlite:///$(CURDIR)/test-db.sqlite3 $(PY) -m pytest $(EMBEDDED_TESTS) -n 1 -q $(PYTEST_ARGS)

# How many processes pytest-xdist spreads the tests (but the browser ones) over.
TEST_WORKERS ?= 3

# $(call every_test,DATABASE_URL,THEN): the browser tests run in a pytest
# process of their own (Playwright's sync API and the asyncio tests do not
# share a process well), in the background, their output held in a log that
# is printed when they end; beside them the rest run over TEST_WORKERS
# workers, each on a database and a Redis database of its own
# (tests/environment.py), and then the command THEN. All must pass.
define every_test
	@export DATABASE_URL=$(1) REDIS_URL=$${REDIS_URL:-$(TEST_REDIS_URL)}; \
	log=$$(mktemp); \
	echo "pytest tests/browser $(PYTEST_ARGS) (in the background) and pytest -n $(TEST_WORKERS) --ignore=tests/browser $(PYTEST_ARGS)"; \
	$(PY) -m pytest tests/browser $(PYTEST_ARGS) >$$log 2>&1 & browser=$$!; \
	$(PY) -m pytest --ignore=tests/browser -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS); rest=$$?; \
	$(2); after=$$?; \
	wait $$browser; browsers=$$?; \
	echo; echo "--- the browser tests ---"; cat $$log; rm -f $$log; \
	[ $$rest = 0 ] && [ $$after = 0 ] && [ $$browsers = 0 ]
endef

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: install-dev
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

services:
	bash scripts/services.sh

# Every benchmark (bench/run_all.py): one table of measured value, target and
# met / not met, and bench/results.json. `make bench BENCH_ARGS="--quick"`
# for a short run, BENCH_ARGS="--only a,c" for some of them.
bench: install-dev services
	$(PY) bench/run_all.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(JS)/node_modules db.sqlite3* test-db.sqlite3* .demo-key .pytest_cache
