# Developer and CI entry points; CI runs `bash .ci/run`, which is `make test`.
LINT = ruff check lifecycle tests bench && ruff format --check lifecycle tests bench && mypy --strict lifecycle

.PHONY: setup test lint docs demo stress

# Two homes on one bucket, round after round (tests/test_many_hosts.py): 2 rounds in `make test`
# keep CI short; `make stress` runs the 20 the many-hosts guarantee was shown with (~13 min).
export LIFECYCLE_TEST_ROUNDS ?= 2

setup:
	bash .ci/setup

lint:
	$(LINT)

# The docs site into .site/ (git-ignored), offline, in about a second; --strict fails on a
# broken link, a page missing from the nav or an unknown generated part (mkdocs.yml).
DOCS = NO_MKDOCS_2_WARNING=1 python3 -m mkdocs build --strict

docs:
	$(DOCS)

# First the tests that must run alone (tests/conftest.py SERIAL), then the demo images made
# once, then the rest three at a time, a test file per worker: most of them wait on dockerd,
# S3 and the engines' sleeps, not on the two cores (docs/development.md has the figures).
PYTEST = python3 -m pytest -p no:cacheprovider --durations=15  # the slowest, for the CI time budget
test: setup
	bash .ci/with-services sh -c '$(LINT) && $(DOCS) && $(PYTEST) -m serial \
	  && python3 -m lifecycle.demo >/dev/null && $(PYTEST) -m "not serial" -n 3 --dist loadfile'

stress: setup
	LIFECYCLE_TEST_ROUNDS=20 bash .ci/with-services sh -c 'python3 -m pytest tests/test_many_hosts.py'

# The main job end to end on the bundled demo engine (see .ci/demo).
demo: setup
	bash .ci/with-services bash .ci/demo
