# Developer and CI entry points; CI runs `bash .ci/run`, which is `make test`.
LINT = ruff check lifecycle tests && ruff format --check lifecycle tests && mypy --strict lifecycle

.PHONY: setup test lint

setup:
	bash .ci/setup

lint:
	$(LINT)

test: setup
	bash .ci/with-services sh -c '$(LINT) && python3 -m pytest'
