"""Reading git's index: the user's, which a capture starts from, and ctxd's own kept ones.

A capture needs to know what the user's index lists (`UserIndex`, read with `ls-files --stage`
only when its bytes changed since the last capture), how many entries an index holds (from its
header, split indexes included), and how to start a temporary index from another one without
losing the stat data that spares unchanged files from being hashed again (`copy_user_index`,
`seed`).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import struct
from pathlib import Path

from ctxd.errors import GitFailed
from ctxd.ghost.gitcmd import Background
from ctxd.ghost.gitstore import Site, shared_index_of
from ctxd.safefile import OPEN_FLAGS


def index_entry_count(index: Path, git_dir: Path | None = None) -> int:
    """Entries in an index file, read from its header ("DIRC", version, count). A split index (one
    of ctxd's, in `git_dir`) holds the entries that replace some of its shared index's and the
    entries it adds, and its `link` extension says which of the shared index's entries it deletes
    and which it replaces (two EWAH bitmaps)."""
    with index.open("rb") as handle:
        data = handle.read() if git_dir is not None else handle.read(12)
    count = _header_count(data)
    shared = shared_index_of(git_dir, data) if git_dir is not None else None
    if shared is None:
        return count
    with shared.open("rb") as handle:
        base = _header_count(handle.read(12))
    at = data.find(bytes.fromhex(shared.name.split(".", 1)[1])) + 20
    deleted, at = _ewah_set_bits(data, at)
    replaced, _ = _ewah_set_bits(data, at)
    return base - deleted + count - replaced


def _header_count(header: bytes) -> int:
    if len(header) < 12 or header[:4] != b"DIRC":
        return 0
    return int(struct.unpack(">I", header[8:12])[0])


def _ewah_set_bits(data: bytes, at: int) -> tuple[int, int]:
    """The bits set in the EWAH bitmap at `at` (git's ewah_io.c), and where the bytes after it start:
    its size in bits, its count of 64-bit words, the words, the position of the last marker word.
    A marker word says whether a run of whole words is all ones (bit 0), how long the run is
    (the next 32 bits), and how many words given as they are follow it (the top 31 bits)."""
    _bits, words = struct.unpack_from(">II", data, at)
    values = struct.unpack_from(f">{words}Q", data, at + 8)
    count, i = 0, 0
    while i < words:
        marker = values[i]
        if marker & 1:
            count += ((marker >> 1) & 0xFFFFFFFF) * 64
        literal = marker >> 33
        count += sum(bin(word).count("1") for word in values[i + 1:i + 1 + literal])
        i += 1 + literal
    return count, at + 8 + 8 * words + 4




_STAGED = re.compile(rb"(?:^|\0)[0-7]{6} [0-9a-f]{40,64} ([0-3])\t([^\0]*)")
_GITLINK = re.compile(rb"(?:^|\0)160000 [0-9a-f]{40,64} [0-3]\t([^\0]*)")


MAX_INDEX_BYTES = 4 << 30  # a larger "index" is no index git wrote


def _digest(index: Path) -> str:
    """The SHA-1 of the user's index file. Only a regular file is read, never through a FIFO or a
    device planted there (a link to /dev/zero was read until memory ran out; a FIFO held the
    capture), and only its size at the open: git would wait on one too, so no capture is taken."""
    fd = os.open(index, OPEN_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_INDEX_BYTES:
            raise GitFailed(f"{index}: not an index git wrote (not a regular file, or over "
                            f"{MAX_INDEX_BYTES >> 30} GiB): no checkpoint")
        digest, left = hashlib.sha1(), info.st_size
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 20))):
            digest.update(chunk)
            left -= len(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


class UserIndex:
    """What a capture needs to know of the user's index, read with `ls-files --stage` when needed.

    When the index file's bytes are unchanged since the last capture, the listing is not read.
    A plain folder has no index: its listing is empty.
    """

    def __init__(self, site: Site) -> None:
        self.site = site
        index = site.user_index
        try:  # a few milliseconds, against a git process for the listing
            self.digest: str | None = _digest(index) if index else "plain"
        except FileNotFoundError:
            self.digest = None
        self._listing: bytes | None = b"" if index is None else None
        self._pending: Background[tuple[int, bytes]] | None = None

    def prefetch(self) -> None:
        """Start reading the listing on a thread (it is read at once when asked for before)."""
        if self._listing is None and self._pending is None:
            site = self.site
            self._pending = Background(lambda: site.user("ls-files", "--stage", "-z"))

    def settle(self) -> None:
        """Wait for a listing being read (a capture leaves no thread behind)."""
        if self._pending is not None:
            self._pending.wait()

    @property
    def listing(self) -> bytes:
        if self._listing is None:
            pending = self._pending
            self._listing = (pending.result() if pending else self.site.user("ls-files", "--stage", "-z"))[1]
        return self._listing

    @property
    def signature(self) -> str:
        return hashlib.sha1(self.listing).hexdigest()

    @property
    def count(self) -> int:
        return self.listing.count(b"\0")

    def unmerged(self) -> set[str]:
        if not any(marker in self.listing for marker in (b" 1\t", b" 2\t", b" 3\t")):
            return set()  # the common case, found at memchr speed
        return {os.fsdecode(m.group(2)) for m in _STAGED.finditer(self.listing) if m.group(1) != b"0"}

    def paths(self) -> set[str]:
        return {os.fsdecode(m.group(2)) for m in _STAGED.finditer(self.listing)}

    def gitlinks(self) -> list[str]:
        """Submodules (mode 160000): their commit is read from their own git directory, which no
        watch of the work tree sees change."""
        if b"160000 " not in self.listing:
            return []
        return sorted({os.fsdecode(m.group(1)) for m in _GITLINK.finditer(self.listing)})



def copy_user_index(site: Site, index: Path) -> None:
    """Start a temporary index from a copy of the user's (same bytes and mtime, so its stat data
    still spares unchanged files from being hashed).

    A split index (`core.splitIndex`) holds only recent changes and names a `sharedindex.<id>`
    with the rest, which git looks for in the git directory of the command that reads it: that
    file is copied into the store for as long as it takes to write the copy as a whole index."""
    assert site.user_git_dir is not None and site.user_index is not None
    import shutil  # here: the common capture (a kept seed) does without it

    shutil.copy2(site.user_index, index)
    shared = shared_index_of(site.user_git_dir, index.read_bytes())
    if shared is not None:
        copy = site.store / shared.name
        try:
            shutil.copy2(shared, copy)
            site.git("update-index", "--no-split-index", index=index)
        except FileNotFoundError:  # the user's git replaced it meanwhile
            raise GitFailed("the user's split index changed while it was copied") from None
        finally:
            copy.unlink(missing_ok=True)
    _unmark_local_edits(site, index)


def _unmark_local_edits(site: Site, index: Path) -> None:
    """Unmark, in the copy, the entries the user marked `--assume-unchanged`, or `--skip-worktree`
    while the file is on disk (ways to keep local edits out of commits). `add --update` passes
    marked entries by, so the snapshot would hold the index's bytes instead of the file's, and a
    restore would overwrite the edits with no snapshot holding them. A sparse checkout's
    skip-worktree entries (not on disk) keep their mark."""
    assumed: list[bytes] = []
    skipped: list[bytes] = []
    for entry in site.git("ls-files", "-v", "-z", index=index)[1].split(b"\0"):
        if entry.startswith(b"H "):  # nearly every entry: cached, unmarked
            continue
        tag, path = entry[:1], entry[2:]
        if tag.islower():
            assumed.append(path)
        if tag in (b"S", b"s") and os.path.lexists(site.top / os.fsdecode(path)):
            skipped.append(path)
    for flag, paths in (("--no-assume-unchanged", assumed), ("--no-skip-worktree", skipped)):
        if paths:  # one flag per call: git applies only the last one given to every path
            site.git("update-index", flag, "-z", "--stdin", index=index, stdin=b"".join(p + b"\0" for p in paths))


def seed(kept: Path, index: Path) -> None:
    """Start a temporary index from the kept one: a second name for the same file, since git never
    writes an index in place (it writes `<index>.lock` and renames it over), so the kept one stays
    as it is. Same bytes and mtime (git uses it to spot racy entries), and nothing copied."""
    try:
        os.link(kept, index)
    except OSError:  # a file system without hard links
        import shutil

        shutil.copy2(kept, index)


def stamp(index: Path) -> tuple[int, int, int] | None:
    try:
        st = index.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)
