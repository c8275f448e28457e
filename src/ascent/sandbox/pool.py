"""Many sandboxes at once: a thread per running sandbox (each thread only waits on its
subprocess), callable from synchronous code and from an event loop."""

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from ascent.sandbox.isolation import isolation
from ascent.sandbox.run import SandboxLimits, SandboxResult, run_python

log = logging.getLogger(__name__)


class SandboxPool:
    def __init__(self, workers: int = 4, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix="sandbox")
        log.info(isolation().describe())

    def run(self, code: str, stdin: str = "", files: dict[str, str] | None = None) -> SandboxResult:
        return self.executor.submit(
            run_python, code, stdin, files=files, limits=self.limits
        ).result()

    def map(self, jobs: list[tuple[str, str]]) -> list[SandboxResult]:
        """(code, stdin) pairs, run at once; results in order."""
        futures = [
            self.executor.submit(run_python, code, stdin, limits=self.limits)
            for code, stdin in jobs
        ]
        return [future.result() for future in futures]

    async def run_async(self, code: str, stdin: str = "") -> SandboxResult:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self.executor, lambda: run_python(code, stdin, limits=self.limits)
        )

    def close(self) -> None:
        self.executor.shutdown(wait=True)
