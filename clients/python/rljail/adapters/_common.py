"""What the adapters share: values handed into the jail, and the scaffold's hidden names.

Small values cross the protocol (``set``).  A large one never should (the protocol caps
lines, and a multi-GiB context must not be copied through it): it is written to a host
directory that the session grants read-only, and read inside the jail.
"""

import dataclasses
import json
import os
import shutil
import tempfile

from ..session import Session

#: Where the jail sees the host directory of large inputs.
INPUTS_IN_JAIL = "/rljail/inputs"
#: Values whose JSON is longer than this go through a file, not the protocol.
LARGE_VALUE_BYTES = 1 << 20
#: The per-cell output cap of the RLM adapters unless the caller sets one: above what the
#: runtimes cut each output to for the model (rlm: 20000 characters, rlm/utils/parsing.py
#: format_iteration; dspy.RLM: max_output_chars, 10000 by default, head and tail), so that
#: their own truncation, and DSPy's "Output (N chars)", see what their own REPLs return;
#: within the 16 MiB reply that carries stdout and stderr, escaped.
RUNTIME_OUTPUT_BYTES = 256 << 10


#: The jail-side factory of a tool added after the session started (both scaffolds hold
#: it): a function named as the host's tool, with its parameters as the host has them,
#: that calls through the session's late-tool bridge, ``_rljail_late_tool``.
LATE_TOOL_SOURCE = r'''
def _rljail_late_tool_fn(name, params):
    """A tool added after the session started: its parameters as the host has them,
    called through the session's late-tool bridge."""
    def tool(*args, **kwargs):
        if len(args) > len(params):
            raise TypeError("%s() takes %d positional arguments but %d were given"
                            % (name, len(params), len(args)))
        bound = dict(zip(params, args))
        for key in kwargs:
            if key in bound:
                raise TypeError("%s() got multiple values for argument %r" % (name, key))
        bound.update(kwargs)
        return _rljail_late_tool(name=name, kwargs=bound)
    tool.__name__ = tool.__qualname__ = name
    return tool
'''


def to_json(value, allow_nonfinite=False, scalar_keys=False):
    """``value`` as plain JSON data (dicts, lists, str, numbers, bool, None), converting
    tuples, sets, dataclasses and pydantic models; TypeError for anything else (and for
    inf and nan unless ``allow_nonfinite``: then the caller carries them itself).  Dict
    keys become strings, or with ``scalar_keys`` stay what they are when they are
    numbers, bools or None (for a caller that binds the value as a Python literal)."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not allow_nonfinite and (value != value or value in (float("inf"), float("-inf"))):
            raise TypeError("%r is not JSON" % value)
        return value
    if isinstance(value, dict):
        return {(k if scalar_keys and (k is None or isinstance(k, (str, int, float))) else str(k)):
                to_json(v, allow_nonfinite, scalar_keys) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v, allow_nonfinite, scalar_keys) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_json(v, allow_nonfinite, scalar_keys) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    dump = getattr(value, "model_dump", None)  # pydantic v2, without importing it
    if callable(dump):
        return to_json(dump(mode="json"), allow_nonfinite, scalar_keys)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(dataclasses.asdict(value), allow_nonfinite, scalar_keys)
    raise TypeError("a %s cannot be handed into the jail (JSON values only)" % type(value).__name__)


def nearest_json(value):
    """The nearest JSON value to a tool's result that :func:`to_json` refuses, for a
    cell that would otherwise get no value at all: containers element by element (a set
    as a list, sorted when it can be), and each value JSON cannot carry (an object,
    ``nan``) as its ``repr``."""
    try:
        return to_json(value)
    except (TypeError, ValueError, RecursionError):
        pass
    if isinstance(value, dict):
        return {str(k): nearest_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [nearest_json(v) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [nearest_json(v) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    try:
        return repr(value)
    except Exception:
        return "<%s>" % type(value).__name__


def faithful_tool(func):
    """``func`` as a session tool whose result reaches the cell as :func:`nearest_json`
    of it, with ``func``'s own parameter names (the session's ``(callable, params)``)."""
    from ..session import tool_parameters

    def tool(**kwargs):
        return nearest_json(func(**kwargs))

    return tool, tool_parameters(func)


class HostInputs:
    """A private host directory granted read-only to one session at INPUTS_IN_JAIL.
    :func:`start_session` makes it one of the session's ``temp_dirs``: it goes with the
    session, however that ends (closed, collected, at exit, failing to start)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="rljail-inputs-")
        self._n = 0

    def volume(self):
        return "%s:%s:ro" % (self.dir, INPUTS_IN_JAIL)

    def write(self, name, value):
        """Writes ``value`` (str as text, else JSON) and returns the in-jail code that
        binds ``name`` to it."""
        self._n += 1
        if isinstance(value, str):
            fname = "%d-%s.txt" % (self._n, name)
            with open(os.path.join(self.dir, fname), "w", encoding="utf-8") as f:
                f.write(value)
            return "with open(%r, encoding='utf-8') as _rljail_f:\n    %s = _rljail_f.read()\n" % (
                INPUTS_IN_JAIL + "/" + fname, name)
        fname = "%d-%s.json" % (self._n, name)
        with open(os.path.join(self.dir, fname), "w", encoding="utf-8") as f:
            json.dump(value, f)
        return ("import json as _rljail_json\nwith open(%r, encoding='utf-8') as _rljail_f:\n"
                "    %s = _rljail_json.load(_rljail_f)\n" % (INPUTS_IN_JAIL + "/" + fname, name))

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def bind(session, inputs, name, value, large=LARGE_VALUE_BYTES):
    """Binds ``name`` in the session's namespace to the JSON ``value``: by ``set`` when
    small, through a file in ``inputs`` when large.  Raises what the cell raised."""
    value = to_json(value)
    if inputs is not None and _json_size(value, large) > large:
        result = session.run(inputs.write(name, value))
        if result.error is not None:
            raise RuntimeError("binding %s in the jail failed: %s" % (name, result.error))
        return
    session.set(name, value)


def _json_size(value, limit):
    if isinstance(value, str):
        return len(value)  # characters: a lower bound of its JSON, enough to decide
    return len(json.dumps(value))


def start_session(options, tools, llm=None, llm_batched=None, rlm=None, rlm_batched=None,
                  inputs=None, temp_dirs=()):
    """A Session from an adapter's ``options`` dict, with the adapter's handlers.  The
    directory of ``inputs`` and the ``temp_dirs`` (host directories made for it) are
    the session's to remove; they are removed here at once when it cannot start."""
    options = dict(options or {})
    volumes = list(options.pop("volumes", ()) or ())
    dirs = list(temp_dirs) + list(options.pop("temp_dirs", ()) or ())
    if inputs is not None:
        volumes.append(inputs.volume())
        dirs.append(inputs.dir)
    try:
        return Session(volumes=volumes, tools=tools, llm=llm, llm_batched=llm_batched,
                       rlm=rlm, rlm_batched=rlm_batched, temp_dirs=dirs, **options)
    except BaseException:
        # Session removes them itself once its __init__ runs; not when the call fails
        # before (an option given twice).
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        raise


def release(owner):
    """Closes ``owner.session`` and removes ``owner._inputs`` (each adapter's
    pair), once: either may be gone already."""
    session, owner.session = owner.session, None
    if session is not None:
        session.close()
    inputs, owner._inputs = owner._inputs, None
    if inputs is not None:
        inputs.remove()
