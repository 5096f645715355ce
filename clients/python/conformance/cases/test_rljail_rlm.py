"""rljail's own cases for rlm, run by the conformance plugin on LocalREPL and on rljail
alike (the same test, both executors): the deviations found when the real library drove
the adapter (issue 32), one end-to-end trajectory with rlm's own scripted model, a
malformed subcall result, and the environment's classes."""

import json
from unittest.mock import patch

import rlm.core.rlm as rlm_module
from rlm import RLM
from rlm.environments.local_repl import LocalREPL  # RljailREPL on the rljail run
from rlm.utils.parsing import format_execution_result

from tests.mock_lm import MockLM

BIG = "x" * 90_000  # 90 KB: over the adapter's 64 KiB per value copied back


def test_large_variable_is_listed_in_repl_variables():
    """format_execution_result, the text the model reads after a cell, lists a
    variable whose JSON is over 64 KiB, as LocalREPL's (which hands over the value)."""
    repl = LocalREPL(context_payload=BIG)
    try:
        result = repl.execute_code("big = context * 1\nsmall = 1")
        text = format_execution_result(result)
        line = [l for l in text.splitlines() if l.startswith("REPL variables:")]
        assert line, text
        for name in ("context", "context_0", "big", "small"):
            assert repr(name) in line[0], line[0]
    finally:
        repl.cleanup()


def test_large_list_and_dict_are_listed():
    repl = LocalREPL()
    try:
        result = repl.execute_code("rows = list(range(20000))\ntable = {str(i): i for i in range(10000)}")
        text = format_execution_result(result)
        assert "'rows'" in text and "'table'" in text, text
    finally:
        repl.cleanup()


def test_relative_write_and_read():
    """LocalREPL runs cells in a writable temporary directory; a relative path works."""
    repl = LocalREPL()
    try:
        r = repl.execute_code("open('scratch.txt', 'w').write('kept')\nprint(open('scratch.txt').read())")
        assert r.stderr == "" and r.stdout.strip() == "kept", (r.stdout, r.stderr)
        r = repl.execute_code("import os\nprint(os.path.exists('scratch.txt'))")
        assert r.stdout.strip() == "True", (r.stdout, r.stderr)
    finally:
        repl.cleanup()


class Point:
    def __init__(self, x):
        self.x = x

    def __repr__(self):
        return "Point(%d)" % self.x


def test_tool_returning_a_set():
    """A set from a tool: a set on LocalREPL, a list (sorted) in the jail; either
    iterates, measures and sorts the same."""
    repl = LocalREPL(custom_tools={"tags": lambda: {"b", "a", "c"}})
    try:
        r = repl.execute_code("t = tags()\nprint(sorted(t), len(t), 'a' in t)")
        assert r.stdout.strip() == "['a', 'b', 'c'] 3 True", (r.stdout, r.stderr)
    finally:
        repl.cleanup()


def test_tool_returning_an_object():
    """An object from a tool: the object on LocalREPL, its repr in the jail; printed,
    both read the same."""
    repl = LocalREPL(custom_tools={"where": lambda: Point(3)})
    try:
        r = repl.execute_code("p = where()\nprint(p)")
        assert r.stdout.strip() == "Point(3)", (r.stdout, r.stderr)
    finally:
        repl.cleanup()


def test_no_final_var_in_this_rlm():
    """This rlm ends a turn on answer["ready"] and has no FINAL_VAR: calling it is a
    NameError, and no final answer."""
    repl = LocalREPL()
    try:
        r = repl.execute_code("x = 1\nFINAL_VAR('x')")
        assert "NameError" in r.stderr, (r.stdout, r.stderr)
        assert r.final_answer is None
    finally:
        repl.cleanup()


def test_trajectory_persistent_two_completions():
    """RLM.completion twice with persistent=True and rlm's MockLM: a 90 KB context, a
    relative scratch file, a variable kept into the second completion; and the prompt
    after the first cell lists the context among the REPL variables."""
    prompts = []
    script = [
        "```repl\nn = len(context)\nopen('scratch.txt', 'w').write(str(n))\nprint(n)\n```",
        "```repl\nanswer['content'] = open('scratch.txt').read()\nanswer['ready'] = True\n```",
        "```repl\nanswer['content'] = str(n) + '+' + context_1\nanswer['ready'] = True\n```",
    ]

    def respond(prompt):
        prompts.append(prompt if isinstance(prompt, str) else json.dumps(prompt))
        return script.pop(0)

    lm = MockLM(response_fn=respond)
    with patch.object(rlm_module, "get_client", return_value=lm):
        with RLM(backend="openai", backend_kwargs={"model_name": "mock-model"}, environment="local",
                 persistent=True, max_iterations=5) as rlm:
            first = rlm.completion(BIG)
            second = rlm.completion("second")
    assert first.response == "90000", first.response
    assert second.response == "90000+second", second.response
    assert not script
    listed = [p for p in prompts if "REPL variables:" in p]
    assert listed and "'context'" in listed[0].split("REPL variables:")[1][:300], prompts[1][-600:]


def test_malformed_subcall_result_is_an_error_string():
    """A subcall_fn that returns something without .response: rlm_query returns
    LocalREPL's "Error: RLM query failed - ..." string; the cell goes on."""
    repl = LocalREPL(subcall_fn=lambda prompt, model=None: 42)
    try:
        r = repl.execute_code("r = rlm_query('q')\nprint(r.startswith('Error: RLM query failed'), 'after')")
        assert r.stdout.strip() == "True after", (r.stdout, r.stderr)
    finally:
        repl.cleanup()


def test_is_one_of_rlms_environments():
    """A runner that checks what it was given (isinstance BaseEnv, NonIsolatedEnv,
    SupportsPersistence) takes it as rlm's own local environment."""
    from rlm.environments.base_env import BaseEnv, NonIsolatedEnv, SupportsPersistence

    repl = LocalREPL()
    try:
        assert isinstance(repl, BaseEnv) and isinstance(repl, NonIsolatedEnv)
        assert isinstance(repl, SupportsPersistence)
    finally:
        repl.cleanup()
