# Everything a fresh machine needs: `make demo` runs the main job, `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU build of PyTorch for workloads and collection; an unpinned torch pulls a multi-GB CUDA build.
TORCH  ?= torch==2.13.0

# The main job profiles a built-in workload: on the GPU when nvidia-smi sees one, else a tiny model on the CPU.
DEVICE   ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu)
WORKLOAD ?= $(if $(filter cuda,$(DEVICE)),gpt2,resnet50-tiny)
RUN_DIR  ?= dnnprof-runs/demo

# The long fuzz run (issue 15): 100,000 inputs of each of the 5 formats, summary and failing inputs under FUZZ_OUT.
FUZZ_OUT     ?= dnnprof-runs/fuzz
FUZZ_WORKERS ?= 1
FUZZ_SEED    ?= 1

.PHONY: demo test lint gpu-test bench clean fuzz

$(BIN)/dnnprof: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[dev,nvml,ci,view,browser-tests,bench,scale]"
	touch $@

demo: $(BIN)/dnnprof
	rm -rf $(RUN_DIR)
	$(BIN)/dnnprof profile $(WORKLOAD) --device $(DEVICE) --out $(RUN_DIR)
	$(BIN)/dnnprof analyze $(RUN_DIR) --top 10

test: $(BIN)/dnnprof
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -q -m "not gpu"

gpu-test: $(BIN)/dnnprof
	$(BIN)/python -m pytest -q -m gpu

fuzz: $(BIN)/dnnprof
	mkdir -p $(FUZZ_OUT)
	$(BIN)/python benchmarks/fuzz.py --seed $(FUZZ_SEED) --inputs 500000 --workers $(FUZZ_WORKERS) --timeout-s 30 \
		--keep $(FUZZ_OUT)/failures --checkpoint $(FUZZ_OUT)/summary.json

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
