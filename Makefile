# Developer and CI entry points; CI runs `bash .ci/run`, which is `make test`.
LINT = ruff check lifecycle tests bench && ruff format --check lifecycle tests bench && mypy --strict lifecycle

.PHONY: setup test lint demo

setup:
	bash .ci/setup

lint:
	$(LINT)

test: setup
	bash .ci/with-services sh -c '$(LINT) && python3 -m pytest'

# The main job on the bundled demo engine: offline images, then build (and again: up to date).
demo: setup
	bash .ci/with-services sh -c 'python3 -m lifecycle.demo && lifecycle build demo/0.2 && lifecycle build demo/0.2 && lifecycle boot demo/0.2 --cold && lifecycle boot demo/0.2 && lifecycle boots && lifecycle caches'
