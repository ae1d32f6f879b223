"""Consumer-side reconcilers of the manager: NamespaceOffloading and the pod mutating webhook."""
