"""The control plane of ``ascent serve``, as in vLLM's dev mode: health, pause and resume,
weights from disk and their version, sleep and wake up."""

from fastapi import Request
from fastapi.responses import JSONResponse

from ascent.rollout.native_backend import NativeBackend
from ascent.serve.schema import RequestError, UpdateWeightsRequest, WeightVersionRequest, parse


class Control:
    """The control routes over ``backend``; each is one backend call and a small answer."""

    def __init__(self, backend: NativeBackend) -> None:
        self.backend = backend

    async def health(self) -> object:
        report = await self.backend.health()
        return JSONResponse(report, status_code=200 if report["status"] == "ok" else 503)

    async def pause(self, mode: str = "abort") -> dict:
        if mode not in ("abort", "wait", "keep"):
            raise RequestError(f"mode must be abort, wait or keep, not {mode!r}", "mode")
        await self.backend.pause(mode)
        return {"status": "paused", "mode": mode}

    async def resume(self) -> dict:
        await self.backend.resume()
        return {"status": "running"}

    async def update_weights(self, request: Request) -> dict:
        body = await parse(request, UpdateWeightsRequest)
        try:
            version = body.version
            if version is None:  # a stand-alone server counts on from its own version
                version = await self.backend.weight_version() + 1
            version = await self.backend.update_weights_from_disk(body.path, version)
        except (FileNotFoundError, KeyError, ValueError) as bad:
            raise RequestError(f"path: {bad}", "path") from None
        return {"weight_version": version}

    async def weight_version(self) -> dict:
        return {"weight_version": await self.backend.weight_version()}

    async def update_weight_version(self, request: Request) -> dict:
        body = await parse(request, WeightVersionRequest)
        await self.backend.set_weight_version(body.new_version)
        return {"weight_version": body.new_version}

    async def sleep(self) -> dict:
        try:
            await self.backend.sleep()
        except RuntimeError as bad:  # sleeping with requests still running
            raise RequestError(str(bad), status=409) from None
        return {"status": "sleeping"}

    async def wake_up(self) -> dict:
        await self.backend.wake()
        return {"status": "awake"}
