# Two commands for a newcomer:  `make reproduce`  (the main job)  and  `make test`  (the whole suite).
# Both create .venv on first use and install everything they need (CPU only).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
# the stamp is named by the dependency files' content, not their dates (tools may rewrite them unchanged)
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt 2>/dev/null | sha256sum | cut -c1-16)
UITARS5 := $(VENV)/opt/ui-tars-0.5.1

.PHONY: setup sysdeps reproduce test check lib readme clean-runs help serve
help:  ## list the targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## / -- /'

$(STAMP):
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "coda needs Python >= 3.11")'
	@test -x $(BIN)/python || $(PY) -m venv $(VENV) || { echo "'$(PY) -m venv' failed: on Debian install python3-venv (apt-get install python3-venv)"; exit 1; }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e ".[dev]"
	# the newest official UI-TARS parser, beside 0.1.4, for the differential tests (loaded in a subprocess)
	$(BIN)/python -m pip install -q --no-deps --upgrade --target $(UITARS5) ui-tars==0.5.1
	# AgentRewardBench's expert labels (its data files only: its requirements pull browsergym, which is never imported)
	$(BIN)/python -m pip install -q --no-deps agent-reward-bench==0.1.2
	@rm -f $(VENV)/.installed-*; touch $(STAMP)

setup: $(STAMP)  ## create .venv and install coda with its dev extras

sysdeps:  ## install the Debian packages the tests need (Xvfb, xdotool, xclip, Tk, openbox, dbus, kalgebra, GRASS GIS), when missing
	@bash .ci/sysdeps

reproduce: $(STAMP) sysdeps  ## run the reproduction (CPU defaults) into runs/
	$(BIN)/coda reproduce

test: $(STAMP) sysdeps  ## notebooks clean, library and README in sync, notebook tests, then pytest
	@PATH="$(CURDIR)/$(BIN):$$PATH" bash .ci/test

lib: $(STAMP)  ## regenerate coda/ and README.md from the notebooks
	$(BIN)/nbdev-clean
	$(BIN)/nbdev-export
	$(BIN)/python -m coda.readme

serve: $(STAMP)  ## GPU machines only: create .venv-vllm (vLLM, its own pins) and serve the paper's planner and executor (SERVE_ARGS=... passes options)
	@test -x .venv-vllm/bin/vllm || { $(PY) -m venv .venv-vllm && .venv-vllm/bin/python -m pip install -q --upgrade pip && .venv-vllm/bin/python -m pip install -q vllm; }
	$(BIN)/coda serve --vllm .venv-vllm/bin/vllm $(SERVE_ARGS)

clean-runs:  ## delete run folders
	rm -rf runs _runs
