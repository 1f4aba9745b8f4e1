# Two commands on a fresh machine: `make run` and `make test`. Both create .venv when it
# is missing and install the project (with its dev tools) into it.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
# The torch build to install first. Empty: whatever `torch>=2.6` resolves to (the normal
# dependency). CI sets TORCH_SPEC=torch==2.13.0, a CPU build that lies on local disk on our
# build machines; where that wheel is on disk, `make run`/`make test` take it too.
TORCH_SPEC ?= $(if $(wildcard /opt/wheels/torch-2.13.0+cpu-*.whl),torch==2.13.0,)
PYTEST_ARGS ?=
# `make test` spreads the test files over this many pytest workers (pytest-xdist): one per
# core, at most 4; 0 runs them in this process (TEST_WORKERS=0 make test).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); if [ $$n -gt 4 ]; then n=4; fi; if [ $$n -lt 2 ]; then n=0; fi; echo $$n)

.PHONY: run test test-all lint venv clean bench screenshots corpus package package-test gpu-check

$(BIN)/studio: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	if [ -n "$(TORCH_SPEC)" ]; then $(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"; fi
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(BIN)/studio

venv: $(BIN)/studio

# The display and Qt's system libraries are checked before Qt starts (exit 2 with the fix).
run: venv
	$(BIN)/python -m studio.platform_check
	$(BIN)/studio

lint: venv
	$(BIN)/ruff check accel studio tests bench
	$(BIN)/ruff format --check accel studio tests bench
	$(BIN)/lint-imports

test: lint
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The default run leaves out the tests marked slow; this runs them too.
test-all: lint
	QT_QPA_PLATFORM=offscreen $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m 'slow or not slow' $(PYTEST_ARGS)

bench: venv
	for f in bench/bench_*.py; do echo "== $$f"; $(BIN)/python $$f || exit 1; done

# Every pass on every real-architecture corpus model: bench/out/corpus.md and corpus.json.
corpus: venv
	$(BIN)/python bench/corpus.py $(CORPUS_ARGS)

# On a machine with one NVIDIA GPU: installs the GPU extras, runs every gpu test and a short
# GPU bench, writes bench/out/gpu_check.md (under 8 minutes). Without a GPU: says so, exit 0.
gpu-check: venv
	$(BIN)/python bench/gpu_check.py $(GPU_CHECK_ARGS)

# The one-folder desktop bundle (packaging/README.md): dist/accel-studio/accel-studio.
APP_ID := io.github.accelstudio.AccelStudio
SHARE := dist/accel-studio/share
package: venv
	$(BIN)/pyinstaller --noconfirm --distpath dist --workpath build/pyinstaller packaging/accel-studio.spec
	install -Dm644 packaging/linux/$(APP_ID).desktop $(SHARE)/applications/$(APP_ID).desktop
	install -Dm644 packaging/linux/$(APP_ID).metainfo.xml $(SHARE)/metainfo/$(APP_ID).metainfo.xml
	install -Dm644 resources/icons/accel-studio.svg $(SHARE)/icons/hicolor/scalable/apps/$(APP_ID).svg
	for s in 16 24 32 48 64 128 256 512; do install -Dm644 resources/icons/accel-studio-$$s.png \
	  $(SHARE)/icons/hicolor/$${s}x$${s}/apps/$(APP_ID).png || exit 1; done

# Runs the built bundle's --smoke (offscreen) and checks the run it wrote to its database.
package-test: venv
	test -x dist/accel-studio/accel-studio || $(MAKE) package
	$(BIN)/python packaging/check_bundle.py dist/accel-studio/accel-studio

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache
