"""A POST's body on its way in: written to a file as it comes, up to a cap, never kept in memory.

Whatever a client sends for a check goes to a temporary file in the course's grading state
(``.grading/bodies/``), so that twelve clients that each send 20 MiB and stop hold twelve files,
not 240 MiB of the service's memory. Past the cap the rest is only counted and thrown away, and
the file emptied: the answer is then 413 with the body's size, rather than a cut connection, which
the Hub's proxy would answer with 503. A body's file goes when its request ends; files that a
killed service left behind go when the next one starts (:func:`clear_left`).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

PREFIX = "body-"


def clear_left(folder: Path) -> None:
    """Makes ``folder`` and removes the bodies left in it by a service that was killed."""
    folder.mkdir(parents=True, exist_ok=True)
    for left in folder.glob(f"{PREFIX}*"):
        left.unlink(missing_ok=True)


class Body:
    """One request's body: its bytes in a file while they are within ``limit``; its size in all,
    or the size its headers declare (``Content-Length``) when that is larger."""

    def __init__(self, folder: Path, limit: int, declared: int):
        self.limit, self.declared, self.received = limit, declared, 0
        self.file = tempfile.NamedTemporaryFile(dir=folder, prefix=PREFIX)

    @property
    def size(self) -> int:
        return max(self.declared, self.received)

    @property
    def over(self) -> bool:
        return self.size > self.limit

    def write(self, chunk: bytes) -> None:
        """Keeps ``chunk`` while the body is within the limit; past it, empties the file and only counts."""
        was_over = self.over
        self.received += len(chunk)
        if not self.over:
            self.file.write(chunk)
        elif not was_over:
            self.file.truncate(0)

    def path(self) -> Path:
        """The file, with every byte received so far in it, for another process to read."""
        self.file.flush()
        return Path(self.file.name)

    def discard(self) -> None:
        self.file.close()  # a NamedTemporaryFile removes its file when closed
