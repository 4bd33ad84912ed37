"""Where connector files live: a local path or a URI, opened through ``pyarrow.fs``.

One place resolves ``/data/x``, ``file:///data/x`` and ``s3://bucket/x`` to a
filesystem and a path on it, and writes small files atomically (temp name, then a
rename), so that the Parquet source and sink work the same on a laptop and a cluster.
"""

from __future__ import annotations

import os
import uuid

import pyarrow.fs as pafs


def resolve(location: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path of ``location`` (a local path or a ``scheme://`` URI)."""
    if "://" in location:
        try:
            fs, path = pafs.FileSystem.from_uri(location)
        except Exception as e:  # pyarrow raises ArrowInvalid for an unknown scheme
            raise ValueError(
                f"cannot open {location!r}: {e}; use a local path, file://, s3://, gs:// "
                "or hdfs:// (pyarrow.fs)"
            ) from None
        return fs, path.rstrip("/") or "/"
    return pafs.LocalFileSystem(), os.path.abspath(location)


def is_hidden(name: str) -> bool:
    """Files Spark, Hadoop and this package keep beside data: ``_SUCCESS``, ``.crc``, temps."""
    return name.startswith(("_", "."))


def list_files(fs: pafs.FileSystem, path: str) -> list[str]:
    """``path`` itself if it is a file, else every non-hidden file below it, sorted."""
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{path!r} does not exist")
    if info.type == pafs.FileType.File:
        return [path]
    found = fs.get_file_info(pafs.FileSelector(path, recursive=True))
    return sorted(
        f.path
        for f in found
        if f.type == pafs.FileType.File
        and not any(is_hidden(part) for part in f.path[len(path) :].split("/") if part)
    )


def write_atomic(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new, never a part.

    A temp file beside it, then a rename (atomic on local and HDFS filesystems; object
    stores make a whole object visible at once anyway).
    """
    tmp = temp_beside(path)
    with fs.open_output_stream(tmp) as out:
        out.write(data)
    fs.move(tmp, path)


def temp_beside(path: str) -> str:
    """A hidden temp name in ``path``'s directory (readers skip it; rename it into place)."""
    parent, name = path.rsplit("/", 1)
    return f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"


def read_text(fs: pafs.FileSystem, path: str) -> str | None:
    """The file's text, or ``None`` if it does not exist."""
    try:
        with fs.open_input_stream(path) as f:
            data: bytes = f.read()
    except FileNotFoundError:
        return None
    return data.decode()
