"""A GGUF that ships in chunk packages is joined once into the ascent cache, checked against
its SHA-256 first: a corrupt chunk leaves nothing behind and says what to reinstall, a
missing package says what to install; a file that ships whole is used where it lies."""

import hashlib

import pytest

from ascent.errors import InputNotFound
from ascent.models import gguf
from ascent.models.gguf import MissingDependency, PackagedGGUF, packaged_gguf


@pytest.fixture
def chunks(tmp_path, monkeypatch):
    """Two importable chunk packages on sys.path and the cache under tmp_path."""
    parts = []
    for index, data in enumerate((b"GGUF-first-half|", b"second-half")):
        package = tmp_path / "site" / f"fake_chunk_{index}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"model.part{index}").write_bytes(data)
        parts.append((package.name, f"data/model.part{index}"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setenv("ASCENT_CACHE", str(tmp_path / "cache"))
    return tuple(parts), b"GGUF-first-half|second-half"


def test_chunks_are_joined_once_and_checked(chunks, monkeypatch):
    parts, joined = chunks
    digest = hashlib.sha256(joined).hexdigest()
    monkeypatch.setitem(gguf.PACKAGED, "fake", PackagedGGUF(parts, "fake-model==1", digest))
    path = packaged_gguf("fake")
    assert path.read_bytes() == joined and path.parent.name == "gguf"
    assert packaged_gguf("fake") == path  # the second time: the joined file as it is


def test_a_corrupt_chunk_leaves_nothing_and_says_what_to_reinstall(chunks, monkeypatch):
    parts, _ = chunks
    monkeypatch.setitem(gguf.PACKAGED, "fake", PackagedGGUF(parts, "fake-model==1", "0" * 64))
    with pytest.raises(InputNotFound, match=r"reinstall fake-model==1"):
        packaged_gguf("fake")
    assert not list((gguf.cache_root() / "gguf").iterdir())


def test_a_missing_chunk_package_says_what_to_install(monkeypatch):
    parts = (("not_installed_chunk_0", "a"), ("not_installed_chunk_1", "b"))
    monkeypatch.setitem(gguf.PACKAGED, "fake", PackagedGGUF(parts, "fake-model==1", "0" * 64))
    with pytest.raises(MissingDependency, match=r"pip install fake-model==1"):
        packaged_gguf("fake")
