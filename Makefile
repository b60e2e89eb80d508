# The two commands of the README:
#   make demo  - install into .venv and serve ANS on 127.0.0.1:4480 with the demo catalog
#   make test  - install into .venv and run the whole test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
DATA   ?= ans-data

.PHONY: install demo serve test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/ans serve --demo --data-dir $(DATA)

test: $(STAMP)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check ans protocol governance federation tests bench tools deploy
	$(BIN)/mypy ans protocol governance federation tools

clean:
	rm -rf $(VENV) $(DATA) .pytest_cache .mypy_cache .ruff_cache *.egg-info
