# Developer and CI entry points; CI runs `bash .ci/run`, which is `make test`.
LINT = ruff check lifecycle tests bench && ruff format --check lifecycle tests bench && mypy --strict lifecycle

.PHONY: setup test lint demo

setup:
	bash .ci/setup

lint:
	$(LINT)

test: setup
	bash .ci/with-services sh -c '$(LINT) && python3 -m pytest'

# The main job end to end on the bundled demo engine (see .ci/demo).
demo: setup
	bash .ci/with-services bash .ci/demo
