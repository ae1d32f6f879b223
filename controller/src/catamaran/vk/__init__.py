"""The virtual kubelet: one process per ForeignCluster, holding only that provider's credential."""
