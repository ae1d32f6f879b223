"""Resource reflection: the objects offloaded pods need, kept in sync into their twin namespaces."""
