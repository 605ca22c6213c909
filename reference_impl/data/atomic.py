"""Write a file atomically: into a temporary file next to it, then rename over the target.

Readers never see a half-written file, and concurrent writers of the same content are harmless
(the last rename wins). The file gets the usual permissions (``0o666`` minus the umask) rather
than the private ``0o600`` of a temporary file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_output(target: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """Yield a binary handle whose content replaces ``target`` when the block ends without error."""
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
