"""ForeignClusters, ResourceOffers and a gateway as the fabric tests state them."""

from __future__ import annotations


def foreign(provider: str, mode: str, remote: list[str]) -> dict:
    return {
        "spec": {"clusterID": provider, "networking": {"mode": mode}},
        "status": {"network": {"remotePodCIDRs": remote}},
    }


def offer(namespace: str, mode: str, consumer_ranges: list[str]) -> dict:
    return {
        "metadata": {"namespace": namespace, "name": "catamaran"},
        "spec": {"network": {"mode": mode}, "consumerPodCIDRs": consumer_ranges},
    }


GATEWAY = [("node-a", "172.30.0.1")]
