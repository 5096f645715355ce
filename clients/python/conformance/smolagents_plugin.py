"""pytest plugin of the conformance run: smolagents' own agent tests, on its local executor
or on rljail.

``RLJAIL_CONFORMANCE_EXECUTOR=rljail`` makes ``executor_type="local"`` (the default of
every ``CodeAgent``) build a :class:`rljail.adapters.smolagents.RljailExecutor` with the
same arguments ``CodeAgent.create_python_executor`` gives ``LocalPythonExecutor``;
``native`` changes nothing.  Also provides ``shared_datadir`` (pytest-datadir's fixture,
which Debian does not package): a copy of the tests' ``data`` directory."""

import os
import shutil

import pytest

EXECUTOR = os.environ.get("RLJAIL_CONFORMANCE_EXECUTOR", "native")
# The tests authorize numpy, which this host's python3 has: in the jail, the data rootfs
# (`make data-rootfs`, numpy among its packages) when there is one.
DATA_ROOTFS = os.environ.get("RLJAIL_DATA_ROOTFS", "")
if DATA_ROOTFS and not os.path.isdir(DATA_ROOTFS):
    DATA_ROOTFS = ""


def pytest_configure(config):
    if EXECUTOR != "rljail":
        return
    from smolagents.agents import CodeAgent

    from rljail.adapters.smolagents import RljailExecutor

    original = CodeAgent.create_python_executor

    def create_python_executor(self):
        if self.executor_type != "local":
            return original(self)
        kwargs = {"max_print_outputs_length": self.max_print_outputs_length} | self.executor_kwargs
        if DATA_ROOTFS:
            kwargs.setdefault("rootfs", DATA_ROOTFS)
        return RljailExecutor(self.additional_authorized_imports, **kwargs)

    CodeAgent.create_python_executor = create_python_executor


@pytest.fixture
def shared_datadir(request, tmp_path):
    src = os.path.join(os.path.dirname(str(request.fspath)), "data")
    dst = tmp_path / "data"
    shutil.copytree(src, dst)
    return dst


def pytest_report_header(config):
    return "rljail conformance: smolagents' tests on %s" % (
        "rljail (RljailExecutor)" if EXECUTOR == "rljail" else "LocalPythonExecutor")
