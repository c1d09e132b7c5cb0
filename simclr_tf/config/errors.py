"""The errors run.py reports without a traceback, TF-free (as the flag checks are):
`ConfigError`, an invalid flag value or combination; `DiskFullError`, a write that
ran out of space (`disk_full` recognises one from any writer: Python's, NumPy's,
pyarrow's or TensorFlow's file system)."""
import contextlib
import errno
import os
import re
import shutil


class ConfigError(ValueError):
    """An invalid flag value or combination; names the flag and the fix."""

    def __init__(self, flag, message):
        self.flag = flag
        super().__init__(f"--{flag}: {message}")

    @classmethod
    def from_rule(cls, flag, error):
        """The error of a `simclr_tf.config.rules` check on the value of `--flag`."""
        message = str(error)
        if message.startswith(f"{flag} "):
            message = message[len(flag) + 1:]
        return cls(flag, message)


class DiskFullError(OSError):
    """A write ran out of space (ENOSPC; EDQUOT: a quota): the message names the file,
    the space left where it goes and what was kept. run.py reports it as a fault of
    the run (exit 1), without a traceback (`disk_full` makes one).

    Attributes:
        path: the file that was written (None: not known).
    """


_NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# How TensorFlow's file system says ENOSPC / EDQUOT: a ResourceExhaustedError
# '<path>; No space left on device' (measured on a full tmpfs).
_NO_SPACE_WORDS = ("No space left on device", "Disk quota exceeded")


def no_space_left(error):
    """Whether `error` says a file system is full: an OSError of ENOSPC or EDQUOT
    (Python's, NumPy's, pyarrow's), or TensorFlow's ResourceExhaustedError saying so
    (a GPU out of memory is one too, and is not this)."""
    if isinstance(error, OSError) and error.errno in _NO_SPACE_ERRNOS:
        return True
    return (type(error).__name__ == "ResourceExhaustedError"
            and any(words in str(error) for words in _NO_SPACE_WORDS))


def free_space(path):
    """The free space of the file system `path` is on (its nearest existing folder)
    as '12.3 MB', or 'unknown' (a remote file system such as gs://)."""
    folder = os.path.abspath(path) if "://" not in path else None
    while folder and not os.path.isdir(folder):
        folder = os.path.dirname(folder) if os.path.dirname(folder) != folder else None
    try:
        free = float(shutil.disk_usage(folder).free) if folder else None
    except OSError:
        free = None
    if free is None:
        return "unknown"
    for unit in ("B", "kB", "MB", "GB"):
        if free < 1000 or unit == "GB":
            return f"{free:.0f} {unit}" if unit == "B" else f"{free:.1f} {unit}"
        free /= 1000


def disk_full(error, path=None, kept="Files written before it are intact."):
    """The `DiskFullError` of `error`, raised writing `path` (None: the file the error
    names), saying `kept`; `error` itself when it is one; None when it is not a full
    disk (`no_space_left`)."""
    if isinstance(error, DiskFullError):
        return error
    if not no_space_left(error):
        return None
    named = re.search(r"(\S+); (?:%s)" % "|".join(_NO_SPACE_WORDS), str(error))
    path = path or getattr(error, "filename", None) or (named and named.group(1))
    where = f"{path} failed: no space left on the device ({free_space(path)} free " \
        "there now)" if path else "a file failed: no space left on the device"
    full = DiskFullError(f"Writing {where}. {kept} Free space (or write elsewhere) and "
                         "run the same command again.")
    full.path = path  # not .filename / .errno: OSError's str() would show them instead
    return full


# A path on a file system only TensorFlow reads ('gs://bucket/run', 's3://...').
_REMOTE_PATH = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\",;)]*")


def remote_path_error(error):
    """The one line for a TensorFlow file-system error on a remote path (gs://: a
    bucket name missing, no credentials, no network), or None for any other error.
    TensorFlow's message names the path; its first line is kept."""
    if not type(error).__module__.startswith("tensorflow"):
        return None
    message = str(error).strip()
    path = _REMOTE_PATH.search(message)
    if path is None:
        return None
    first = message.splitlines()[0][:300]
    return (f"{path.group(0)} cannot be read or written ({type(error).__name__}: {first}). "
            "Check the path (is its bucket named? `gs://$BUCKET/...` with BUCKET unset "
            "gives gs:///...), that this machine reaches the storage and has "
            "credentials for it (on GCP: `gcloud auth application-default login`, or a "
            "VM's service account), or use a local path.")


@contextlib.contextmanager
def full_disk_reported(path, kept):
    """Turns a full disk while writing `path` inside the block into its
    `DiskFullError` (`disk_full`), which says `kept`; other errors pass unchanged."""
    try:
        yield
    except Exception as error:  # pylint: disable=broad-except
        full = disk_full(error, path, kept)
        if full is None:
            raise
        raise full from None
