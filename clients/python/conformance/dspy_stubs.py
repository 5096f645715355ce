"""Stand-ins for the modules DSPy imports that no package index here can provide
(litellm, openai, jiter, gepa, json_repair): any module or submodule under those names
imports, and every attribute is a placeholder class (subclassable, subscriptable, and
refusing to be called as a function of the real library).  The tests that need one of
them for real fail the same on both executors."""

import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = ("litellm", "openai", "jiter", "gepa", "json_repair")


class _PlaceholderMeta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(name)

    def __getitem__(cls, item):
        return cls


class _Placeholder(metaclass=_PlaceholderMeta):
    def __init__(self, *args, **kwargs):
        pass

    def __class_getitem__(cls, item):
        return cls


def _placeholder(name):
    return _PlaceholderMeta(name, (_Placeholder,), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        value = _placeholder(name)
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def install():
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
