"""`ctxd acp`: an Agent Client Protocol proxy between an editor and an agent (docs/acp.md).

`proxy.py` runs the agent and passes every message through; `transcript.py` turns what it sees of a
session into ledger items; `owner.py` writes them, and takes the checkpoints, through the owner.
"""
