"""Only the optional C extension lives here; everything else is in pyproject.toml.

ctxd/tokens/_fastcount.c makes the token estimator look words up in the encoding's vocabulary:
about 2% off tiktoken instead of 5%, and faster. It is optional: without a compiler the install
still succeeds and the estimator uses its pure-Python path (ctxd/tokens/estimator.py).
ctxd/agents/_skim.c finds a session line's few fields without decoding the rest (the summaries
of ctxd sessions); without it ctxd/agents/skim.py does the same in Python, slower.
ctxd/agents/_claude.c and _codex.c read a run of a transcript's lines that hold no turn at once, by
the readers' rules (claude.py, codex.py); without them the readers take each line in Python.
_json.h and _runs.h hold what these share.
ctxd/agents/_crc32.c computes zlib's CRC-32 with carry-less multiplies (x86-64), several times faster
than zlib 1.2's: the rewrite check of every byte a session reader reads; without it, zlib.crc32.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("ctxd.tokens._fastcount", ["ctxd/tokens/_fastcount.c"], optional=True),
                   Extension("ctxd.agents._skim", ["ctxd/agents/_skim.c"], depends=["ctxd/agents/_json.h"], optional=True),
                   Extension("ctxd.agents._claude", ["ctxd/agents/_claude.c"], depends=["ctxd/agents/_json.h", "ctxd/agents/_runs.h"],
                             optional=True),
                   Extension("ctxd.agents._codex", ["ctxd/agents/_codex.c"], depends=["ctxd/agents/_runs.h"], optional=True),
                   Extension("ctxd.agents._crc32", ["ctxd/agents/_crc32.c"], optional=True)])
