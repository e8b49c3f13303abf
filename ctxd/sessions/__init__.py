"""Followed agent sessions (issue #16): the sessions of every agent ctxd knows (ctxd/agents).

Each agent's module reads its own sessions into ctxd items and usage; here prices turn usage into
cost (`pricing.py`), and discovery and the follower find and follow the sessions of the open
workspace folders (`discovery.py`, `follower.py`), which the bridge mirrors into their threads
(`bridge.py`). Nothing here imports wire code, and nothing here ever writes into the agents' folders.
"""
