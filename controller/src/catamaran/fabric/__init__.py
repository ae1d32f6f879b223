"""The network fabric: a WireGuard tunnel per peering between two clusters' gateways (docs/network-fabric.md)."""
