"""Adapters that plug a :class:`rljail.Session` into agent and RLM runtimes.

Each lives in its own module and imports its runtime only when it is used, so that
``import rljail.adapters.dspy`` works without DSPy installed:

- :mod:`rljail.adapters.rlm`: an environment for the reference RLM library (``rlm``).
- :mod:`rljail.adapters.dspy`: a ``CodeInterpreter`` for ``dspy.RLM``.
- :mod:`rljail.adapters.smolagents`: a ``PythonExecutor`` for smolagents' ``CodeAgent``.
"""
