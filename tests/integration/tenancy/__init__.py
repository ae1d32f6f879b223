"""The provider's tenant boundary, tried as a tenant would: consumer cluster-1 peered with provider cluster-2.

The modules share one peering (conftest.py), each offloading a namespace of its own; a module that changes the
tenant's terms or stops a process puts them back before it ends.
"""

CONSUMER, PROVIDER = "cluster-1", "cluster-2"
# Health checks every 2 s: a provider unreachable shows within seconds.
HEALTH = {"periodSeconds": 2, "timeoutSeconds": 2, "failureThreshold": 3}
