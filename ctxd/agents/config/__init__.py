"""The agents' configuration files as `ctxd hooks install | uninstall | status` edit them, shared by
the agent modules: bounded, all-or-nothing file access (`files`), what is ctxd's (`ours`), JSON
settings edited in their own format (`json_settings`), Codex's TOML edited as text (`codex_toml`),
and the plan of changes with its backups (`plan`)."""
