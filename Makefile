# The two commands of the README: `make demo` and `make test`. Both set everything up first.
PY := .venv/bin/python
MODEL ?= models/mbv2-w0.35.onnx
DEMO_OUT ?= build/demo
# The demo compiles the training step of the model's shipped sparse-update plan (models/plans/); a model
# without one is compiled for inference.
PLAN ?= models/plans/$(basename $(notdir $(MODEL)))-sparse.json

.PHONY: setup demo test test-full test-fast zoo memory-table docs clean

setup:
	bash scripts/setup.sh

demo: setup
	.venv/bin/tinytrain inspect $(MODEL)
	.venv/bin/tinytrain compile $(MODEL) --sram 256k $(if $(wildcard $(PLAN)),--plan $(PLAN)) -o $(DEMO_OUT)

# One representative per equivalence class (a model with one kind of C, a kernel shape with one variant, ...);
# test-full runs the whole cross product (the tests marked full too).
test: setup
	$(PY) -m pytest -n 2 -q --durations=30 -m "not full"

test-full: setup
	$(PY) -m pytest -n 2 -q --durations=30

test-fast: setup
	$(PY) -m pytest -n 2 -q -m "not slow and not full"

zoo: setup
	$(PY) -m models.build

# Peak SRAM of the training step per model and plan, beside the published figures and PyTorch's.
memory-table: setup
	$(PY) benchmarks/memory.py --study training

# The user guide (docs/, mkdocs.yml) as a static site; `.venv/bin/mkdocs serve` serves it while you edit.
docs: setup
	.venv/bin/mkdocs build --strict -d build/site

clean:
	rm -rf build .pytest_cache
