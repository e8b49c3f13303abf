"""The agents' own way in: `ctxd hook` and `ctxd hooks install|uninstall|status`, for every agent
with hooks (ctxd/agents). `ctxd statusline` is ctxd/statusline.py."""
