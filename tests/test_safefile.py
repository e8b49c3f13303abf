"""`ctxd.safefile`: a planted path can neither block a reader nor grow its memory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ctxd.safefile import FileRefused, read_bounded, read_text_bounded


def test_a_regular_file_is_read_whole_within_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_bytes(b"x = 1\n")
    assert read_bounded(path, 6) == b"x = 1\n"
    assert read_text_bounded(path, 100) == "x = 1\n"
    with pytest.raises(FileRefused, match="over the limit"):
        read_bounded(path, 5)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(FileRefused, match="not a regular file"):
        read_bounded(fifo, 1024)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    with pytest.raises(FileRefused):
        read_bounded(link, 1024)


def test_a_link_to_a_device_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "zero"
    link.symlink_to("/dev/zero")
    with pytest.raises(FileRefused, match="not a regular file"):
        read_bounded(link, 1024)


def test_links_are_refused_when_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("secret")
    link = tmp_path / "link"
    link.symlink_to(target)
    assert read_bounded(link, 100) == b"secret"
    with pytest.raises(FileRefused, match="symbolic link"):
        read_bounded(link, 100, follow_links=False)


def test_a_missing_file_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "none", 100)
