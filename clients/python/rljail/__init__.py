"""rljail for Python: a persistent jailed Python per trajectory, over ``rljail session``.

    import rljail

    with rljail.Session(memory="1g", cell_timeout=30, llm=ask_model) as s:
        s.load_context(path="/context/corpus.txt")
        r = s.run("print(len(context)); print(llm_query(context[:1000]))")
        print(r.stdout)

The adapters in :mod:`rljail.adapters` plug a Session into the reference RLM library,
DSPy's RLM and smolagents without importing them until they are used.
"""

from .session import (
    PROTOCOL_VERSION,
    CellResult,
    CellTimeout,
    ContextName,
    ErrorInfo,
    ProtocolError,
    Repr,
    RequestError,
    Session,
    SessionError,
    SessionLost,
    UndecodableReply,
    find_binary,
)

__all__ = [
    "Session", "CellResult", "ErrorInfo", "Repr", "ContextName",
    "SessionError", "SessionLost", "CellTimeout", "RequestError", "ProtocolError",
    "UndecodableReply", "find_binary", "PROTOCOL_VERSION",
]

__version__ = "0.1.0"
