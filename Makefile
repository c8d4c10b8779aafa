# The two commands of the README: `make demo` and `make test`. Both set everything up first.
PY := .venv/bin/python
MODEL ?= models/mbv2-w0.35.onnx
DEMO_OUT ?= build/demo

.PHONY: setup demo test test-fast zoo clean

setup:
	bash scripts/setup.sh

demo: setup
	rm -rf $(DEMO_OUT)
	.venv/bin/tinytrain inspect $(MODEL)
	.venv/bin/tinytrain compile $(MODEL) --sram 256k -o $(DEMO_OUT)

test: setup
	$(PY) -m pytest -n 2 -q

test-fast: setup
	$(PY) -m pytest -n 2 -q -m "not slow"

zoo: setup
	$(PY) -m models.build

clean:
	rm -rf build .pytest_cache
