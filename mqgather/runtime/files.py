"""Files written whole and private: the key ring, the stack's secrets, the exports."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: Directories that hold messages' bodies in the clear (exports, the analytics job's
#: staging): only their owner may list or enter them.
PRIVATE_DIR = 0o700


def write_whole(path: Path, data: str | bytes) -> None:
    """Store ``data`` (text as UTF-8) in ``path``, mode 600, whole or not at all.

    Written to a file of its own beside ``path`` (made 600 and exclusively, so neither a
    file left there readable by others nor a link planted there is written through),
    synced, then put in place in one step and the directory synced: a reader never sees
    half a file, and a crash leaves the old file or the new one, never a short one.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data.encode() if isinstance(data, str) else data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
