"""pytest plugin of the conformance run: rlm's own tests, on rlm's LocalREPL or on rljail.

Loaded with ``-p rlm_plugin``; ``RLJAIL_CONFORMANCE_EXECUTOR=rljail`` swaps LocalREPL for
:class:`rljail.adapters.rlm.RljailREPL` before the tests are collected: the name in
``rlm.environments.local_repl`` (which the tests import) and in ``rlm.environments``
(which ``get_environment("local", ...)``, and so ``RLM(environment="local")``, uses).
With ``native`` (the default) nothing is changed: rlm's own executor, the reference."""

import os

EXECUTOR = os.environ.get("RLJAIL_CONFORMANCE_EXECUTOR", "native")


def pytest_configure(config):
    if EXECUTOR != "rljail":
        return
    import rlm.environments
    import rlm.environments.local_repl as local_repl
    from rljail.adapters.rlm import RljailREPL

    local_repl.LocalREPL = RljailREPL
    rlm.environments.LocalREPL = RljailREPL


def pytest_report_header(config):
    return "rljail conformance: rlm's environment tests on %s" % (
        "rljail (RljailREPL)" if EXECUTOR == "rljail" else "LocalREPL")
