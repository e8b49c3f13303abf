"""Every verb of ghost snapshots in one namespace, for a caller that uses several of them (the
request handlers, the tests and the benchmarks): `from ctxd.ghost import api as ghost`.

Each lives in the module of its verb: taking (`take`), restoring (`restore`, `recovery`), and
reading back (`listing`); the store itself is `gitstore`. Automatic checkpoints go through
`ctxd.ghost.checkpoint`, which decides whether and how they are taken.
"""

from ctxd.ghost.gitstore import ID, Site, open_site
from ctxd.ghost.listing import delete, diff, list_snapshots
from ctxd.ghost.recovery import interrupted_restore
from ctxd.ghost.restore import restore
from ctxd.ghost.take import ledger_item, prime, slow_warning, snapshot

__all__ = ["ID", "Site", "delete", "diff", "interrupted_restore", "ledger_item", "list_snapshots", "open_site",
           "prime", "restore", "slow_warning", "snapshot"]
