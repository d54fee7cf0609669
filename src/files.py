"""File helpers without torch, shared by the library and world.py."""

import os
import tempfile
from pathlib import Path


def new_file_mode():
    """The mode open() gives a new file under the process's umask (0o644 under the common 0o022)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path, write):
    """
    Call write(file object) on a temporary file beside `path`, then rename it to `path`;
    the file gets the mode of a newly created one (mkstemp's 0o600 would hide it from others).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.chmod(tmp, new_file_mode())
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
