"""The virtual kubelet's HTTPS API (logs, exec, attach, port-forward, stats), proxied to the provider."""
