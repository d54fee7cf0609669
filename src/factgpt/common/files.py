"""
File helpers without torch, shared by the library and world.py: data paths, atomic writes, locks.
"""

import contextlib
import logging
import os
import tempfile
from pathlib import Path

from factgpt.common.errors import RunError, short_reason

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

logger = logging.getLogger(__name__)

# the checkout this file lives in: src/factgpt/common/ is three folders down
REPOSITORY = Path(__file__).resolve().parents[3]
DATA_DIR = REPOSITORY / "data"


def resolve_data_path(path):
    """
    A bare data file name that is not in the current directory is looked up in the repository's
    data/.
    """
    if path is not None and not os.path.exists(path) and os.path.dirname(path) == "":
        candidate = DATA_DIR / path
        if candidate.exists():
            return str(candidate)
    return path


def new_file_mode():
    """The mode open() gives a new file under the process's umask (0o644 under the common 0o022)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write(path, write, on_failure=""):
    """
    Call write(file object) on a temporary file beside `path`, then rename it to `path` with a new
    file's mode (mkstemp's 0o600 would hide it from others). A failed write leaves `path` as it was
    and raises RunError naming the file and the reason, then `on_failure`.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.chmod(tmp, new_file_mode())
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        failed = os_error_in(e)
        if failed is None:
            raise
        raise RunError(
            f"cannot write {path}: {failed.strerror or short_reason(failed)}{on_failure}"
        ) from None


def os_error_in(error):
    """
    The OSError that an exception is or arose from (torch.save wraps a full disk's in a
    RuntimeError), or None.
    """
    while error is not None and not isinstance(error, OSError):
        error = error.__cause__ or error.__context__
    return error


class PathInUse(Exception):
    """Another live process holds the lock on a path."""


@contextlib.contextmanager
def exclusive_lock(path):
    """
    Hold an exclusive lock on the file `path` in the with-block, or raise PathInUse naming the
    holder's process id. The system releases it however its process ends, so a crash leaves no stale
    lock (Windows has no lock).
    """
    if fcntl is None:
        yield
        return
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    while True:
        f = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, new_file_mode()), "r+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = f.read().strip() or "unknown"
            f.close()
            raise PathInUse(f"process {holder}") from None
        try:
            if os.stat(path).st_ino == os.fstat(f.fileno()).st_ino:
                # locked the file that is at `path` now (not one a releasing holder just removed)
                break
        except FileNotFoundError:
            pass
        f.close()
    try:
        f.truncate()
        f.write(str(os.getpid()))
        f.flush()
        yield
    finally:
        os.unlink(path)
        f.close()


def set_aside(path, why, then, writer=True):
    """
    A file that cannot be read, renamed <path>.unreadable and said in one line (`path` `why`, where
    it went, `then`), so that no run waits on its user to delete it. Only the writer (rank 0 under
    torchrun) renames and says it.
    """
    aside = f"{path}.unreadable"
    if writer:
        os.replace(path, aside)
        logger.warning("%s %s: moved to %s; %s", path, why, aside, then)
