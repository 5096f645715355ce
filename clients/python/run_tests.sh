#!/bin/sh
# Runs the package's unit tests (against the TEST-ONLY fake session server) with the
# system python3 and prints unittest's own summary.  `./run_tests.sh --real` runs the
# real-binary tests instead; they need RLJAIL_BIN set to an rljail with `session`.
cd "$(dirname "$0")/tests" || exit 1
PY=${PYTHON:-python3}
if [ "$1" = "--real" ]; then
	exec "$PY" -m unittest -v test_real_binary
fi
exec "$PY" -m unittest test_session test_adapter_rlm test_adapter_dspy test_adapter_smolagents "$@"
