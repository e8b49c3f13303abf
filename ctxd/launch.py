"""The file the agents' configuration runs to start ctxd (`ctxd.places.ctxd_command`):
`<python> <…>/ctxd/launch.py hook codex PreToolUse`.

- **Safe in any folder.** `python -m ctxd` puts the current folder first on `sys.path`: started in
  a repository (as an agent starts its hooks and MCP servers, as a hook starts the owner), that
  repository's own `ctxd/` folder would run instead of ctxd. Run as a file, Python puts this
  file's folder there instead, and that is replaced by the package's parent before anything is
  imported.
- **Quick.** pip's `ctxd` console script imports `re` to tidy its own name, and `-m` imports
  `runpy`: milliseconds that an agent would wait for at every hook.
"""

import os
import sys

if __name__ == "__main__":  # (a worker process that imports it again, spawned, runs nothing)
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from ctxd.entry import main

    raise SystemExit(main())
