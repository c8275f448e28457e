"""A Python interpreter as a tool: the model's code runs in the sandbox
(``ascent.sandbox``), and what it prints, or what went wrong, is the tool's answer."""

from ascent.agents.tools import Tool, function_tool
from ascent.sandbox.pool import SandboxPool


def python_tool(pool: SandboxPool) -> Tool:
    def python(code: str) -> str:
        """Run a Python program and return what it prints (and its error, if it fails).

        Args:
            code: a complete Python program; print the values you need.
        """
        return pool.run(code).report()

    return function_tool(python)
