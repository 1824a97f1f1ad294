# Two commands for a newcomer:  `make reproduce`  (the main job)  and  `make test`  (the whole suite).
# Both create .venv on first use and install everything they need (CPU only).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
# the stamp is named by the dependency files' content, not their dates (tools may rewrite them unchanged)
STAMP   := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt 2>/dev/null | sha256sum | cut -c1-16)
UITARS5 := $(VENV)/opt/ui-tars-0.5.1
# The GPU environment: torch (CUDA), vLLM, TRL, transformers, PEFT, accelerate and DeepSpeed, versions pinned together
# in constraints-gpu.txt (tests/test_gpuenv.py resolves them), with coda itself, so GRPO imports vLLM in its process
# and `trl vllm-serve` runs from .venv-gpu/bin/trl (transformers[serving]: coda's own server works there too, as in .venv).
GPU_VENV  := .venv-gpu
GPU_BIN   := $(GPU_VENV)/bin
GPU_REQS  := -e ".[gpu]"
GPU_STAMP := $(GPU_VENV)/.installed-$(shell cat pyproject.toml constraints-gpu.txt 2>/dev/null | sha256sum | cut -c1-16)

.PHONY: setup sysdeps reproduce test check lib readme clean-runs help serve gpu-setup
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

$(GPU_STAMP):
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "coda needs Python >= 3.11")'
	@test -x $(GPU_BIN)/python || $(PY) -m venv $(GPU_VENV) || { echo "'$(PY) -m venv' failed: on Debian install python3-venv (apt-get install python3-venv)"; exit 1; }
	$(GPU_BIN)/python -m pip install -q --upgrade pip
	$(GPU_BIN)/python -m pip install -q -c constraints-gpu.txt $(GPU_REQS)
	@$(GPU_BIN)/python -c 'import sys, torch; sys.exit(None if torch.version.cuda else f"$(GPU_VENV) got torch {torch.__version__}, a CPU build: see pip config list for a find-links or index that serves one")'
	@rm -f $(GPU_VENV)/.installed-*; touch $(GPU_STAMP)

gpu-setup: $(GPU_STAMP)  ## GPU machines only: create .venv-gpu (coda with torch, vLLM, TRL, PEFT, accelerate, DeepSpeed: constraints-gpu.txt)

serve: $(STAMP)  ## GPU machines only: serve the paper's planner and executor with .venv-gpu's vLLM (made when missing; an older .venv-vllm is used if there is no .venv-gpu) (SERVE_ARGS=... passes options)
	@if [ ! -x $(GPU_BIN)/vllm ] && [ -x .venv-vllm/bin/vllm ]; then vllm=.venv-vllm/bin/vllm; \
	  echo "serving with .venv-vllm (vLLM unpinned; make gpu-setup creates .venv-gpu, vLLM pinned with TRL)"; \
	else $(MAKE) --no-print-directory gpu-setup || exit 1; vllm=$(GPU_BIN)/vllm; fi; \
	$(BIN)/coda serve --vllm $$vllm $(SERVE_ARGS)

clean-runs:  ## delete run folders
	rm -rf runs _runs
