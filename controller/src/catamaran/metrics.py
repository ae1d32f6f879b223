"""Prometheus metrics shared by every reconciler and watch loop (served by health.serve)."""

import functools

from prometheus_client import Counter, Gauge, Histogram


@functools.cache
def labelled(metric, *values: str):
    """`metric.labels(*values)`, looked up once: prometheus_client checks and locks on every labels() call, a few
    microseconds that the watch loops and work queues paid several times per object. Nothing removes a child."""
    return metric.labels(*values)


RECONCILES = Counter("catamaran_reconciles_total", "Reconciliations run", ["controller", "result"])
QUEUE_DEPTH = Gauge("catamaran_queue_depth", "Keys waiting in a work queue", ["controller"])
# Latency buckets from a few milliseconds (one API round trip on loopback) to the pod start-up SLO and beyond.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
QUEUE_WAIT_SECONDS = Histogram(
    "catamaran_queue_wait_seconds",
    "From a key entering a work queue to a worker taking it",
    ["controller"],
    buckets=LATENCY_BUCKETS,
)
API_REQUEST_SECONDS = Histogram(
    "catamaran_api_request_duration_seconds",
    "From sending a Kubernetes API request to its response's headers (a watch: to the stream's start)",
    ["cluster", "verb", "resource"],
    buckets=LATENCY_BUCKETS,
)
API_REQUESTS = Counter(
    "catamaran_api_requests_total", "Kubernetes API requests by response code", ["cluster", "verb", "code"]
)
RECONCILE_SECONDS = Histogram(
    "catamaran_reconcile_duration_seconds",
    "Time spent in one reconciliation",
    ["controller"],
    buckets=LATENCY_BUCKETS,
)
EVENT_LOOP_LAG_SECONDS = Histogram(
    "catamaran_event_loop_lag_seconds",
    "How late the event loop wakes a timer: time every callback waits behind the others",
    buckets=LATENCY_BUCKETS,
)
WATCH_EVENTS = Counter("catamaran_watch_events_total", "Watch events received", ["informer", "type"])
WATCH_RESTARTS = Counter("catamaran_watch_restarts_total", "Watches restarted by a relist", ["informer", "reason"])
CACHED_OBJECTS = Gauge("catamaran_cached_objects", "Objects held by an informer cache", ["informer"])


REMOTE_EVENTS_MIRRORED = Counter(
    "catamaran_remote_events_mirrored_total", "Events about remote pods written onto their local pods"
)
REMOTE_EVENTS_DELAYED = Counter(
    "catamaran_remote_events_delayed_total", "Mirrored event writes held back by the rate limit"
)
EVENTS_DROPPED = Counter("catamaran_events_dropped_total", "Informational events dropped under a burst")
REFLECTED = Counter("catamaran_reflected_total", "Writes of reflected copies on the provider", ["kind", "operation"])
REFLECTION_ERRORS = Counter("catamaran_reflection_errors_total", "Failed reflections", ["kind"])
REFLECTION_CONFLICTS = Counter(
    "catamaran_reflection_conflicts_total",
    "Local objects whose name in the twin is taken by an object Catamaran did not create",
    ["kind"],
)
REFLECTION_SECONDS = Histogram(
    "catamaran_reflection_latency_seconds",
    "From a local change seen to its copy written on the provider",
    ["kind"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30),
)
KUBELET_REQUESTS = Counter("catamaran_kubelet_requests_total", "Kubelet API requests served", ["endpoint", "code"])
PROVIDER_STREAMS = Gauge(
    "catamaran_kubelet_provider_streams", "Open WebSockets to the provider for exec, attach and port-forward", ["kind"]
)
PORT_FORWARD_CONNECTIONS = Gauge(
    "catamaran_kubelet_port_forward_connections", "Forwarded connections open through the provider"
)
