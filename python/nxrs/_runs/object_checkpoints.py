"""The checkpoints of a ``CheckpointManager`` whose directory is on object storage, and the local
cache of the newest one (``docs/RUNS.md``, "Run directories on object storage").

A checkpoint is written as a local file first (the cache, crash-safely, as a local save), then
uploaded as one object in one PUT carrying its SHA-256 (``ObjectDirectory.upload``: the store
checks it, nxrs reads the object's size and checksum back). Only then does it count: it is
listed, the manifest may refer to it, older ones may be pruned. A download is checked against
the same checksum, then by ``Trainer.load`` (every CRC of the file), as a local file is.

The cache (``NXRS_CACHE_DIR``, else ``$XDG_CACHE_HOME/nxrs`` or ``~/.cache/nxrs``, then
``runs/<SHA-256 of the URL, 16 digits>/``) holds the newest checkpoint this machine wrote or
read, beside its ETag (``<name>.etag``): a resume on the same machine finds the object's ETag
in the listing equal to the cached one and reads the file, not the network.
"""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

from nxrs._storage.store import Listed, ObjectDirectory, is_url, open_store
from nxrs._util.cache import cache_root

__all__ = ["ObjectCheckpoints", "cache_root", "local_copy"]

_ETAG_SUFFIX = ".etag"


class ObjectCheckpoints:
    """The checkpoint objects of the directory ``url`` and their local cache ``cache``."""

    def __init__(self, url: str) -> None:
        self.store = open_store(url)
        key = hashlib.sha256(self.store.url.encode()).hexdigest()[:16]
        self.cache = cache_root() / "runs" / key
        self.cache.mkdir(parents=True, exist_ok=True)
        #: The size and SHA-256 (hex) of each checkpoint this process uploaded, by name: what
        #: the manifest records of the checkpoint it refers to.
        self.uploaded: dict[str, tuple[int, str]] = {}

    def listing(self) -> list[Listed]:
        return self.store.listing()

    def upload(self, path: Path) -> None:
        """Uploads the cached file ``path`` as its object (OSError if it is not stored
        exactly), then makes it the only checkpoint in the cache."""
        size, sha256, etag = self.store.upload(path.name, path)
        self._remember(path, etag)
        self.uploaded[path.name] = (size, sha256)

    def fetch(self, name: str) -> Path:
        """The cached file of the object ``name``: downloaded (checksum checked) unless the
        cache holds its current version, then the only checkpoint in the cache.
        FileNotFoundError if the object is gone."""
        etag = self.store.version(name)
        if etag is None:
            raise FileNotFoundError(errno.ENOENT, "no such object", self.store.url_of(name))
        path = _fetch_into(self.store, self.cache, name, etag)
        self._remember(path, etag)
        return path

    def mirror(self) -> Path:
        """A local copy of the whole directory (the manifest, the transcript, the checkpoints:
        every object but the hidden ones, ``.nxrs-run.lease``), for the readers that read a
        whole run directory (``nxrs verify``, ``nxrs diff``); kept in the cache's ``mirror/``,
        where only what changed is downloaded again."""
        target = self.cache / "mirror"
        target.mkdir(exist_ok=True)
        present = [o for o in self.store.listing() if not o.name.startswith(".")]
        for listed in present:
            _fetch_into(self.store, target, listed.name, listed.version)
        wanted = {n for o in present for n in (o.name, o.name + _ETAG_SUFFIX)}
        for child in target.iterdir():
            if child.name not in wanted:
                child.unlink(missing_ok=True)  # gone from the store since the last copy
        return target

    def delete(self, name: str) -> None:
        self.store.delete(name)

    def _remember(self, path: Path, etag: str) -> None:
        """Records ``path``'s object version and drops the other cached checkpoints: the cache
        holds the newest one."""
        path.with_name(path.name + _ETAG_SUFFIX).write_text(etag, encoding="utf-8")
        keep = {path.name, path.name + _ETAG_SUFFIX}
        for child in self.cache.iterdir():
            if child.name not in keep and child.name.endswith((".nxck", _ETAG_SUFFIX)):
                child.unlink(missing_ok=True)


def _fetch_into(store: ObjectDirectory, directory: Path, name: str, etag: str) -> Path:
    """The object ``name`` as a file of ``directory``: downloaded (its checksum checked)
    unless the file there is already the version ``etag`` (its ``.etag`` beside it)."""
    path = directory / name
    etag_file = path.with_name(path.name + _ETAG_SUFFIX)
    try:
        cached = etag_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        cached = None
    if cached != etag or not path.is_file():
        etag_file.write_text(store.download(name, path), encoding="utf-8")
    return path


def local_copy(location: str | os.PathLike[str]) -> Path:
    """``location`` as a local path: itself, or for a URL on object storage a local copy of
    the run directory it names (``ObjectCheckpoints.mirror``) or of the one object it names
    (a checkpoint's URL). FileNotFoundError when the URL names nothing."""
    if not is_url(location):
        return Path(location)
    url = str(location).rstrip("/")
    directory = ObjectCheckpoints(url)
    if directory.store.exists():
        return directory.mirror()
    parent, _, name = url.rpartition("/")
    objects = ObjectCheckpoints(parent)
    etag = objects.store.version(name)
    if etag is None:
        raise FileNotFoundError(errno.ENOENT, "no such run directory or object", url)
    return _fetch_into(objects.store, objects.cache / "mirror", name, etag)
