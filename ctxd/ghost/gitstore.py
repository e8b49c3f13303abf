"""Where snapshots live: a private git object store per repository (or per plain folder).

A workspace inside a git repository gets `<common git dir>/ctxd/store`; a folder that is not a
git repository gets `<state dir>/ghost/<hash of its path>/store`. Either is a bare repository of
ctxd's own, so the user's refs, reflogs, index, config and hooks are never involved: nothing shows
in `git log --all` or `git for-each-ref`, and `git gc`/`git fsck` in the user's repository neither
see nor break it. Its refs `refs/ctxd/<scope key>/<id>` keep the snapshots alive.

Borrowing: while ctxd's own git commands run, the user's object directory is an alternate
(`GIT_ALTERNATE_OBJECT_DIRECTORIES`, never written to disk), so unchanged files are not hashed or
stored twice during a capture. After each snapshot, every object it needs that lives only in the
user's store is copied into this one ("pinning"): a snapshot stays restorable after the user
rewrites history and runs `git gc --prune=now`, and this store is complete on its own.

The store is initialised with `info/attributes` unsetting `text`, `eol`, `filter`, `ident` and
`working-tree-encoding` for every path (that file overrides every `.gitattributes`), and git runs
with no global or system config, so bytes are stored and written back exactly as they are.

Ownership: a store inside the user's `.git` may have come with the folder (an archive, a copied
disk), with a config that names a filter command. ctxd uses only a store it made: at creation it
writes `ctxd-owner`, a random nonce and an HMAC (key `$XDG_STATE_HOME/ctxd/ghost/owner.key`, 0600,
never leaves the machine) over the nonce and the store's `config` and `info/attributes`. A store whose
mark is missing or wrong, whose config or attributes changed, that has `commondir` or on-disk
alternates, or that is reached through a symbolic link, is refused (1002) before git runs in it.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ctxd import places
from ctxd.errors import GitFailed
from ctxd.ghost import gitcmd
from ctxd.safefile import read_text_bounded, write_whole
from ctxd.settings import default_state_dir

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: the in-process lock alone
    fcntl = None  # type: ignore[assignment]

ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
"""A full SHA-1 or SHA-256 object name, nothing else."""

REF_ROOT = "refs/ctxd"
ATTRIBUTES = "* -text -eol -crlf -filter -ident -working-tree-encoding\n"
MAX_PACKS = 24
"""More packs than this (a capture that hashes many files writes one) and the store is repacked
after a snapshot."""
MAX_LOOSE_IN_SAMPLE = 27
"""Or more loose objects than this in `objects/17` (about 6,900 in all: git's own `gc.auto`
estimate; short captures write their few blobs, and every capture its trees, loose)."""

SPLIT_INDEX = ("-c", "core.splitIndex=true", "-c", "splitIndex.sharedIndexExpire=never")
"""ctxd's own indexes are split: a `sharedindex.<id>` in the store holds the entries, the index
file what changed since. A short capture of a large repository then reads its entries but writes
a few KB (twice: `add`, then `write-tree`) instead of all of them. Shared files no kept index
names are removed by ctxd (`drop_unused_shared_indexes`), not after git's two weeks."""
USER_GIT_SECONDS = 60.0
"""A git command in the user's repository (`Site.user`) that has not ended after this long is
killed: a listing of a large repository takes seconds; one waiting on a FIFO, for ever."""
SHARED_INDEX_GRACE_SECONDS = 3600
"""A shared index file no kept index names is removed once it has not been used for this long
(git marks one as used whenever it reads an index that names it)."""

_locks_guard = threading.Lock()
_locks: dict[str, threading.Lock] = {}


def _thread_lock(path: Path) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(str(path), threading.Lock())


@dataclass
class Site:
    """A workspace folder resolved to its work tree, its scope and its snapshot store."""

    folder: Path
    top: Path  # the work tree's root
    prefix: str  # the folder relative to `top`: "" or "sub/dir/"
    worktree: str  # "" for a main worktree or a plain folder, else the linked worktree's name
    head: str | None  # HEAD's commit when opened; None before the first commit or in a plain folder
    store: Path
    user_git_dir: Path | None = None  # None: a plain folder (not a git repository)
    user_objects: Path | None = None
    _excludes: list[str] | None = field(default=None, repr=False)

    @property
    def plain(self) -> bool:
        return self.user_git_dir is None

    @property
    def key(self) -> str:
        """Names this folder's snapshots among those of the store (worktrees and scopes share it)."""
        return folder_key(self.worktree, self.prefix)

    @property
    def user_index(self) -> Path | None:
        return None if self.user_git_dir is None else self.user_git_dir / "index"

    @property
    def scope(self) -> str:
        """Pathspec for the workspace folder, taken literally (names may hold `*` or `:`)."""
        return f":(literal){self.prefix.rstrip('/')}" if self.prefix else "."

    def in_scope(self, path: str) -> bool:
        return path.startswith(self.prefix)

    def rel(self, path: str) -> str:
        """A repository path as the client sees it: relative to the workspace folder."""
        return path[len(self.prefix):]

    # --- running git ---

    def git(self, *args: str, index: Path | None = None, stdin: bytes | None = None,
            ok: tuple[int, ...] = (0,), borrow: bool = True, timeout: float | None = None) -> tuple[int, bytes]:
        """A git command on ctxd's store with the folder's work tree (the only one that writes)."""
        env = gitcmd.base_env(user_config=False)
        env["GIT_INDEX_FILE"] = str(index) if index is not None else str(self.tmp_dir() / "none.index")
        if borrow and self.user_objects is not None:
            env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(self.user_objects)
        return gitcmd.run([*SPLIT_INDEX, f"--git-dir={self.store}", f"--work-tree={self.top}", *args],
                          cwd=self.top, env=env, stdin=stdin, ok=ok, timeout=timeout)

    def user(self, *args: str, stdin: bytes | None = None, ok: tuple[int, ...] = (0,)) -> tuple[int, bytes]:
        """A read-only git command in the user's repository, as git itself would see it (their
        ignore rules), but with the safe options and environment. Killed after USER_GIT_SECONDS:
        git opens the files it reads with a blocking open, and a FIFO planted where it reads an
        ignore rule held it (and a process per hook) for ever."""
        if self.plain:
            return self.git(*self._global_excludes(), *args, stdin=stdin, ok=ok, timeout=USER_GIT_SECONDS)
        return gitcmd.run(list(args), cwd=self.top, env=gitcmd.base_env(), stdin=stdin, ok=ok, timeout=USER_GIT_SECONDS)

    def _global_excludes(self) -> list[str]:
        """A plain folder's git reads no user config (the store has its own), but what the user
        ignores everywhere holds there too: their `core.excludesFile` (when it is not set, git
        reads `$XDG_CONFIG_HOME/git/ignore` by itself)."""
        if self._excludes is None:
            status, out = gitcmd.run(["config", "--get", "--path", "core.excludesFile"], cwd=self.top,
                                     env=gitcmd.base_env(), ok=tuple(range(256)))  # unset (1), unreadable: none
            path = os.fsdecode(out).strip()
            self._excludes = ["-c", f"core.excludesFile={path}"] if status == 0 and path else []
        return self._excludes

    def out(self, *args: str, **kwargs: Any) -> str:
        return os.fsdecode(self.git(*args, **kwargs)[1]).strip()

    def start(self, *args: str, borrow: bool = True) -> subprocess.Popen[bytes]:
        """A git command on ctxd's store that runs while ctxd talks to it (`gitcmd.start`)."""
        env = gitcmd.base_env(user_config=False)
        env["GIT_INDEX_FILE"] = str(self.tmp_dir() / "none.index")
        if borrow and self.user_objects is not None:
            env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(self.user_objects)
        return gitcmd.start([*SPLIT_INDEX, f"--git-dir={self.store}", *args], cwd=self.top, env=env)

    def paths(self, *args: str, user: bool = False, **kwargs: Any) -> list[str]:
        """Run a command with NUL-separated path output (`-z`) and split it."""
        raw = (self.user(*args, **kwargs) if user else self.git(*args, **kwargs))[1]
        return [os.fsdecode(p) for p in raw.split(b"\0") if p]

    # --- files of the store ---

    def tmp_dir(self) -> Path:
        path = self.store / "ctxd-tmp"
        path.mkdir(exist_ok=True)
        return path

    def temp_index(self) -> Path:
        """A fresh path for a temporary index. It must not exist until git writes it."""
        return self.tmp_dir() / f"tmp-{os.urandom(16).hex()}.index"

    def ref_dir(self, key: str | None = None) -> Path:
        return self.store / REF_ROOT / (key or self.key)

    def journal(self) -> Path:
        return self.store / f"journal-{self.key}.json"

    def interrupted_record(self) -> Path:
        return self.store / f"interrupted-{self.key}.json"

    @contextlib.contextmanager
    def locked(self, wait: bool = True) -> Iterator[bool]:
        """One writer per store, across threads and processes (two editors on one repository).
        Without `wait`, yields False at once when another holds it."""
        thread_lock = _thread_lock(self.store)
        if not thread_lock.acquire(blocking=wait):
            yield False
            return
        try:
            if fcntl is None:
                yield True
                return
            with open(self.store / "ctxd.lock", "a+b") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    yield False
                    return
                try:
                    yield True
                finally:
                    fcntl.flock(handle, fcntl.LOCK_UN)
        finally:
            thread_lock.release()


def folder_key(worktree: str, prefix: str) -> str:
    raw = f"{worktree}\0{prefix}".encode("utf-8", "surrogateescape")
    return hashlib.sha1(raw).hexdigest()[:16]


def open_site(folder: Path, state_dir: Path, create: bool = True) -> Site | None:
    """Resolve a workspace folder; create its store on first use (or, without `create`, return
    None when it has none)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise GitFailed(f"{folder}: no such folder")
    if not create and not any(os.path.lexists(p / ".git") for p in (folder, *folder.parents)):
        # No repository around it (git would find none): only a plain folder's store can exist,
        # found without starting git (thousands of folders may be opened at once).
        return _plain_site(folder.resolve(), state_dir, create)
    dot_git = next((p / ".git" for p in (folder, *folder.parents) if os.path.lexists(p / ".git")), None)
    if dot_git is not None and dot_git.is_dir():
        _check_alternates(dot_git / "objects")  # (before git reads it: `HEAD^{commit}` does)
    status, out = gitcmd.run(
        ["rev-parse", "--show-toplevel", "--absolute-git-dir", "--git-common-dir", "--show-prefix",
         "--show-object-format", "--revs-only", "HEAD^{commit}"],
        cwd=folder, env=gitcmd.base_env(), ok=(0, 128), timeout=USER_GIT_SECONDS)
    lines = os.fsdecode(out).split("\n")
    if status != 0 or len(lines) < 5 or not lines[0]:
        refuse_git_internals(folder)
        return _plain_site(folder.resolve(), state_dir, create)
    top, git_dir, common, prefix, object_format = Path(lines[0]), Path(lines[1]), lines[2], lines[3], lines[4]
    head = lines[5].strip() if len(lines) > 5 and ID.fullmatch(lines[5].strip()) else None
    common_dir = Path(common) if os.path.isabs(common) else (folder / common).resolve()
    worktree = "" if git_dir.resolve() == common_dir.resolve() else git_dir.name
    _check_layout(folder, top, prefix, worktree, common_dir, git_dir)
    _check_alternates(common_dir / "objects")  # (every store command borrows these objects)
    store = common_dir / "ctxd" / "store"
    _check_real_dirs(store)
    if not create and not (store / "HEAD").exists():
        return None
    key = account_key()
    _ensure_store(store, object_format or "sha1", key)
    check_owned(store, key)
    return Site(folder=folder, top=top, prefix=prefix, worktree=worktree, head=head, store=store,
                user_git_dir=git_dir, user_objects=common_dir / "objects")


def _check_alternates(objects: Path) -> None:
    """Refuse a repository whose `objects/info/alternates` is a FIFO or a device: every git
    command that reads its objects (and ctxd's store borrows them) would wait on it for ever."""
    alternates = objects / "info" / "alternates"
    if os.path.lexists(alternates) and not alternates.is_file():
        raise GitFailed(f"{alternates}: not a regular file (a FIFO or a device git would wait on); no snapshot is "
                        "taken or restored")


def _check_layout(folder: Path, top: Path, prefix: str, worktree: str, common_dir: Path, git_dir: Path) -> None:
    """Refuse a repository whose work tree is not where the folder is, which only a hand-made
    `.git` can arrange: `core.worktree` naming another folder (the snapshot would read it and a
    restore write it), or a `.git` file naming another folder's own `.git` or linked worktree (its
    snapshots would be that folder's), or a `.git` file naming a git dir that names no work tree
    (`_names_a_work_tree`). A name with a newline, which git's answer cannot carry, ends here too."""
    if (top / prefix).resolve() != folder.resolve():
        raise GitFailed(f"{folder}: git places its work tree at {top}, which does not hold this folder "
                        f"(core.worktree of {git_dir}, or a newline in a folder's name); no snapshot is taken or "
                        "restored")
    if worktree == "" and common_dir.name == ".git" and common_dir.resolve().parent != top.resolve():
        raise GitFailed(f"{folder}: its .git points at {common_dir}, the repository of another folder; "
                        "no snapshot is taken or restored")
    if worktree:  # a linked worktree's admin folder names the `.git` file of the one worktree it serves
        try:
            served = Path((git_dir / "gitdir").read_text("utf-8").strip())
        except (OSError, UnicodeDecodeError):
            served = None
        if served is None or served.parent.resolve() != top.resolve():
            raise GitFailed(f"{folder}: its .git points at {git_dir}, the worktree of another folder "
                            f"({served.parent if served else 'unknown'}; `git worktree repair` fixes a moved one); "
                            "no snapshot is taken or restored")
    if not worktree and (top / ".git").is_file() and not _names_a_work_tree(git_dir):
        raise GitFailed(f"{top / '.git'}: it points at {git_dir}, a git directory that does not name this folder "
                        "as its work tree (it may be another project's, made with --separate-git-dir); no snapshot "
                        "is taken or restored. If it is this folder's own, say so once with: git config --file "
                        f"{git_dir / 'config'} core.worktree {top}")


def _names_a_work_tree(git_dir: Path) -> bool:
    """Whether a git directory reached through a `.git` file names its work tree (`core.worktree`,
    as a submodule's does; git has already placed the work tree there, and `_check_layout` that it
    is this folder). A directory made by `git init --separate-git-dir` records no work tree, so any
    folder could point at it: another project's would take this folder's snapshots and give it its
    own. Read with `--file` and no includes: nothing else of that config is looked at."""
    status, out = gitcmd.run(["config", "--file", str(git_dir / "config"), "--no-includes", "--get", "core.worktree"],
                             cwd=git_dir, env=gitcmd.base_env(user_config=False), ok=tuple(range(256)))
    return status == 0 and bool(out.strip())


def refuse_git_internals(folder: Path) -> None:
    """A folder git cannot use as a work tree: a bare repository, a `.git` folder itself (or a
    folder inside one), or a `.git` file naming a bare repository. Snapshotted as a plain folder,
    a restore would rewrite that repository's refs and objects as if they were files."""
    status, out = gitcmd.run(["rev-parse", "--is-bare-repository", "--is-inside-git-dir", "--absolute-git-dir"],
                             cwd=folder, env=gitcmd.base_env(), ok=tuple(range(256)))
    fields = os.fsdecode(out).split("\n")
    if status == 0 and len(fields) >= 3 and "true" in fields[:2]:
        raise GitFailed(f"{folder}: this folder is inside the git repository data at {fields[2]} "
                        "(a bare repository or a .git folder), not a work tree; open the project folder "
                        "instead; no snapshot is taken or restored")
    if os.path.lexists(folder / ".git"):
        raise GitFailed(f"{folder / '.git'}: git cannot use this .git (it names no repository with a work "
                        "tree here); no snapshot is taken or restored")


def _check_real_dirs(store: Path) -> None:
    """`.git/ctxd` and its store must be folders of their own, never links (which could lead to
    another folder's store) nor files."""
    for path in (store.parent, store):
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(mode):
            kind = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
            raise GitFailed(f"{path} is {kind}; ctxd keeps its snapshots there only in a folder it made. "
                            "Move it aside to take snapshots here; no snapshot is taken or restored")


OWNER_MARK = "ctxd-owner"
SEALED = ("config", "info/attributes")
"""The store files git reads that could name a command or switch attributes back on."""
NEVER = ("commondir", "objects/info/alternates")
"""Files ctxd never writes into a store: each would make git read another repository's files."""
_keys: dict[str, bytes] = {}


def account_key() -> bytes:
    """This account's secret for marking stores: created once, readable by the owner only. It is
    the account's, not a state dir's (kept in the default one), so daemons with different state
    dirs on one repository accept each other's store."""
    path = default_state_dir() / "ghost" / "owner.key"
    cached = _keys.get(str(path))
    if cached is not None:
        return cached
    try:
        places.private_state_dir(path.parent.parent)  # a key another user planted would vouch for their stores
        if not path.exists():
            _create_key(path)
        text = read_text_bounded(path, 4096, follow_links=False, errors="strict")
    except (OSError, UnicodeDecodeError) as error:
        raise GitFailed(f"{path}: cannot read or create ctxd's store key ({error})") from None
    if not re.fullmatch(r"[0-9a-f]{64}", text):
        raise GitFailed(f"{path} is damaged; remove it (snapshot stores it marked are then refused and must be "
                        "moved aside)")
    _keys[str(path)] = bytes.fromhex(text)
    return _keys[str(path)]


def _create_key(path: Path) -> None:
    import secrets  # here, as in `_ensure_store`: once per account or store, not per snapshot

    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    pending = path.with_name(f".owner-{os.urandom(16).hex()}.tmp")
    handle = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(handle, secrets.token_hex(32).encode("ascii"))
        os.fsync(handle)
    finally:
        os.close(handle)
    try:
        os.link(pending, path)  # never replaces a key another daemon wrote first
    except FileExistsError:
        pass
    finally:
        pending.unlink(missing_ok=True)


def _seal(store: Path, key: bytes, nonce: str) -> str:
    mac = hmac.new(key, b"ctxd store\0" + nonce.encode("ascii"), hashlib.sha256)
    for name in SEALED:
        try:
            data = (store / name).read_bytes()
        except FileNotFoundError:
            data = b"\0missing"
        mac.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(data).digest())
    return mac.hexdigest()


def check_owned(store: Path, key: bytes) -> None:
    """Refuse a store this account's ctxd did not make, or whose sealed files changed since."""
    problem = next((f"it has {name}" for name in NEVER if os.path.lexists(store / name)), None)
    if problem is None:
        mark = read_json(store / OWNER_MARK)
        nonce = mark.get("nonce") if mark else None
        if not isinstance(nonce, str) or not re.fullmatch(r"[0-9a-f]{32}", nonce):
            problem = "it has no ctxd ownership mark (it may have come with the folder)"
        elif not hmac.compare_digest(str(mark.get("seal", "")) if mark else "", _seal(store, key, nonce)):
            problem = "its ownership mark does not match (made elsewhere, or its config was changed)"
    if problem is not None:
        raise GitFailed(f"{store} was not made by ctxd for this account: {problem}. No git command runs with "
                        "it; move it aside (its snapshots stay in it) and ctxd makes a new one")


def _plain_site(folder: Path, state_dir: Path, create: bool = True) -> Site | None:
    """A folder that is not a git repository: a private store in ctxd's state directory, never a
    `.git` inside the user's folder. It is keyed by the folder's real path, and says whose it is."""
    digest = hashlib.sha256(os.fsencode(folder)).hexdigest()[:24]
    home = Path(state_dir) / "ghost" / f"{folder.name[:40] or 'root'}-{digest}"
    store = home / "store"
    if not create and not (store / "HEAD").exists():
        return None
    try:  # (a state dir another user made first: its stores would be theirs to read and to change)
        places.private_state_dir(state_dir)
    except places.Unsafe as error:
        raise GitFailed(f"{error}: no snapshot of {folder} is kept there") from None
    _ensure_store(store, "sha1", account_key())
    owner = home / "folder"
    try:
        recorded = owner.read_text("utf-8")
    except FileNotFoundError:
        write_whole(owner, os.fsencode(folder))
        recorded = os.fsdecode(folder)
    if recorded != os.fsdecode(folder):
        raise GitFailed(f"{store} belongs to {recorded}, not {folder}; remove it to start afresh")
    return Site(folder=folder, top=folder, prefix="", worktree="", head=None, store=store)


def _ensure_store(store: Path, object_format: str, key: bytes) -> None:
    """Create ctxd's bare repository atomically (two daemons may race to create it), marked as
    this account's (`check_owned`)."""
    if (store / "HEAD").exists():
        return
    import secrets
    import shutil
    import tempfile

    store.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # (git makes the store with the umask's modes)
    pending = Path(tempfile.mkdtemp(prefix="store-", dir=store.parent))
    try:
        gitcmd.run(["init", "-q", "--bare", "--template=", f"--object-format={object_format}", str(pending)],
                   cwd=store.parent, env=gitcmd.base_env(user_config=False))
        (pending / "info").mkdir(exist_ok=True)
        (pending / "info" / "attributes").write_text(ATTRIBUTES, "utf-8")
        (pending / "config").write_text(
            (pending / "config").read_text("utf-8")
            + "[core]\n\tlogAllRefUpdates = false\n[gc]\n\tauto = 0\n", "utf-8")
        nonce = secrets.token_hex(16)
        write_json(pending / OWNER_MARK, {"nonce": nonce, "seal": _seal(pending, key, nonce)})
        os.rename(pending, store)
    except OSError:
        if not (store / "HEAD").exists():
            raise GitFailed(f"could not create the snapshot store {store}") from None
    finally:
        shutil.rmtree(pending, ignore_errors=True)


# --- refs ----------------------------------------------------------------------------------------


def ref_ids(site: Site, key: str | None = None) -> list[tuple[float, str]]:
    """(creation time, id) of a folder's snapshots, newest first, from the ref files themselves."""
    found = []
    directory = site.ref_dir(key)
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    for name in names:
        if ID.fullmatch(name):
            with contextlib.suppress(OSError):
                found.append((os.stat(directory / name).st_mtime, name))
    found.sort(reverse=True)
    return found


def write_ref(site: Site, commit: str, key: str | None = None, when: float | None = None) -> None:
    """Written directly: a private ref with no reflog and no hook to honour. Its mtime is the
    snapshot's age (`ref_ids`): now, or `when`."""
    directory = site.ref_dir(key)
    directory.mkdir(parents=True, exist_ok=True)
    pending = directory / f".{commit}.tmp"
    pending.write_text(commit + "\n", "ascii")
    if when is not None:
        os.utime(pending, (when, when))
    os.replace(pending, directory / commit)


def add_shallow(site: Site, commits: list[str]) -> None:
    """Tell git that these commits' parents are not in the store (and never to look for them):
    the `shallow` file of a shallow clone, so gc, rev-list and pack-objects stop at them."""
    path = site.store / "shallow"
    try:
        known = path.read_text("ascii").split()
    except FileNotFoundError:
        known = []
    pending = path.with_name(f".shallow-{os.urandom(16).hex()}.tmp")
    pending.write_text("".join(f"{c}\n" for c in sorted(set(known) | set(commits))), "ascii")
    os.replace(pending, path)


def owner_key(site: Site, commit: str) -> str | None:
    """The folder key a snapshot id belongs to, if any folder of this store has it."""
    root = site.store / REF_ROOT
    with contextlib.suppress(FileNotFoundError):
        for key in os.listdir(root):
            if (root / key / commit).is_file():
                return key
    return None


def delete_ref(site: Site, commit: str) -> None:
    (site.ref_dir() / commit).unlink(missing_ok=True)


# --- objects ---------------------------------------------------------------------------------------


def object_sizes(site: Site, shas: list[str], borrow: bool = True) -> dict[str, int | None]:
    """The size of each object, None for one git cannot find (without `borrow`: in the store alone)."""
    if not shas:
        return {}
    wanted = list(dict.fromkeys(shas))
    raw = site.git("cat-file", "--batch-check=%(objectname) %(objectsize)", borrow=borrow,
                   stdin="".join(f"{sha}\n" for sha in wanted).encode())[1]
    sizes: dict[str, int | None] = dict.fromkeys(wanted)
    for line in raw.decode("ascii", "replace").splitlines():
        name, _, size = line.partition(" ")
        if name in sizes and size.isdigit():
            sizes[name] = int(size)
    return sizes


class Blobs:
    """The contents of blobs, read one after another from one `git cat-file --batch` in the order
    they were asked for: a restore writes each into its file as it comes, in chunks, never holding
    a large file in memory. `close` stops git even when not everything was read."""

    CHUNK = 1 << 20

    def __init__(self, site: Site, shas: list[str]) -> None:
        self._proc = site.start("cat-file", "--batch")
        self._left = 0
        requests = "".join(f"{sha}\n" for sha in shas).encode()
        self._feeder = threading.Thread(target=self._feed, args=(requests,), daemon=True)  # so git never waits on a full pipe
        self._feeder.start()

    def _feed(self, requests: bytes) -> None:
        stdin = self._proc.stdin
        assert stdin is not None
        with contextlib.suppress(OSError):  # git was stopped before reading them all
            stdin.write(requests)
            stdin.close()

    def next(self, sha: str) -> int:
        """Start reading the next blob, which must be `sha`; its size."""
        assert self._proc.stdout is not None and self._left == 0
        fields = self._proc.stdout.readline().split()
        if len(fields) != 3 or fields[0].decode("ascii", "replace") != sha or fields[1] != b"blob":
            raise GitFailed(f"object {sha} is missing from the snapshot store (git cat-file answered "
                            f"{b' '.join(fields).decode('ascii', 'replace')!r})")
        self._left = int(fields[2])
        return self._left

    def chunks(self) -> Iterator[bytes]:
        """The rest of the current blob."""
        stdout = self._proc.stdout
        assert stdout is not None
        while self._left:
            chunk = stdout.read(min(self._left, self.CHUNK))
            if not chunk:
                raise GitFailed("git cat-file stopped before the end of a file's content")
            self._left -= len(chunk)
            yield chunk
        stdout.read(1)  # the newline after each object

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        self._feeder.join()  # its write fails at once when git is gone
        for stream in (self._proc.stdout, self._proc.stdin):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


def pin(site: Site, commit: str | None, tree: str) -> None:
    """Copy into the store every object of `commit` (or, when None, of `tree`: see `pin_commit`)
    that exists only in the user's repository.

    The objects of the tree pinned last are all here already, and the new tree shares most of
    them: only what `diff-tree` finds different from it is looked at (a walk that skips every
    subtree the two share); of that, what is local (written by this capture) is skipped.
    """
    if site.user_objects is None:
        return  # a plain folder's store borrows nothing
    pinned = site.store / "pinned-trees"
    try:
        recent = pinned.read_text("ascii").split()
    except FileNotFoundError:
        recent = []
    if tree in recent:
        return  # the same tree as a recent snapshot: all its objects are here already
    if recent:
        listed = ([commit.encode()] if commit else []) + [tree.encode()] + _new_objects(site, recent[0], tree)
        checked = site.git("cat-file", "--batch-check=%(objectname)", stdin=b"\n".join(listed) + b"\n",
                           borrow=False)[1]
        missing = [line.split()[0] for line in checked.splitlines() if line.endswith(b" missing")]
    else:  # nothing pinned yet (or after a gc): copy all; what is local is packed twice, once
        missing = site.git("rev-list", "--objects", "--no-object-names", commit or tree)[1].split()
    if missing:
        site.git("pack-objects", "-q", "--window=0", str(site.store / "objects" / "pack" / "pack"),
                 stdin=b"\n".join(missing) + b"\n")
    pending = pinned.with_name(f".pinned-{os.urandom(16).hex()}.tmp")
    pending.write_text("\n".join([tree, *recent[:31]]) + "\n", "ascii")
    replace_locked(pending, pinned)


_NO_OBJECT = re.compile(rb"0+")


def pin_commit(site: Site, commit: str) -> None:
    """A commit `commit-tree` just made is in the store (it writes it loose here) unless git found
    the same object elsewhere first: then it is copied, as `pin` would."""
    if site.user_objects is None or (site.store / "objects" / commit[:2] / commit[2:]).exists():
        return
    checked = site.git("cat-file", "--batch-check=%(objectname)", stdin=f"{commit}\n".encode(), borrow=False)[1]
    if checked.strip().endswith(b" missing"):
        site.git("pack-objects", "-q", "--window=0", str(site.store / "objects" / "pack" / "pack"),
                 stdin=f"{commit}\n".encode())


def _new_objects(site: Site, old_tree: str, new_tree: str) -> list[bytes]:
    """Every tree and blob of `new_tree` that `old_tree` does not have at the same path (gitlinks
    name commits of other repositories: not objects of this one)."""
    raw = site.git("diff-tree", "-r", "-t", "-z", "--no-renames", "--raw", old_tree, new_tree)[1]
    found = []
    for record in raw.split(b"\0")[0::2]:
        fields = record[1:].split()
        if len(fields) == 5 and fields[1] != b"160000" and not _NO_OBJECT.fullmatch(fields[3]):
            found.append(fields[3])
    return found


def pack_count(site: Site) -> int:
    with contextlib.suppress(FileNotFoundError):
        return sum(1 for name in os.listdir(site.store / "objects" / "pack") if name.endswith(".pack"))
    return 0


def needs_gc(site: Site) -> bool:
    """Whether the store has gathered enough packs or loose objects to be repacked."""
    with contextlib.suppress(FileNotFoundError):
        if len(os.listdir(site.store / "objects" / "17")) > MAX_LOOSE_IN_SAMPLE:
            return True
    return pack_count(site) > MAX_PACKS


def gc(site: Site) -> None:
    """git's own gc for the store: what the snapshots reference is packed, everything else is
    dropped. Safe because the store has no alternates on disk (nothing it needs is elsewhere) and
    the store is locked (no capture is half-way). Refs stay loose files (`ref_ids` reads them)."""
    (site.store / "pinned-trees").unlink(missing_ok=True)
    for cached in site.store.glob("cache-*.json"):  # they may name objects gc is about to drop
        cached.unlink(missing_ok=True)
    site.git("-c", "gc.packRefs=false", "gc", "--quiet", "--prune=now", borrow=False)
    fan_out(site.store)
    trees = site.out("for-each-ref", "--format=%(tree)", REF_ROOT, borrow=False).split()
    if trees:  # every tree a snapshot still has is complete here: later pins start from them
        (site.store / "pinned-trees").write_text("\n".join(dict.fromkeys(trees)) + "\n", "ascii")


def shared_index_of(git_dir: Path, data: bytes) -> Path | None:
    """The `sharedindex.<id>` of `git_dir` that a split index's `link` extension names (`data`: the
    index file's bytes), if any: "link", the extension's size, then the shared index's id."""
    if b"link" not in data:
        return None
    for shared in git_dir.glob("sharedindex.*"):
        try:
            oid = bytes.fromhex(shared.name.split(".", 1)[1])
        except ValueError:
            continue
        at = data.find(oid)
        if at >= 8 and data[at - 8:at - 4] == b"link":
            return shared if shared.is_file() else None  # (never a FIFO or a device planted there)
    return None


def drop_unused_shared_indexes(store: Path) -> None:
    """Remove the store's shared index files that no kept index (`cache-*.index`) names and that
    no one used for an hour. Runs with the store locked, after a capture kept its index."""
    shared = list(store.glob("sharedindex.*"))
    kept = list(store.glob("cache-*.index"))
    if len(shared) <= len(kept):
        return
    named = set()
    for index in kept:
        with contextlib.suppress(OSError):
            named.add(shared_index_of(store, index.read_bytes()))
    old = time.time() - SHARED_INDEX_GRACE_SECONDS
    for path in shared:
        with contextlib.suppress(OSError):
            if path not in named and path.stat().st_mtime < old:
                path.unlink()


def replace_locked(pending: Path, path: Path) -> None:
    """`os.replace` for a file read and written only with the store locked: the old one is removed
    first, since ext4 flushes the new file's data when a rename replaces another (`auto_da_alloc`),
    which takes milliseconds. A crash in between leaves no file, which every reader takes as
    nothing known (a full pass, a full pin)."""
    path.unlink(missing_ok=True)
    os.rename(pending, path)


def fan_out(store: Path) -> None:
    """Make the 256 folders loose objects go to (gc removes the empty ones): a capture's
    `write-tree` then creates no folder while it writes its trees."""
    objects = store / "objects"
    for n in range(256):
        with contextlib.suppress(OSError):
            (objects / f"{n:02x}").mkdir(exist_ok=True)


def clean_leftovers(site: Site) -> None:
    """Temporary indexes and their `.lock` files left by a process that died (the store is locked:
    no one else is using any of them)."""
    for stale in site.tmp_dir().iterdir():
        with contextlib.suppress(OSError):
            stale.unlink()


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_json(path: Path, value: dict[str, Any]) -> None:
    pending = path.with_name(f".{path.name}.{os.urandom(16).hex()}.tmp")
    with open(pending, "w", encoding="utf-8") as handle:
        json.dump(value, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(pending, path)


def now_ns() -> int:
    return time.time_ns()
