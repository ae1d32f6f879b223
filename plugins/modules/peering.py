#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: Catamaran developers
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: peering
short_description: Peer a consumer cluster with a provider cluster, or un-peer them
version_added: 0.1.0
description:
  - With O(state=present), makes the consumer a tenant of the provider and lets it use the provider
    through a virtual node C(catamaran-<provider_id>).
  - "On the provider: the tenant namespace C(catamaran-tenant-<consumer_id>), the ServiceAccount
    C(catamaran-consumer), least-privilege RBAC (it reaches only its tenant's namespaces), and the tenant's
    ResourceOffer C(resources) holding its terms: placement, Pod Security level, share, credential lifetime,
    Service types, twin namespace names, priority class, container defaults, object quota, storage classes,
    Ingress classes, hosts and annotations, and what the tenant's pods may reach on the provider's network
    (docs/tenant-terms.md has every field a tenant writes and what the terms decide)."
  - The ResourceOffer also announces the consumer's pod ranges (C(spec.consumerPodCIDRs)), read from the
    C(spec.podCIDRs) of the consumer's nodes (one covering range per IP family), as the only addresses the tenant's
    EndpointSlices may hold on the provider. The module warns when no consumer node reports one.
  - "Also on the provider, the cluster-wide objects every tenant shares: the tenant ClusterRoles, the
    PriorityClass C(catamaran-tenant) and the ValidatingAdmissionPolicy C(catamaran-tenant-terms) with its
    binding, which holds what a tenant writes (Services, EndpointSlices, Secrets, PersistentVolumeClaims, Ingresses)
    to its terms, and the ValidatingAdmissionPolicy C(catamaran-tenant-ingress-hosts) with its binding, which
    refuses a tenant Ingress a host another namespace of the provider serves. The provider must serve
    C(admissionregistration.k8s.io/v1) ValidatingAdmissionPolicy (Kubernetes 1.30 or later)."
  - The credential is a bound, expiring token that the provider's Catamaran manager mints (and renews) into Secret
    C(catamaran-tenant-credential) of the tenant namespace; the module waits for it, so that manager must be running
    on the provider (P(catamaran.federation.controller#role)).
  - "On the consumer: that credential as Secret C(catamaran-system/catamaran-credentials-<provider_id>) and
    the ForeignCluster C(catamaran-system/<provider_id>) with sharing percentage, node labels, health-check and
    resource-reflection settings."
  - Every object is first applied as a server-side dry run on both clusters, so invalid input (for example a
    sharing percentage the API rejects) fails before anything is changed.
  - With O(state=absent), cordons and drains the virtual node (its virtual kubelet removes the offloaded pods from
    the provider), deletes the ForeignCluster and credential, and removes the tenant's twin namespaces, the tenant
    namespace with its ServiceAccount, token and bindings, and the cluster-wide objects all tenants share
    (ClusterRoles, PriorityClass, admission policies and bindings) once no tenant is left.
  - With O(state=absent) and O(force=true), a cluster that cannot be reached does not stop the un-peering; the
    module cleans the reachable side alone and lists in RV(not_cleaned) what was left on the other.
  - Every option is checked before any cluster is changed; a bad label key or value, a CIDR that is not one or is
    smaller than the provider's pod range, a timeout or health-check number below 1, fail naming the field.
  - The credential is never printed, not in results, diffs, errors or at any verbosity.
  - The virtual kubelet that serves the node is run by the P(catamaran.federation.controller#role) role.
  - The connection options at the top level (O(kubeconfig), O(context), O(host), O(api_key), ...) are the defaults
    of both O(consumer) and O(provider); set them once with C(module_defaults) (group C(catamaran.federation.all))
    and name only what differs per side, such as each side's O(consumer.context) and O(provider.context).
author:
  - Catamaran developers (!UNKNOWN)
extends_documentation_fragment:
  - catamaran.federation.attributes
  - catamaran.federation.connection
requirements:
  - cryptography >= 42 (Python library; for O(network.mode=fabric), which makes WireGuard keys)
options:
  consumer:
    description:
      - Connection to the consumer cluster (the one that gets the virtual node).
      - Each suboption left out takes the top-level option of the same name (which C(module_defaults) can set once
        for both sides), else its E(K8S_AUTH_*) environment variable, as described at the top level.
    type: dict
    required: true
    # The provider takes the same suboptions (and api_server): written once, merged into its own below.
    suboptions: &cluster_connection
      kubeconfig:
        description: Path to the cluster's kubeconfig, or its content as a dict (see O(kubeconfig)).
        type: raw
      context:
        description: Context in that kubeconfig; defaults to its current context (see O(context)).
        type: str
      host:
        description: URL of the cluster's API server (see O(host)).
        type: str
      api_key:
        description: A bearer token for the cluster's API server (see O(api_key)); never printed.
        type: str
      ca_cert:
        description: CA certificate file to verify the cluster's API server with (see O(ca_cert)).
        type: path
        aliases: [ssl_ca_cert]
      client_cert:
        description: Client certificate file (see O(client_cert)).
        type: path
        aliases: [cert_file]
      client_key:
        description: Key file of the client certificate (see O(client_key)).
        type: path
        aliases: [key_file]
      validate_certs:
        description: Whether to verify the cluster's API server certificate (see O(validate_certs)).
        type: bool
        aliases: [verify_ssl]
      request_timeout:
        description: Seconds (at least 1) to wait for each API request (see O(request_timeout)).
        type: int
  provider:
    description:
      - Connection to the provider cluster (the one that runs the offloaded pods); it needs cluster-admin rights, used only by this module.
      - Each suboption left out takes the top-level option of the same name (which C(module_defaults) can set once
        for both sides), else its E(K8S_AUTH_*) environment variable, as described at the top level.
    type: dict
    required: true
    suboptions:
      <<: *cluster_connection
      api_server:
        description:
          - The provider's API server URL as the consumer's virtual kubelet reaches it.
          - Defaults to the server the module reaches the provider at.
        type: str
  consumer_id:
    description: The consumer's cluster id (a DNS-1123 label).
    type: str
    required: true
  provider_id:
    description: The provider's cluster id (a DNS-1123 label); names the virtual node.
    type: str
    required: true
  state:
    description: V(present) peers; V(absent) un-peers and removes everything the peering created.
    type: str
    choices: [present, absent]
    default: present
  sharing_percentage:
    description:
      - Share (1-100) of the provider's free resources the virtual node offers.
      - Written on both sides; the provider's copy (in the tenant's ResourceOffer) caps the tenant's quota there,
        whatever the consumer does.
    type: int
    default: 90
  pod_security:
    description:
      - The Pod Security Standard the provider enforces on this consumer's pods, in its twin namespaces and before
        it creates any pod from a ShadowPod.
    type: str
    choices: [restricted, baseline, privileged]
    default: restricted
  credential_lifetime:
    description:
      - Lifetime in seconds (at least 600) of the tenant's bound token; the provider's manager renews it at 80 % of
        its life.
    type: int
    default: 86400
  allowed_service_types:
    description:
      - The Service types this consumer's Services may have in its twin namespaces on the provider. V(ClusterIP)
        (headless included) is always allowed, listed or not.
      - V(NodePort) opens a port on every provider node, V(LoadBalancer) takes an external address of the
        provider's (see O(allowed_load_balancer_classes)), V(ExternalName) points at any DNS name.
      - Kept on the provider (the ResourceOffer's C(spec.services.allowedTypes)), so the consumer cannot widen it;
        the provider's admission policy refuses other types, and the consumer's virtual kubelet reflects a Service
        of another type as V(ClusterIP).
    type: list
    elements: str
    choices: [ClusterIP, NodePort, LoadBalancer, ExternalName]
    default: [ClusterIP]
  allowed_load_balancer_classes:
    description:
      - The C(spec.loadBalancerClass) values this consumer's V(LoadBalancer) Services may name on the provider
        (C(spec.services.allowedLoadBalancerClasses)); a Service naming no class is not restricted by this list.
      - Each a label-style name such as V(example.com/internal-vip), as the API holds them.
    type: list
    elements: str
    default: []
  twin_namespace_names:
    description:
      - Which names this consumer's twin namespaces on the provider may have (C(spec.twinNamespaceNames)).
      - V(Suffixed) allows only C(<namespace>-<consumer_id>), the V(DefaultName) mapping strategy of
        M(catamaran.federation.namespace_offloading), so the consumer cannot take a name the provider may want.
      - V(Any) also allows same and selected names (V(EnforceSameName), V(SelectedName)), never reserved ones
        (C(default), C(catamaran-system), C(kube-*), C(catamaran-tenant-*)).
    type: str
    choices: [Suffixed, Any]
    default: Suffixed
  priority_class:
    description:
      - The PriorityClass of every pod the provider makes for this consumer, unless the pod names one of
        O(allowed_priority_classes) (C(spec.priorityClassName)).
      - The default, C(catamaran-tenant), is applied by this module on the provider; its value is below the
        default priority (0) and it preempts nothing, so the provider's own workloads preempt the consumer's.
      - Any other class must exist on the provider already (checked before any change); a DNS-1123 subdomain.
    type: str
    default: catamaran-tenant
  allowed_priority_classes:
    description:
      - PriorityClasses this consumer's pods may name and keep on the provider (C(spec.allowedPriorityClasses));
        a pod naming any other runs at O(priority_class). Each a DNS-1123 subdomain.
    type: list
    elements: str
    default: []
  max_termination_grace_period:
    description:
      - The longest, in seconds, that this consumer's pods may take to stop on the provider
        (C(spec.pods.maxTerminationGracePeriodSeconds)); their C(terminationGracePeriodSeconds) and the grace of
        their deletion are cut to it, so deleting, evicting and draining them, and un-peering, always end.
      - At most V(86400).
    type: int
    default: 300
    version_added: 0.3.0
  allowed_pod_annotations:
    description:
      - The annotations of this consumer's pods that the pods made on the provider keep
        (C(spec.pods.allowedAnnotations)); exact keys, or a prefix followed by C(/*). Any other is dropped, as the
        provider's autoscalers, CNI plugins, service meshes and scrapers act on annotations.
      - The default keeps C(kubectl.kubernetes.io/default-container) and the AppArmor annotations, which the Pod
        Security level checks.
    type: list
    elements: str
    default:
      - kubectl.kubernetes.io/default-container
      - container.apparmor.security.beta.kubernetes.io/*
    version_added: 0.3.0
  allowed_storage_classes:
    description:
      - The StorageClasses this consumer's PersistentVolumeClaims may name on the provider
        (C(spec.storage.allowedClasses)); each a DNS-1123 subdomain. A claim naming a class not listed is refused, so
        the tenant cannot fill a class the provider keeps for itself (fast disks, a backup tier).
      - The default (none listed) lends only the provider's default class, the one a claim naming none gets (the
        provider's manager follows which class is the default); with no default class on the provider, every tenant
        claim is refused.
      - Never the empty class (V("")), which binds the provider's static volumes; a claim with it, or with no class
        once the API server has defaulted it, is always refused.
      - Claims of the consumer's virtual storage class C(catamaran) are reflected with the provider class
        O(reflection.storage_class_name), or unset the provider's default class, and are held to these terms like
        any other claim; so a class named there must be listed here unless it is the provider's default.
      - Set in the inventory (C(catamaran_peerings)), the values must be lent by the provider's
        C(catamaran_tenant_allowances) (key C(storage_classes)), as P(catamaran.federation.federation_model#filter)
        checks.
    type: list
    elements: str
    default: []
    version_added: 0.3.0
  allowed_ingress_classes:
    description:
      - The IngressClasses this consumer's Ingresses may name on the provider (C(spec.ingress.allowedClasses));
        each a DNS-1123 subdomain. An Ingress naming no class, or a class not listed, is refused, so the default
        (none) refuses every tenant Ingress.
      - Set in the inventory (C(catamaran_peerings)), the values must be lent by the provider's
        C(catamaran_tenant_allowances) (key C(ingress_classes)), as P(catamaran.federation.federation_model#filter)
        checks.
    type: list
    elements: str
    default: []
    version_added: 0.3.0
  allowed_ingress_hosts:
    description:
      - The hosts this consumer's Ingresses may serve on the provider (C(spec.ingress.allowedHosts)), as patterns
        lent by the provider. An exact host such as V(shop.example.com) is that host alone; V(*.example.com) is
        every name under it (V(shop.example.com), V(a.b.example.com), and wildcard hosts such as
        V(*.shop.example.com)), not V(example.com) itself; V(*) is every host, rules without a host and default
        backends included. An Ingress with a host not lent, or with no host or a default backend without V(*), is
        refused, so the default (none) refuses every tenant Ingress.
      - A host that an Ingress of another namespace of the provider (its own or another tenant's) already serves is
        always refused, whatever is lent (the provider's manager keeps a record of the hosts served), and the
        refusal does not tell the tenant which namespace serves it.
      - Set in the inventory (C(catamaran_peerings)), each value must be covered by a pattern the provider's
        C(catamaran_tenant_allowances) lends (key C(ingress_hosts)), as P(catamaran.federation.federation_model#filter)
        checks.
    type: list
    elements: str
    default: []
    version_added: 0.3.0
  allowed_ingress_annotations:
    description:
      - The annotations this consumer's Ingresses may carry on the provider (C(spec.ingress.allowedAnnotations));
        exact keys, or a prefix followed by C(/*). An Ingress with any other is refused, as ingress controllers
        act on annotations (configuration snippets, external authentication URLs, rewrites). Catamaran's own
        annotations on the copies it reflects always pass.
      - The default (none) refuses every tenant Ingress that carries an annotation of its own.
      - Set in the inventory (C(catamaran_peerings)), the values must be lent by the provider's
        C(catamaran_tenant_allowances) (key C(ingress_annotations); a prefix lent covers its keys and narrower
        prefixes), as P(catamaran.federation.federation_model#filter) checks.
    type: list
    elements: str
    default: []
    version_added: 0.3.0
  network_ingress_from_namespaces:
    description:
      - The provider's namespaces whose pods may open connections to this consumer's pods on the provider
        (C(spec.isolation.ingressFromNamespaces)), such as the namespace of the ingress controller that serves the
        tenant's Ingresses, or of a scraper; each a namespace name (a DNS-1123 label), at most 32.
      - The provider's manager keeps a NetworkPolicy C(catamaran-tenant-terms) in every twin namespace. A tenant's
        pods always accept connections from their own twin namespace and from the fabric (the consumer's pods); the
        default (none) refuses all others (the pods of the provider's other namespaces and of its other tenants).
      - Enforced only where the provider's network plugin enforces NetworkPolicies (Calico, Cilium, kube-router,
        for example); with one that does not (flannel alone), nothing holds the tenant's pods to these terms.
      - Set in the inventory (C(catamaran_peerings)), the values must be lent by the provider's
        C(catamaran_tenant_allowances) (key C(network_ingress_from_namespaces)), as
        P(catamaran.federation.federation_model#filter) checks.
    type: list
    elements: str
    default: []
    version_added: 0.3.0
  network_egress_to_namespaces:
    description:
      - The provider's namespaces whose pods, and so whose Services, this consumer's pods may open connections to on
        the provider (C(spec.isolation.egressToNamespaces)), such as a shared database's; each a namespace name (a
        DNS-1123 label), at most 32.
      - Through the NetworkPolicy C(catamaran-tenant-terms) the provider's manager keeps in every twin namespace, a
        tenant's pods may always reach their own twin namespace, the cluster DNS (port 53) and the fabric (the
        consumer's pods). The default (none, and no O(network_egress_to_cidrs)) refuses everything else (the
        provider's other namespaces and its other tenants, its nodes and their kubelet port, its API server unless
        O(network_egress_to_api_server), link-local metadata addresses such as V(169.254.169.254), and the
        internet).
      - Enforced only where the provider's network plugin enforces NetworkPolicies (Calico, Cilium, kube-router,
        for example); with one that does not (flannel alone), nothing holds the tenant's pods to these terms.
      - Set in the inventory (C(catamaran_peerings)), the values must be lent by the provider's
        C(catamaran_tenant_allowances) (key C(network_egress_to_namespaces)), as
        P(catamaran.federation.federation_model#filter) checks.
    type: list
    elements: str
    default: []
    version_added: 0.3.0
  network_egress_to_cidrs:
    description:
      - The address ranges this consumer's pods may open connections to from the provider
        (C(spec.isolation.egressToCIDRs)), such as an external API's; each an IPv4 or IPv6 network written as a
        network, address and prefix length (V(203.0.113.0/24), V(2001:db8::/32)), at most 32. A range written with
        host bits set, such as V(10.0.0.1/8), is refused, naming the network to write instead (V(10.0.0.0/8)).
      - Beyond these, a tenant's pods may reach only their own twin namespace, the cluster DNS, the fabric (the
        consumer's pods) and O(network_egress_to_namespaces); the default (none) refuses the provider's nodes and
        their kubelet port, its API server, link-local metadata addresses such as V(169.254.169.254), and the
        internet.
      - V(0.0.0.0/0) (or V(::/0)) lends everything of its family, the provider's nodes, its API server and its
        metadata addresses included; lend narrower ranges to keep those refused.
      - Enforced only where the provider's network plugin enforces NetworkPolicies (Calico, Cilium, kube-router,
        for example); with one that does not (flannel alone), nothing holds the tenant's pods to these terms.
      - Set in the inventory (C(catamaran_peerings)), each value must lie within a range of the same IP family the
        provider's C(catamaran_tenant_allowances) lends (key C(network_egress_to_cidrs)), as
        P(catamaran.federation.federation_model#filter) checks.
    type: list
    elements: str
    default: []
    version_added: 0.3.0
  network_egress_to_api_server:
    description:
      - Whether this consumer's pods may open connections to the provider's own API server
        (C(spec.isolation.egressToAPIServer)), that is the endpoints of its C(kubernetes) Service, at their addresses
        and ports, which the NetworkPolicy C(catamaran-tenant-terms) of every twin namespace then admits.
      - The default (V(false)) keeps the tenant's pods off the provider's API server. Pods that choose it with the
        annotation C(catamaran.io/api-server-access=provider) (see O(home_api_server)) need it; without it their
        connections to it are refused. Pods reaching the consumer's API server (the default, V(home)) do not.
      - Always written to the ResourceOffer, so setting it back to V(false) takes back what was lent.
      - Enforced only where the provider's network plugin enforces NetworkPolicies (Calico, Cilium, kube-router,
        for example); with one that does not (flannel alone), nothing holds the tenant's pods to these terms.
      - Set in the inventory (C(catamaran_peerings)), a V(true) must be lent by the provider's
        C(catamaran_tenant_allowances) (key C(network_egress_to_api_server), by default V(false)), as
        P(catamaran.federation.federation_model#filter) checks; there it must be written as a boolean, not a string
        such as V(yes).
    type: bool
    default: false
    version_added: 0.3.0
  container_defaults:
    description:
      - Requests and limits given to the containers of this consumer's pods that set none
        (C(spec.containerDefaults)), by the provider's manager on every pod it makes and by a LimitRange in each
        twin namespace, so nothing the consumer runs is free.
      - Each suboption maps resource names to quantities (V(500m), V(1Gi)). Resources given replace the default's,
        the others keep it. A default request above the default limit of the same resource is refused.
    type: dict
    default: {}
    suboptions:
      requests:
        description: Default requests per resource.
        type: dict
        default: {cpu: 100m, memory: 128Mi, ephemeral-storage: 256Mi}
      limits:
        description: Default limits per resource (a container's own request above one raises it).
        type: dict
        default: {cpu: "2", memory: 2Gi, ephemeral-storage: 4Gi}
  object_quota:
    description:
      - The hard limits of the ResourceQuota in each of this consumer's twin namespaces (C(spec.objectQuota)), that
        is storage requests and object counts (C(configmaps), C(secrets), C(services), C(persistentvolumeclaims),
        C(requests.storage), C(count/<resource>.<group>)), as resource names to quantities.
      - Resources given replace the default's, the others keep it. Pods and compute are not counted here but in
        the tenant-wide quota of O(sharing_percentage).
    type: dict
    default:
      configmaps: "1000"
      secrets: "11000"
      services: "200"
      persistentvolumeclaims: "50"
      requests.storage: 500Gi
      count/endpointslices.discovery.k8s.io: "1000"
      count/ingresses.networking.k8s.io: "100"
  rotate_credential:
    description:
      - With O(state=present), delete the tenant's current credential on the provider so its manager mints a new
        one, wait for it and store it on the consumer. The virtual kubelet picks it up without a restart.
      - Revoking every token already handed out is a different step (deleting the binding Secret).
    type: bool
    default: false
  force:
    description:
      - With O(state=absent), un-peer even when one of the two clusters cannot be reached (gone for good).
      - Without the provider, the virtual node's pods are deleted locally with grace period 0, then the
        ForeignCluster, credential Secret, virtual node and its Lease. Without the consumer, the tenant is removed
        from the provider. RV(not_cleaned) lists what stayed on the unreachable cluster.
      - Without O(force), an unreachable cluster fails the task, naming it, before anything changes.
    type: bool
    default: false
  node_labels:
    description:
      - Labels the virtual node carries besides Catamaran's own (region, provider, ...).
      - Keys must be valid label keys (optional DNS-1123 subdomain prefix and C(/), a name of at most 63
        characters), values valid label values.
    type: dict
    default: {}
  node_taints:
    description:
      - Taints the virtual node carries besides Catamaran's own (the ForeignCluster's C(spec.nodeTaints)), for
        instance to keep pods that do not tolerate them off a costly provider; a V(NoExecute) one also evicts such
        pods already there. The pod webhook adds only the toleration of Catamaran's own taint, so pods must
        tolerate these themselves.
      - The virtual kubelet keeps them on the node and removes one that leaves this list; taints others put on the
        node stay. Each key and effect may be listed once, and the key C(virtual-node.catamaran.io/not-allowed) is
        Catamaran's own.
    type: list
    elements: dict
    default: []
    version_added: 0.3.0
    suboptions:
      key:
        description: The taint key, a valid label key.
        type: str
        required: true
      value:
        description: The taint value, a valid label value; unset, empty.
        type: str
      effect:
        description: What the taint does to pods that do not tolerate it.
        type: str
        required: true
        choices: [NoSchedule, PreferNoSchedule, NoExecute]
  provider_node_selector:
    description:
      - Labels a provider node must carry to run this consumer's offloaded pods.
      - Kept on the provider (in the tenant's ResourceOffer), so the consumer cannot widen it. The provider's
        manager adds it to every pod it creates for this consumer, and the virtual node's capacity counts only
        the provider nodes that match it.
    type: dict
    default: {}
  provider_tolerations:
    description:
      - Tolerations the provider's manager adds to every pod it creates for this consumer, for provider nodes
        tainted to keep other workloads off. Nodes with a NoSchedule or NoExecute taint these do not tolerate
        do not count toward the virtual node's capacity.
    type: list
    elements: dict
    default: []
    suboptions:
      key:
        description: The taint key; empty with O(provider_tolerations[].operator=Exists) matches every key.
        type: str
      operator:
        description: How O(provider_tolerations[].value) is compared.
        type: str
        choices: [Equal, Exists]
        default: Equal
      value:
        description: The taint value (with V(Equal)).
        type: str
      effect:
        description: The taint effect to tolerate; empty tolerates every effect.
        type: str
        choices: [NoSchedule, PreferNoSchedule, NoExecute]
      toleration_seconds:
        description: With V(NoExecute), how long a pod stays bound after the taint appears.
        type: int
  health_check:
    description: How the virtual kubelet checks that the provider is reachable.
    type: dict
    default: {}
    suboptions:
      period_seconds:
        description: Seconds between checks.
        type: int
      timeout_seconds:
        description: Seconds before one check fails.
        type: int
      failure_threshold:
        description: Consecutive failures before the virtual node turns NotReady.
        type: int
  network:
    description:
      - How pods of the two clusters reach each other (docs/network-fabric.md).
      - With O(network.mode=fabric), each side gets a WireGuard key for this peering, kept in a Secret of its own
        cluster (C(catamaran-fabric/catamaran-fabric-to-<provider_id>) on the consumer,
        C(catamaran-fabric/catamaran-fabric-from-<consumer_id>) on the provider); only public keys cross, and no key
        is ever printed or shown in a diff. The provider's gateway listens for this tenant on its own UDP port.
      - Each cluster's gateway (C(catamaran gateway)) builds the tunnel from what this module writes.
      - Each side sees the other's pods at their own range unless it overlaps what that side uses (its pod ranges,
        Service ranges, real nodes' addresses, the ranges of its other peers); then at a free range of
        C(100.64.0.0/10), kept from one run to the next.
      - The consumer's gateway also carries traffic between its providers. So C(spec.consumerPodCIDRs) also
        announces the consumer's other fabric providers' pod ranges, as the consumer sees them, that overlap nothing
        of this provider's. Every range the consumer hands out is kept apart from the others. A provider peered
        before another appears learns the newer one's range when its peering runs again (the C(peering) role
        runs every fabric peering a second time when a consumer has several).
    type: dict
    default: {}
    suboptions:
      mode:
        description:
          - V(fabric) carries pod traffic through a WireGuard tunnel between the clusters' gateways.
          - V(flat) when the clusters already route each other's pod ranges (a VPC, Submariner, Cilium ClusterMesh);
            no gateway, no tunnel, no key.
        type: str
        choices: [fabric, flat]
        default: flat
      gateway_address:
        description:
          - The provider gateway's address as the consumer's gateway reaches it (its node's address, or a name).
          - Required with V(fabric) unless O(network.gateway_service) is given; with it, this overrides the address
            read from the Service.
        type: str
      gateway_service:
        description:
          - Expose the provider's gateway through a Service of its own for this tenant,
            C(catamaran-fabric/catamaran-gw-<consumer_id>), in front of the gateway pod of deployment mode, as users
            deploy on clusters whose nodes the consumer cannot reach directly (a cloud's private node addresses).
          - The Service's traffic policy is C(Local), so the tunnel sees the consumer gateway's own address.
          - The endpoint published to the consumer is read from the provider. V(LoadBalancer) gives the load
            balancer's address (waited for up to O(wait_timeout)) and the tenant's UDP port. V(NodePort) gives
            the node port and the address of the node where the gateway pod runs (its ExternalIP, else its
            InternalIP), unless O(network.gateway_address) names another.
          - Unset, the consumer reaches the gateway at O(network.gateway_address) and the tenant's port, and any
            Service an earlier run made is deleted.
        type: dict
        suboptions:
          type:
            description: The Service's type.
            type: str
            choices: [NodePort, LoadBalancer]
            required: true
          node_port:
            description:
              - The node port of the tenant on O(network.gateway_port); each other tenant's is this plus its offset
                from that port, so that a firewall can name them. Unset, the API server allocates one, kept from then
                on.
            type: int
      gateway_port:
        description:
          - First UDP port of the provider's gateway for tenants; each tenant keeps the lowest one free when it
            peered.
        type: int
        default: 51820
      rotate_keys:
        description: Make new keys for both sides; the gateways pick them up and the tunnel is rebuilt.
        type: bool
        default: false
      reach_peers:
        description:
          - The consumer's other providers (cluster ids) whose pods this provider reaches through the consumer's
            gateway. Unset, every other fabric peering of the consumer. The C(peering) role passes the declared
            ones, so a provider being removed is no longer announced before it is un-peered.
        type: list
        elements: str
  cordon:
    description:
      - The provider stops lending to this tenant without un-peering (maintenance, a budget spent), written to the
        ResourceOffer's C(spec.cordon).
      - V(cordoned) - the provider's manager refuses the pods of new ShadowPods (reason C(TenantCordoned), which the
        consumer's pod shows); pods running stay. The consumer's virtual node turns unschedulable (taint
        C(catamaran.io/provider-cordoned:NoSchedule), condition C(catamaran.io/ProviderCordoned) with O(cordon.reason)).
      - V(drained) - as V(cordoned), and the consumer's virtual kubelet evicts the pods running on the virtual node
        through the consumer's Eviction API, so the consumer's PodDisruptionBudgets hold and its controllers make the
        pods again elsewhere.
      - V(uncordoned), or no O(cordon) - all returns.
    type: dict
    suboptions:
      state:
        description: What the provider lends.
        type: str
        choices: [cordoned, drained, uncordoned]
        default: cordoned
      reason:
        description: Why, shown to the consumer (at most 256 characters).
        type: str
  pools:
    description:
      - Node pools of the provider lent to this consumer, each a virtual node of its own on the consumer, named
        C(catamaran-<provider_id>.<pool>) and labelled C(catamaran.io/pool=<pool>) (docs/design.md, "Node pools").
        With pools, the peering's virtual nodes are its pools' (RV(peering.virtual_nodes)); without, it has the one
        node C(catamaran-<provider_id>).
      - "The provider's terms of each pool are written to the tenant's ResourceOffer (C(spec.pools): C(name),
        C(nodeSelector), C(tolerations), C(sharingPercentage), C(cordon)), which lends them; the
        settings of each pool's virtual node to the ForeignCluster (C(spec.pools): C(name), C(nodeLabels),
        C(nodeTaints)), which takes them. A pool has a node only when both list it."
      - A pod bound to a pool's node runs on the provider with the pool's placement, which replaces the peering's
        (O(provider_node_selector), O(provider_tolerations)) for it, and counts against the pool's quota
        (O(pools[].sharing_percentage) of the allocatable of the provider nodes that placement admits). The peering's
        other terms, its O(cordon), O(node_labels) and O(node_taints) apply to every pool.
      - A pool left out of the list (or every pool, with an empty list) is taken back. The consumer's virtual kubelet
        cordons its node, evicts its pods through the consumer's Eviction API (so PodDisruptionBudgets hold) and
        deletes the node and its Lease once no pod is bound to it; the pool-less node goes the same way once pools
        appear.
      - At most 16 pools, each name once. A name and O(provider_id) must leave the virtual node's name within the
        63 characters of a C(kubernetes.io/hostname) label; the module refuses one that does not, naming it.
      - The consumer's virtual kubelet may manage the pools' nodes only where the P(catamaran.federation.controller#role)
        role was given them (O(catamaran.federation.controller#role:main:controller_virtual_kubelet_pools)).
    type: list
    elements: dict
    default: []
    version_added: 0.3.0
    suboptions:
      name:
        description:
          - The pool's name, a DNS-1123 label (lower-case letters, digits and C(-)) of at most 20 characters.
        type: str
        required: true
      provider_node_selector:
        description:
          - Labels a provider node must carry to run the pool's pods (C(nodeSelector) of the pool in the ResourceOffer),
            as O(provider_node_selector) for the whole peering.
        type: dict
        default: {}
      provider_tolerations:
        description:
          - Tolerations the provider's manager adds to the pool's pods (C(tolerations) of the pool in the
            ResourceOffer), as O(provider_tolerations) for the whole peering; at most 32.
        type: list
        elements: dict
        default: []
        suboptions:
          key:
            description: The taint key; empty with O(pools[].provider_tolerations[].operator=Exists) matches every key.
            type: str
          operator:
            description: How O(pools[].provider_tolerations[].value) is compared.
            type: str
            choices: [Equal, Exists]
            default: Equal
          value:
            description: The taint value (with V(Equal)).
            type: str
          effect:
            description: The taint effect to tolerate; empty tolerates every effect.
            type: str
            choices: [NoSchedule, PreferNoSchedule, NoExecute]
          toleration_seconds:
            description: With V(NoExecute), how long a pod stays bound after the taint appears.
            type: int
      sharing_percentage:
        description:
          - Share (1-100) of the free resources of the provider nodes the pool's placement admits that its node offers
            and its quota holds (C(sharingPercentage) of the pool in the ResourceOffer).
          - Unset, the peering's O(sharing_percentage).
        type: int
      node_labels:
        description:
          - Labels the pool's virtual node carries besides the peering's O(node_labels) (C(nodeLabels) of the pool in
            the ForeignCluster); valid label keys and values, never C(catamaran.io/pool), which the virtual kubelet
            sets.
        type: dict
        default: {}
      node_taints:
        description:
          - Taints the pool's virtual node carries besides the peering's O(node_taints) (C(nodeTaints) of the pool in
            the ForeignCluster), checked as those.
        type: list
        elements: dict
        default: []
        suboptions:
          key:
            description: The taint key, a valid label key.
            type: str
            required: true
          value:
            description: The taint value, a valid label value; unset, empty.
            type: str
          effect:
            description: What the taint does to pods that do not tolerate it.
            type: str
            required: true
            choices: [NoSchedule, PreferNoSchedule, NoExecute]
      cordon:
        description:
          - The provider stops lending the pool alone (C(cordon) of the pool in the ResourceOffer), as O(cordon) does
            for the whole tenant. V(cordoned) - the provider refuses new pods of the pool (reason C(PoolCordoned))
            and the pool's virtual node turns unschedulable. V(drained) - also evicts the pool's pods on the consumer
            (PodDisruptionBudgets hold). V(uncordoned), or no O(pools[].cordon) - all returns.
        type: dict
        suboptions:
          state:
            description: What the provider lends of the pool.
            type: str
            choices: [cordoned, drained, uncordoned]
            default: cordoned
          reason:
            description: Why, shown to the consumer (at most 256 characters).
            type: str
  home_api_server:
    description:
      - Where the provider's pods reach the consumer's API server, V(https://host[:port]), written to the
        ForeignCluster's C(spec.homeAPIServer).
      - Offloaded pods then find the consumer's API server with their in-cluster configuration
        (C(KUBERNETES_SERVICE_HOST)/C(PORT)), so their reflected token and CA work unchanged; a pod may choose the
        provider's API server (a token of its twin's default ServiceAccount, bound to nothing) or none with the
        annotation C(catamaran.io/api-server-access) (V(home), V(provider), V(disabled)). The consumer's API server
        certificate must name the host. Pods choosing V(provider) reach the provider's API server only where the
        provider lends O(network_egress_to_api_server); by default the twins' NetworkPolicy refuses them.
      - Unset, offloaded pods see the provider's C(kubernetes) Service, where their token is not valid.
      - Also written to the tenant's ResourceOffer (C(spec.consumerAPIServer)), so the NetworkPolicy of every twin
        lets the tenant's pods open connections to that address and port. There the host must be an IP address
        outside the provider's pod ranges (not loopback nor link-local); otherwise the provider's manager leaves the
        rule out and says why in a Warning Event on the TwinNamespace.
    type: str
  pod_cidrs:
    description:
      - The provider's pod ranges the consumer consents to, recorded in the ForeignCluster's
        C(spec.networking.podCIDRs). The consumer shows and routes only pod IPs inside them. A range the provider
        announces (its ResourceOffer's C(status.podCIDRs), which its administrator may change at any time) outside
        them is refused and named in the ForeignCluster's condition C(catamaran.io/PodCIDRsRefused) and an Event.
      - Unset, the consent already recorded is kept, so a later run never widens it silently. At the first peering
        (or the first run of this release) the provider's announcement at that moment is recorded.
      - A change is a new consent, shown by the diff and check mode like any other change of the ForeignCluster.
    type: list
    elements: str
  pod_cidr_remap:
    description:
      - CIDR the provider's pod IPs are translated into on the consumer (needed when pod ranges overlap).
      - IPs keep their offset, so the range must be at least as large as each of the provider's pod ranges (as its
        ResourceOffer reports them, or its nodes' before the first peering) and of the same IP family.
    type: str
  reflection:
    description:
      - How the consumer's objects in offloaded namespaces are reflected (kept in sync) into their twin namespaces on
        the provider, written to the ForeignCluster's C(spec.reflection). The virtual kubelet applies it.
      - Every suboption is optional; unset ones are left out of the ForeignCluster, so the controller's defaults apply.
      - Checked before anything changes; an unknown kind, a policy other than V(DenyList) or V(AllowList), or
        O(reflection.kinds.config_maps.workers) (or another kind's) outside 0-64 fails with the field named.
    type: dict
    suboptions:
      kinds:
        description:
          - Settings per reflected kind; a kind left out keeps the controller's defaults.
          - The controller's default workers per kind are config_maps 16, secrets 16, services 4, endpoint_slices 8,
            ingresses 2, service_account_tokens 16, persistent_volume_claims 2.
        type: dict
        suboptions:
          config_maps:
            description: ConfigMaps.
            type: dict
            # Every kind takes these suboptions (service-account tokens only workers): written once, aliased below.
            suboptions: &reflected_kind
              policy:
                description:
                  - V(DenyList) (the controller's default) reflects every object except those annotated
                    C(catamaran.io/skip-reflection=true); V(AllowList) reflects only objects annotated
                    C(catamaran.io/allow-reflection=true).
                type: str
                choices: [DenyList, AllowList]
              workers: &reflection_workers
                description:
                  - Concurrent workers (0-64; unset, the kind's default listed in O(reflection.kinds)). V(0) turns the
                    kind off and removes its reflected copies.
                type: int
          secrets:
            description: Secrets.
            type: dict
            suboptions: *reflected_kind
          services:
            description: Services (cluster IPs and node ports are left to the provider).
            type: dict
            suboptions: *reflected_kind
          endpoint_slices:
            description: EndpointSlices (addresses translated for the provider).
            type: dict
            suboptions: *reflected_kind
          ingresses:
            description: Ingresses (see O(reflection.ingress_class_name)).
            type: dict
            suboptions: *reflected_kind
          service_account_tokens:
            description: Service-account tokens of offloaded pods (requested from the consumer, stored in Secrets).
            type: dict
            suboptions:
              workers: *reflection_workers
          persistent_volume_claims:
            description:
              - PersistentVolumeClaims of the consumer's C(catamaran) storage class, reflected once a pod that uses
                one is scheduled to the virtual node (see O(reflection.storage_class_name)).
              - A local PersistentVolume bound to the claim stands for the provider's volume; deleting the claim
                deletes the provider's copy.
            type: dict
            suboptions: *reflected_kind
      filtered_labels:
        description:
          - Label keys never reflected; an entry ending in C(/) or C(*) is a prefix.
          - Unset, the controller filters the cloud load-balancer and kubectl keys it owns; a list replaces those
            (V([]) filters none).
        type: list
        elements: str
      filtered_annotations:
        description:
          - Annotation keys never reflected; an entry ending in C(/) or C(*) is a prefix.
          - Unset, the controller filters the cloud load-balancer and kubectl keys it owns; a list replaces those
            (V([]) filters none).
        type: list
        elements: str
      ingress_class_name:
        description: The provider's ingress class for reflected Ingresses; unset uses the provider's default class.
        type: str
      storage_class_name:
        description:
          - The provider's storage class for reflected PersistentVolumeClaims; unset uses the provider's default
            class.
          - The reflected claims are held to the provider's terms, so a class other than the provider's default must
            be one of O(allowed_storage_classes).
        type: str
  wait:
    description: With O(state=present), wait until the virtual node is Ready.
    type: bool
    default: false
  wait_timeout:
    description:
      - Seconds (at least 1) to wait for the provider's manager to mint the credential, for the virtual node, and
        for the tenant's namespaces to go.
    type: int
    default: 120
  drain_timeout:
    description:
      - With O(state=absent), seconds to wait for the virtual kubelet to remove the offloaded pods (at least 1).
      - After that the module removes the remote copies itself and force-deletes the local pods.
    type: int
    default: 120
"""

EXAMPLES = r"""
- name: Peer cluster-1 (consumer) with cluster-2 (provider) and wait for the virtual node
  catamaran.federation.peering:
    consumer:
      kubeconfig: ~/.kube/cluster-1
    provider:
      kubeconfig: ~/.kube/cluster-2
      context: admin@cluster-2
    consumer_id: cluster-1
    provider_id: cluster-2
    sharing_percentage: 50
    node_labels:
      topology.kubernetes.io/region: region-b
    # Only pods that tolerate it are scheduled to this provider's virtual node.
    node_taints:
      - key: example.com/costly
        value: "true"
        effect: NoSchedule
    # Only the provider's GPU nodes, which are tainted for borrowed workloads.
    provider_node_selector:
      node.example.com/pool: gpu
    provider_tolerations:
      - key: node.example.com/borrowed
        operator: Exists
        effect: NoSchedule
    health_check:
      period_seconds: 10
      failure_threshold: 3
    # Secrets only when annotated catamaran.io/allow-reflection=true, more ConfigMap workers, no
    # billing labels on the copies, Ingresses served by the provider's nginx class, and claims of the
    # catamaran storage class provisioned by the provider's fast-ssd class.
    reflection:
      kinds:
        secrets: {policy: AllowList}
        config_maps: {workers: 32}
      filtered_labels: [billing.example.com/]
      ingress_class_name: nginx
      storage_class_name: fast-ssd
    wait: true

- name: Peer through the network fabric, the provider's gateway on its node at 192.0.2.10
  catamaran.federation.peering:
    consumer: {kubeconfig: ~/.kube/cluster-1}
    provider: {kubeconfig: ~/.kube/cluster-2}
    consumer_id: cluster-1
    provider_id: cluster-2
    network:
      mode: fabric
      gateway_address: 192.0.2.10

- name: Stop lending to cluster-1 for a maintenance, and move its running pods back to it (PodDisruptionBudgets hold)
  catamaran.federation.peering:
    consumer: {kubeconfig: ~/.kube/cluster-1}
    provider: {kubeconfig: ~/.kube/cluster-2}
    consumer_id: cluster-1
    provider_id: cluster-2
    cordon:
      state: drained
      reason: node maintenance until Monday

- name: Lend cluster-2 in two pools, its real node and its GPU nodes, each a virtual node of its own on cluster-1
  catamaran.federation.peering:
    consumer: {kubeconfig: ~/.kube/cluster-1}
    provider: {kubeconfig: ~/.kube/cluster-2}
    consumer_id: cluster-1
    provider_id: cluster-2
    pools:
      # Virtual node catamaran-cluster-2.real, for the provider's real node (tainted to keep others off).
      - name: real
        provider_node_selector: {catamaran.io/lab-node-kind: real}
        provider_tolerations:
          - {key: catamaran.io/lab-node-kind, operator: Equal, value: real, effect: NoSchedule}
        node_labels: {example.com/disk: ssd}
      # Virtual node catamaran-cluster-2.gpu: half of what the GPU nodes have free, only for pods tolerating its taint.
      - name: gpu
        provider_node_selector: {example.com/gpu: "true"}
        sharing_percentage: 50
        node_taints:
          - {key: example.com/gpu, value: "true", effect: NoSchedule}
        cordon:
          state: cordoned
          reason: driver upgrade
  register: pooled

- name: Peer through the network fabric, the provider's gateway behind a NodePort Service (address and port read back)
  catamaran.federation.peering:
    consumer: {kubeconfig: ~/.kube/cluster-1}
    provider: {kubeconfig: ~/.kube/cluster-2}
    consumer_id: cluster-1
    provider_id: cluster-2
    network:
      mode: fabric
      gateway_service: {type: NodePort}

- name: Peer two clusters of one kubeconfig, its path set once for every module of the collection
  module_defaults:
    group/catamaran.federation.all:
      kubeconfig: ~/.kube/federation
  block:
    - name: Install the CRDs on both clusters
      catamaran.federation.crds:
        context: "{{ item }}"
        src: "{{ catamaran_crds_dir }}"
      loop: [cluster-2, cluster-3]

    - name: Peer cluster-2 (consumer) with cluster-3 (provider); each side names only its context
      catamaran.federation.peering:
        consumer:
          context: cluster-2
        provider:
          context: cluster-3
        consumer_id: cluster-2
        provider_id: cluster-3

- name: Peer with a provider reached with a token (the consumer from K8S_AUTH_KUBECONFIG and K8S_AUTH_CONTEXT)
  catamaran.federation.peering:
    consumer: {}
    provider:
      host: https://cluster-4.example.com:6443
      api_key: "{{ cluster_4_admin_token }}"
      ca_cert: /etc/catamaran/cluster-4-ca.crt
    consumer_id: cluster-1
    provider_id: cluster-4

- name: Peer as a provider that lets the consumer open NodePorts and keep its namespaces' names
  catamaran.federation.peering:
    consumer:
      kubeconfig: ~/.kube/cluster-1
    provider:
      kubeconfig: ~/.kube/cluster-2
    consumer_id: cluster-1
    provider_id: cluster-2
    allowed_service_types: [ClusterIP, NodePort]
    # Twins may be named as the consumer's namespaces (EnforceSameName offloading), not only <name>-cluster-1.
    twin_namespace_names: Any
    # Bigger defaults for containers that set no memory, and room for more Services per twin namespace.
    container_defaults:
      requests: {memory: 256Mi}
      limits: {memory: 4Gi}
    object_quota:
      services: "500"

- name: Hand the consumer a new credential now
  catamaran.federation.peering:
    consumer:
      kubeconfig: ~/.kube/cluster-1
    provider:
      kubeconfig: ~/.kube/cluster-2
    consumer_id: cluster-1
    provider_id: cluster-2
    sharing_percentage: 50
    rotate_credential: true

- name: Remove the peering with cluster-3, whose API server is gone for good
  catamaran.federation.peering:
    consumer:
      kubeconfig: ~/.kube/cluster-1
    provider:
      kubeconfig: ~/.kube/cluster-3
    consumer_id: cluster-1
    provider_id: cluster-3
    state: absent
    force: true
  register: unpeered

- name: Un-peer them
  catamaran.federation.peering:
    consumer:
      kubeconfig: ~/.kube/cluster-1
    provider:
      kubeconfig: ~/.kube/cluster-2
    consumer_id: cluster-1
    provider_id: cluster-2
    state: absent
"""

RETURN = r"""
peering:
  description: Where the peering's objects live (never the credential itself).
  returned: always
  type: dict
  contains:
    consumer_id:
      description: The consumer's cluster id.
      type: str
      sample: cluster-1
    provider_id:
      description: The provider's cluster id.
      type: str
      sample: cluster-2
    tenant_namespace:
      description: The tenant namespace on the provider.
      type: str
      sample: catamaran-tenant-cluster-1
    credentials_secret:
      description: The consumer's Secret holding the credential, as namespace/name.
      type: str
      sample: catamaran-system/catamaran-credentials-cluster-2
    foreign_cluster:
      description: The ForeignCluster on the consumer, as namespace/name.
      type: str
      sample: catamaran-system/cluster-2
    virtual_node:
      description:
        - The name of the peering's pool-less virtual node; with O(pools), its virtual nodes are RV(peering.virtual_nodes).
      type: str
      sample: catamaran-cluster-2
    virtual_nodes:
      description:
        - The names of the peering's virtual nodes, one per pool of O(pools) (C(catamaran-<provider_id>.<pool>), in the
          order given), else the one node RV(peering.virtual_node).
      type: list
      elements: str
      sample: ["catamaran-cluster-2.real", "catamaran-cluster-2.gpu"]
      version_added: 0.3.0
    virtual_node_ready:
      description:
        - Whether every virtual node of RV(peering.virtual_nodes) was Ready when the module finished (only checked with
          O(wait=true)).
      type: bool
      sample: true
    consumer_pod_cidrs:
      description:
        - The consumer's pod ranges announced to the provider (the ResourceOffer's C(spec.consumerPodCIDRs)), one
          per IP family; empty when no consumer node reports C(spec.podCIDRs), and with O(state=absent).
      type: list
      elements: str
      sample: ["10.244.0.0/16"]
credential_rotated:
  description: Whether a new credential was minted and stored (with O(rotate_credential=true)).
  returned: always
  type: bool
  sample: false
not_cleaned:
  description:
    - With O(force=true), what stayed on the cluster that could not be reached; clean it up if that cluster comes
      back.
  returned: always
  type: list
  elements: str
  sample: ["cluster-3 (unreachable): tenant namespace catamaran-tenant-cluster-1 with its credential, ..."]
forced:
  description: Cleanup steps the module had to do itself because no virtual kubelet or manager did them.
  returned: always
  type: list
  elements: str
  sample: []
actions:
  description: What was (or, in check mode, would be) changed, one line per object.
  returned: always
  type: list
  elements: str
  sample: ["create cluster-2: Namespace catamaran-tenant-cluster-1"]
"""

from ansible_collections.catamaran.federation.plugins.module_utils import fabric, validation
from ansible_collections.catamaran.federation.plugins.module_utils.common import CatamaranModule, connection_spec
from ansible_collections.catamaran.federation.plugins.module_utils.constants import (
    DEFAULT_ALLOWED_POD_ANNOTATIONS,
    DEFAULT_ALLOWED_SERVICE_TYPES,
    DEFAULT_CONTAINER_LIMITS,
    DEFAULT_CONTAINER_REQUESTS,
    DEFAULT_CREDENTIAL_LIFETIME_SECONDS,
    DEFAULT_MAX_TERMINATION_GRACE_SECONDS,
    DEFAULT_OBJECT_QUOTA,
    DEFAULT_POD_SECURITY_LEVEL,
    DEFAULT_SHARING_PERCENTAGE,
    DEFAULT_TWIN_NAME_POLICY,
    POD_SECURITY_LEVELS,
    SERVICE_TYPES,
    SYSTEM_NAMESPACE,
    TAINT_EFFECTS,
    TENANT_PRIORITY_CLASS,
    TWIN_NAME_POLICIES,
)
from ansible_collections.catamaran.federation.plugins.module_utils.peering import Peering, connect_both, virtual_nodes
from ansible_collections.catamaran.federation.plugins.module_utils.reflection import (
    KIND_OPTIONS,
    POLICIES,
    TAKES_POLICY,
)


def reflection_options():
    """O(reflection): its shape; ranges are checked by Peering.validate, with the field named."""

    def kind(takes_policy):
        options = dict(workers=dict(type="int"))
        if takes_policy:
            options["policy"] = dict(type="str", choices=list(POLICIES))
        return dict(type="dict", no_log=False, options=options)

    return dict(
        kinds=dict(type="dict", options=dict((option, kind(TAKES_POLICY[option])) for option in KIND_OPTIONS)),
        filtered_labels=dict(type="list", elements="str"),
        filtered_annotations=dict(type="list", elements="str"),
        ingress_class_name=dict(type="str"),
        storage_class_name=dict(type="str"),
    )


def toleration_options():
    """The suboptions of a toleration (O(provider_tolerations), O(pools[].provider_tolerations))."""
    return dict(
        key=dict(type="str", no_log=False),
        operator=dict(type="str", choices=["Equal", "Exists"], default="Equal"),
        value=dict(type="str"),
        effect=dict(type="str", choices=["NoSchedule", "PreferNoSchedule", "NoExecute"]),
        toleration_seconds=dict(type="int"),
    )


def taint_options():
    """The suboptions of a taint (O(node_taints), O(pools[].node_taints))."""
    return dict(
        key=dict(type="str", required=True, no_log=False),
        value=dict(type="str"),
        effect=dict(type="str", required=True, choices=list(TAINT_EFFECTS)),
    )


def cordon_options():
    """The suboptions of a cordon (O(cordon), O(pools[].cordon))."""
    return dict(
        state=dict(type="str", choices=list(validation.CORDON_STATES), default="cordoned"),
        reason=dict(type="str"),
    )


def pool_options():
    """O(pools): the suboptions of a pool; names, ranges and counts are checked by Peering.validate."""
    return dict(
        name=dict(type="str", required=True),
        provider_node_selector=dict(type="dict", default={}),
        provider_tolerations=dict(type="list", elements="dict", default=[], options=toleration_options()),
        sharing_percentage=dict(type="int"),
        node_labels=dict(type="dict", default={}),
        node_taints=dict(type="list", elements="dict", default=[], options=taint_options()),
        cordon=dict(type="dict", options=cordon_options()),
    )


def argument_spec():
    provider_spec = connection_spec()
    provider_spec["api_server"] = dict(type="str")
    spec = connection_spec()  # the defaults of both sides
    spec.update(
        consumer=dict(type="dict", required=True, options=connection_spec()),
        provider=dict(type="dict", required=True, options=provider_spec),
        consumer_id=dict(type="str", required=True),
        provider_id=dict(type="str", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        sharing_percentage=dict(type="int", default=DEFAULT_SHARING_PERCENTAGE),
        pod_security=dict(type="str", choices=list(POD_SECURITY_LEVELS), default=DEFAULT_POD_SECURITY_LEVEL),
        credential_lifetime=dict(type="int", default=DEFAULT_CREDENTIAL_LIFETIME_SECONDS),
        allowed_service_types=dict(
            type="list", elements="str", choices=list(SERVICE_TYPES), default=list(DEFAULT_ALLOWED_SERVICE_TYPES)
        ),
        allowed_load_balancer_classes=dict(type="list", elements="str", default=[]),
        twin_namespace_names=dict(type="str", choices=list(TWIN_NAME_POLICIES), default=DEFAULT_TWIN_NAME_POLICY),
        priority_class=dict(type="str", default=TENANT_PRIORITY_CLASS),
        allowed_priority_classes=dict(type="list", elements="str", default=[]),
        container_defaults=dict(
            type="dict",
            default={},
            options=dict(
                requests=dict(type="dict", default=dict(DEFAULT_CONTAINER_REQUESTS)),
                limits=dict(type="dict", default=dict(DEFAULT_CONTAINER_LIMITS)),
            ),
        ),
        object_quota=dict(type="dict", default=dict(DEFAULT_OBJECT_QUOTA)),
        max_termination_grace_period=dict(type="int", default=DEFAULT_MAX_TERMINATION_GRACE_SECONDS),
        allowed_pod_annotations=dict(type="list", elements="str", default=list(DEFAULT_ALLOWED_POD_ANNOTATIONS)),
        cordon=dict(type="dict", options=cordon_options()),
        pools=dict(type="list", elements="dict", default=[], options=pool_options()),
        allowed_storage_classes=dict(type="list", elements="str", default=[]),
        allowed_ingress_classes=dict(type="list", elements="str", default=[]),
        allowed_ingress_hosts=dict(type="list", elements="str", default=[]),
        allowed_ingress_annotations=dict(type="list", elements="str", default=[]),
        network_ingress_from_namespaces=dict(type="list", elements="str", default=[]),
        network_egress_to_namespaces=dict(type="list", elements="str", default=[]),
        network_egress_to_cidrs=dict(type="list", elements="str", default=[]),
        network_egress_to_api_server=dict(type="bool", default=False),
        rotate_credential=dict(type="bool", default=False),
        force=dict(type="bool", default=False),
        node_labels=dict(type="dict", default={}),
        node_taints=dict(type="list", elements="dict", default=[], options=taint_options()),
        provider_node_selector=dict(type="dict", default={}),
        provider_tolerations=dict(type="list", elements="dict", default=[], options=toleration_options()),
        health_check=dict(
            type="dict",
            default={},
            options=dict(
                period_seconds=dict(type="int"), timeout_seconds=dict(type="int"), failure_threshold=dict(type="int")
            ),
        ),
        network=dict(
            type="dict",
            default={},
            options=dict(
                mode=dict(type="str", choices=sorted(fabric.MODES), default=fabric.DEFAULT_MODE),
                gateway_address=dict(type="str"),
                gateway_service=dict(
                    type="dict",
                    options=dict(
                        type=dict(type="str", choices=list(validation.GATEWAY_SERVICE_TYPES), required=True),
                        node_port=dict(type="int"),
                    ),
                ),
                gateway_port=dict(type="int", default=fabric.DEFAULT_GATEWAY_PORT),
                rotate_keys=dict(type="bool", default=False, no_log=False),
                reach_peers=dict(type="list", elements="str"),
            ),
        ),
        pod_cidrs=dict(type="list", elements="str"),
        pod_cidr_remap=dict(type="str"),
        home_api_server=dict(type="str"),
        reflection=dict(type="dict", options=reflection_options()),
        wait=dict(type="bool", default=False),
        wait_timeout=dict(type="int", default=120),
        drain_timeout=dict(type="int", default=120),
    )
    return spec


def main():
    module = CatamaranModule(argument_spec(), supports_check_mode=True)
    params = module.params

    def body():
        consumer_id, provider_id = Peering.validate(params)
        peering = connect_both(module, params, consumer_id, provider_id)
        forced, not_cleaned = [], []
        ready = False
        nodes = virtual_nodes(provider_id, params)
        if params["state"] == "present":
            changes = peering.present(params)
            if params["wait"] and not module.check_mode:
                fabric = (params.get("network") or {}).get("mode") == "fabric"
                peering.wait_ready(params["wait_timeout"], fabric=fabric, nodes=nodes)
                ready = True
        else:
            changes, forced, not_cleaned = peering.absent(params["drain_timeout"], params["wait_timeout"])
        summary = dict(
            consumer_id=consumer_id,
            provider_id=provider_id,
            tenant_namespace=peering.tenant_namespace,
            credentials_secret="%s/%s" % (SYSTEM_NAMESPACE, peering.secret_name),
            foreign_cluster="%s/%s" % (SYSTEM_NAMESPACE, provider_id),
            virtual_node=peering.node_name,
            virtual_nodes=nodes,
            virtual_node_ready=ready,
            consumer_pod_cidrs=peering.consumer_pod_cidrs() if params["state"] == "present" else [],
        )
        rotated = bool(params["rotate_credential"]) and params["state"] == "present" and not module.check_mode
        return changes.result(peering=summary, forced=forced, not_cleaned=not_cleaned, credential_rotated=rotated)

    module.run(body)


if __name__ == "__main__":
    main()
