"""Fixtures of the checkpoint tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from timely.checkpoint import links


@pytest.fixture
def folders_only() -> Iterator[None]:
    """Stores made meanwhile keep every part in a folder of its own, as on a directory
    that is not on a local disk (NFS, a FUSE mount: :func:`links.appendable` says no),
    where parts are retired whole and recycled: for the tests of that layout. (A patch of
    its own: the tests' ``monkeypatch.undo()`` leaves it in place.)"""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(links, "appendable", lambda path, mounts=None: False)
        yield
