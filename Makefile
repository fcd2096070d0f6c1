# Everything a fresh machine needs: `make demo` runs the main job, `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU build of PyTorch for workloads and collection; an unpinned torch pulls a multi-GB CUDA build.
TORCH  ?= torch==2.13.0

.PHONY: demo test lint gpu-test bench clean

$(BIN)/dnnprof: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)"
	$(BIN)/pip install -q -e ".[dev,nvml,ci]"
	touch $@

demo: $(BIN)/dnnprof
	$(BIN)/dnnprof analyze tests/data/gpt2_bf16_train_h200/trace.json.gz --top 10

test: $(BIN)/dnnprof
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -q -m "not gpu"

gpu-test: $(BIN)/dnnprof
	$(BIN)/python -m pytest -q -m gpu

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
