"""Real git repositories for the ghost tests, and the user-visible git state they must not change."""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

IDENTITY = {"GIT_AUTHOR_NAME": "Tester", "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "Tester", "GIT_COMMITTER_EMAIL": "t@example.com"}


def isolated_git_env(home: Path) -> dict[str, str]:
    """No global or system git config, so no identity is configured (as on a fresh machine)."""
    home.mkdir(parents=True, exist_ok=True)
    empty = home / "gitconfig"
    empty.touch()
    return {"HOME": str(home), "GIT_CONFIG_GLOBAL": str(empty), "GIT_CONFIG_NOSYSTEM": "1",
            "XDG_CONFIG_HOME": str(home / ".config")}


@dataclass
class Repo:
    """A working tree; `root` may be a linked worktree (its `.git` is then a file)."""

    root: Path

    def git(self, *args: str, cwd: Path | None = None, check: bool = True, identity: bool = True) -> str:
        env = {**os.environ, **(IDENTITY if identity else {}), "GIT_OPTIONAL_LOCKS": "0"}
        done = subprocess.run(["git", *args], cwd=cwd or self.root, env=env, capture_output=True)
        if check and done.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed: {done.stderr.decode(errors='replace')}")
        return done.stdout.decode("utf-8", "surrogateescape")

    def store(self, *args: str, check: bool = True) -> str:
        """git on ctxd's own snapshot store of this repository (where snapshots live)."""
        common = Path(self.git("rev-parse", "--path-format=absolute", "--git-common-dir").strip())
        return self.git(f"--git-dir={common / 'ctxd' / 'store'}", *args, check=check)

    @property
    def git_dir(self) -> Path:
        return Path(self.git("rev-parse", "--absolute-git-dir").strip())

    def write(self, path: str, text: str = "x\n") -> Path:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return target

    def commit_all(self, message: str = "commit") -> None:
        self.git("add", "-A")
        self.git("commit", "-q", "--no-verify", "-m", message)

    def state(self) -> dict[str, bytes]:
        """Everything of the user's git state a snapshot or restore must leave byte-identical."""
        git_dir = self.git_dir
        common = Path(self.git("rev-parse", "--path-format=absolute", "--git-common-dir").strip())
        index = git_dir / "index"
        refs = [line for line in self.git("for-each-ref").splitlines() if "refs/ctxd/" not in line]
        return {
            "index": hashlib.sha256(index.read_bytes()).digest() if index.exists() else b"",
            "HEAD": (git_dir / "HEAD").read_bytes(),
            "head": self.git("rev-parse", "--verify", "-q", "HEAD", check=False).encode(),
            "refs": "\n".join(refs).encode(),
            "config": (common / "config").read_bytes(),
            "status": self.git("status", "--porcelain=v2", "-z", "--branch", "--untracked-files=all").encode(
                "utf-8", "surrogateescape"),
            "ignored": self.git("status", "--porcelain=v2", "-z", "--ignored=matching",
                                "--untracked-files=all").encode("utf-8", "surrogateescape"),
        }

    def files(self) -> dict[str, str]:
        """Every file under the root but .git, with its content (symlinks as `-> target`)."""
        found: dict[str, str] = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if d != ".git"]
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                path = Path(dirpath, name)
                rel = path.relative_to(self.root).as_posix()
                if name == ".git":
                    continue
                if path.is_symlink():
                    found[rel] = "-> " + os.readlink(path)
                else:
                    mode = "x " if os.access(path, os.X_OK) else ""
                    found[rel] = mode + path.read_bytes().decode("utf-8", "replace")
        return found


def make_repo(path: Path, *, commit: bool = True) -> Repo:
    path.mkdir(parents=True, exist_ok=True)
    repo = Repo(path)
    repo.git("init", "-q", "-b", "main")
    if commit:
        repo.write("README.md", "hello\n")
        repo.write("src/app.py", "print('app')\n")
        repo.write("src/util.py", "def util():\n    return 1\n")
        repo.write(".gitignore", "*.log\nsecret/\n")
        repo.commit_all("initial")
    return repo
