"""The agents' own way in: `ctxd hook`, `ctxd hooks install|uninstall|status`, `ctxd statusline`."""
