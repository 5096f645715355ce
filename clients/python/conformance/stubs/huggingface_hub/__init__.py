"""A stand-in for huggingface_hub, which smolagents imports at module level and no package
index here can provide: every name is a placeholder class (constructed with any keyword
arguments, which become attributes).  Nothing of the Hub is reachable through it; the
conformance run's tests that need the Hub itself fail the same on both executors."""

import sys
import types


class _Placeholder:
    def __init__(self, *args, **kwargs):
        for k, v in kwargs.items():
            setattr(self, k, v)

    def __call__(self, *args, **kwargs):
        raise RuntimeError("huggingface_hub is a stub in the conformance run (no Hub here)")

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % kv for kv in vars(self).items()))


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    cls = type(name, (_Placeholder,), {})
    globals()[name] = cls
    return cls


__version__ = "0.0.0-stub"

constants = types.ModuleType("huggingface_hub.constants")
constants.HF_HUB_CACHE = "/nonexistent/huggingface-hub-stub"
constants.HUGGINGFACE_CO_URL_HOME = "https://huggingface.co/"
sys.modules["huggingface_hub.constants"] = constants
