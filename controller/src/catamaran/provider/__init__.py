"""Provider-side reconcilers of the manager: ShadowPods, resource offers and twin namespaces."""
