"""Where connector files live: local paths or URIs (``file://``, ``s3://``) via ``pyarrow.fs``.

One module for every connector (files, Parquet, Spark), so that a location means the
same to each. Sources and sinks are pickled to the workers, so they keep a *location*
string and resolve it to a filesystem in each process (cached). Local paths are made
absolute on the driver: a worker's current directory may differ from the driver's.
"""

from __future__ import annotations

import functools
import os
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from timely import ConfigError


def normalize(location: str | os.PathLike[str]) -> str:
    """A location that means the same in every process: an absolute path, or the URI."""
    text = os.fspath(location)
    if not isinstance(text, str) or not text:
        raise ConfigError(f"expected a path or a URI, got {location!r}")
    if "://" in text:
        resolve(text)  # fail now, on the driver, for an unknown scheme
        return text
    return os.path.abspath(os.path.expanduser(text))


@functools.lru_cache(maxsize=256)
def resolve(location: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem of ``location`` (from :func:`normalize`) and the path inside it,
    without a trailing ``/`` (so that ``f"{path}/{name}"`` is right)."""
    if "://" not in location:
        return pafs.LocalFileSystem(), location
    try:
        fs, path = pafs.FileSystem.from_uri(location)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as e:
        raise ConfigError(
            f"cannot open {location!r}: {e}; use a local path or a URI pyarrow.fs knows "
            "(file://, s3://, gs://, hdfs://)"
        ) from None
    return fs, path.rstrip("/") or "/"


@dataclass(frozen=True)
class FileEntry:
    """One file to read: the location its filesystem comes from, its path there, its size."""

    root: str
    path: str
    size: int

    def open(self) -> pa.NativeFile:
        return resolve(self.root)[0].open_input_file(self.path)


def _hidden(relative: str) -> bool:
    """Names starting with ``_`` or ``.`` are metadata or temp files (Spark's convention)."""
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


def list_files(locations: str | os.PathLike[str] | list[str | os.PathLike[str]]) -> list[FileEntry]:
    """The files of ``locations`` (files or directories, searched recursively), sorted.

    Inside a directory, files and folders whose names start with ``_`` or ``.`` are
    skipped: markers such as ``_COMMITTED`` and temporary files.
    """
    items = locations if isinstance(locations, list) else [locations]
    if not items:
        raise ConfigError("no files given: pass a path, a URI or a list of them")
    out: list[FileEntry] = []
    for item in items:
        root = normalize(item)
        fs, path = resolve(root)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.File:
            out.append(FileEntry(root, path, int(info.size)))
        elif info.type == pafs.FileType.Directory:
            found = fs.get_file_info(pafs.FileSelector(path, recursive=True))
            base = path.rstrip("/") + "/"
            files = [
                f
                for f in found
                if f.type == pafs.FileType.File and not _hidden(f.path[len(base) :])
            ]
            out.extend(FileEntry(root, f.path, int(f.size)) for f in sorted(files, key=_key))
        else:
            raise ConfigError(f"{root!r} does not exist; give an existing file or directory")
    return out


def _key(info: pafs.FileInfo) -> str:
    return str(info.path)


def write_atomically(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write ``data`` to a hidden temporary file next to ``path``, then rename it over ``path``.

    Readers see the old file or the new one, never a part (a rename is atomic on local
    and POSIX filesystems; object stores write whole objects anyway).
    """
    head, _, name = path.rpartition("/")
    tmp = f"{head}/.{name}.{uuid.uuid4().hex}{_TEMP}"
    with fs.open_output_stream(tmp) as out:
        out.write(data)
    fs.move(tmp, path)


_TEMP = ".tmp"


def is_temp(name: str) -> bool:
    """Whether a file name is one :func:`write_atomically` left behind by dying mid-write."""
    return name.startswith(".") and name.endswith(_TEMP)
