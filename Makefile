# Two commands set everything up on a fresh machine:
#   make test   build the environment with the tests' tools (first time only) and run the tests
#   make demo   build the environment (first time only) and run the grader's demo
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

PROXY  := $(VENV)/node/node_modules/.bin/configurable-http-proxy
# Two test processes, one per core, each taking whole files (their module fixtures, graded classes
# among them, are made once), the longest first, in the collection's order (tests/conftest.py,
# tests/scheduling.py), so that no long file starts last. `make test PYTEST_ARGS=...` to change.
PYTEST_ARGS ?= -n 2 --dist loadfile --no-loadscope-reorder

.PHONY: test demo docs env system-packages browser-packages container-packages hub-packages release student-kit clean

test: $(STAMP) system-packages browser-packages container-packages hub-packages
	$(BIN)/python -m pytest $(PYTEST_ARGS)

demo: $(STAMP) system-packages
	$(BIN)/autograder demo

env: $(STAMP)

# The documentation site (docs/, Markdown read by Sphinx and MyST) into docs/_build/html, with
# warnings as errors, as tests/test_docs.py builds it in `make test`.
docs: $(STAMP)
	$(BIN)/python -m sphinx -W --keep-going -b html docs docs/_build/html

# The virtual environment is rebuilt whenever the pinned requirements change: the course's
# (requirements.txt, what the TA's container installs too) and the tests' (requirements-dev.txt).
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml jupyter-config/transformer_lm.json jupyter-config/overrides.json
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
	  { echo "Python 3.11 is needed (torch==2.13.0 is pinned for it). Run: make PYTHON=/path/to/python3.11 $(MAKECMDGOALS)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	@# An editable install leaves out the package's Jupyter config (the server extension of "Check with
	@# the grader", transformer_lm/grader_check.py); a wheel installs it at the same place.
	install -D -m 644 jupyter-config/transformer_lm.json $(VENV)/etc/jupyter/jupyter_server_config.d/transformer_lm.json
	@# The notebook toolbar's "Check with the grader" button (JupyterLab's settings overrides).
	install -D -m 644 jupyter-config/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	touch $(STAMP)

# bubblewrap is the grader's sandbox, and a C compiler builds the allocator of its capped runs
# (autograder/running/kept_blocks.c). Installed when we may (root with apt-get); otherwise the
# exact command is printed and the grader says what it falls back to.
system-packages:
	@command -v bwrap >/dev/null 2>&1 && command -v cc >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Installing bubblewrap (the grader's sandbox) and gcc (the allocator of its capped runs)..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap gcc libc6-dev >/dev/null; \
	else \
	  command -v bwrap >/dev/null 2>&1 || { echo "bubblewrap is missing. Install it with: sudo apt-get install bubblewrap"; \
	    echo "(Until then the grader refuses to run student code unless given --unsafe-no-sandbox.)"; }; \
	  command -v cc >/dev/null 2>&1 || { echo "A C compiler is missing. Install it with: sudo apt-get install gcc libc6-dev"; \
	    echo "(Until then assignment 05 grades more slowly, and the tests of its allocator fail.)"; }; \
	fi

# Debian's chromium drives the browser tests (tests/test_student_kit.py and others, through Playwright; never
# `playwright install`, which downloads a browser). Installed when we may (root with apt-get);
# otherwise the exact command is printed and that one test is skipped.
browser-packages:
	@test -x /usr/bin/chromium && command -v chromedriver >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Installing chromium and chromium-driver (for the browser test)..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; \
	else \
	  echo "chromium is missing. Install it with: sudo apt-get install chromium chromium-driver"; \
	  echo "(Until then the browser tests are skipped.)"; \
	fi

# podman builds and runs the TA's container in its test (tests/test_container.py), with runc
# (crun fails on some hosts' cgroups) and debootstrap (a base image where no registry is reachable).
# Installed when we may (root with apt-get); otherwise the exact command is printed and that test
# is skipped.
container-packages:
	@command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 && command -v debootstrap >/dev/null 2>&1 && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "Installing podman, runc and debootstrap (for the container test)..."; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null; \
	else \
	  echo "podman is missing. Install it with: sudo apt-get install podman runc debootstrap"; \
	  echo "(Until then the container test, tests/test_container.py, is skipped.)"; \
	fi

# JupyterHub's proxy, from npm, for the grading service's tests (tests/test_service_hub.py), into
# the environment's folder; pinned here, since npm has no requirements.txt.
hub-packages: $(PROXY)

# Installs Node.js's npm first when we may (root with apt-get); otherwise says what to run, and the
# grading service's tests are skipped.
$(PROXY):
	@if ! command -v npm >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "Installing npm (JupyterHub's proxy comes from npm)..."; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; \
	  else \
	    echo "npm is missing. Install it with: sudo apt-get install nodejs npm"; \
	    echo "(Until then the grading service's tests, tests/test_service_hub.py, are skipped.)"; exit 0; \
	  fi; \
	fi; \
	npm install --silent --no-save --no-package-lock --no-audit --no-fund --prefix $(VENV)/node configurable-http-proxy@5.3.0

# Regenerate the student notebooks in release/ from source/ (never edit release/ by hand).
release: $(STAMP)
	for assignment in $$(ls source); do \
	  PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/nbgrader generate_assignment $$assignment --force || exit 1; \
	done

# What students receive (release and lecture notebooks, the student package as a wheel), built
# into KIT, a new or empty folder; `make student-kit KIT=path` to choose where. The command refuses
# a folder that holds anything, and nothing here deletes one: to build again, delete the old kit first.
KIT ?= student-kit
student-kit: $(STAMP)
	$(BIN)/autograder student-kit $(KIT)

clean:
	rm -rf $(VENV) .pytest_cache
