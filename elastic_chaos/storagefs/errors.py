"""What storagefs raises: its own classes, so the package imports nothing of the toolkit around it.

The toolkit's adapter (elastic_chaos.platforms.storage.storagefs_errors) turns each into the
toolkit's error of the same meaning, so a user still gets exit 2 for a rule that cannot be, a
setup error for a mount that cannot be made, and a platform error for a daemon that stopped
answering.
"""
from __future__ import annotations


class StorageFsError(Exception):
    """Anything storagefs raises on purpose."""


class RuleError(StorageFsError, ValueError):
    """A rule or a control request that cannot be (the caller's input): say what to change."""


class MountError(StorageFsError):
    """The mount could not be made here (no FUSE, a folder that is not one, a mount already there)."""


class DaemonError(StorageFsError):
    """The daemon did not answer, refused a request, or its mount could not be removed."""


class PauseTimeout(DaemonError):
    """No op reached a crash point within the time given."""
