"""A workspace folder's threads, above the ledger (their store and memory) and the usage view
(their gauge): `Service` holds the open folders, `Workspace` answers the requests on one."""

from ctxd.workspace.core import agent_title, agent_titles, followed_agent, path_to_uri, uri_to_path
from ctxd.workspace.service import Service, Workspace

__all__ = ["Service", "Workspace", "agent_title", "agent_titles", "followed_agent", "path_to_uri", "uri_to_path"]
