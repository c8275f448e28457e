"""A session's tiny checkpoints of every family, built once on first use."""

import pytest

from tests.families.models import build


@pytest.fixture(scope="session")
def family_checkpoint(tmp_path_factory):
    """``family_checkpoint(name)``: the directory of family case ``name``'s checkpoint."""
    built: dict[str, str] = {}

    def path(name: str) -> str:
        if name not in built:
            built[name] = str(build(name, tmp_path_factory.mktemp(name) / "model"))
        return built[name]

    return path
