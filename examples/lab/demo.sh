#!/usr/bin/env bash
# The demo app on the lab federation: `demo.sh deploy` runs it, `demo.sh show` shows where it runs
# and fetches its page from every remote pod.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lab=${CATAMARAN_LAB_DIR:-$(cd "$here/../.." && pwd)/.lab}
kubectl="$lab/bin/kubectl --kubeconfig $lab/kubeconfig"
providers=(cluster-2 cluster-3)
twin=demo-cluster-1

deploy() {
  $kubectl --context cluster-1 apply -f "$here/demo-app/"
  $kubectl --context cluster-1 -n demo rollout status deployment/hello --timeout=180s
  $kubectl --context cluster-1 -n demo-front rollout status deployment/front --timeout=120s
}

# From the front end's pod on cluster-1: what its containers see, through the fabric.
from_front() {
  $kubectl --context cluster-1 -n demo-front exec deploy/front -- "$@"
}

show() {
  echo
  echo "== cluster-1 (consumer): virtual nodes and peerings"
  $kubectl --context cluster-1 get nodes -l catamaran.io/type=virtual-node
  $kubectl --context cluster-1 -n catamaran-system get foreignclusters
  echo
  echo "== cluster-1: namespace demo is offloaded"
  $kubectl --context cluster-1 -n demo get namespaceoffloading
  echo
  echo "== cluster-1: the demo's pods, each bound to a virtual node"
  $kubectl --context cluster-1 -n demo get pods -o wide
  for provider in "${providers[@]}"; do
    echo
    echo "== $provider (provider): the same pods, real containers on its real node, in $twin"
    $kubectl --context "$provider" -n "$twin" get pods -o wide 2>/dev/null || echo "(no twin namespace here)"
  done
  for provider in "${providers[@]}"; do
    echo
    echo "== $provider: the page's ConfigMap and the pods' tokens, reflected into $twin by the virtual kubelet"
    $kubectl --context "$provider" -n "$twin" get configmaps,secrets -l catamaran.io/managed-by=reflection 2>/dev/null \
      || echo "(no twin namespace here)"
  done
  echo
  echo "== the network fabric: a WireGuard tunnel per peering, and the providers' pod ranges as cluster-1 sees them"
  $kubectl --context cluster-1 -n catamaran-system get foreignclusters \
    -o custom-columns='PROVIDER:.metadata.name,NETWORK:.status.conditions[?(@.type=="NetworkReady")].reason,SEEN AS:.status.network.remotePodCIDRs,REMAP:.spec.networking.podCIDRRemap'
  echo
  echo "== the app: 6 requests to the front end on cluster-1, each calling the back end by Service name (hello.demo)"
  for _ in 1 2 3 4 5 6; do
    from_front timeout 10 wget -qO- http://127.0.0.1:8080/cgi-bin/path
  done
  echo
  echo "== each remote pod's page, fetched by the front end's pod at the pod's IP as cluster-1 sees it"
  $kubectl --context cluster-1 -n demo get pods -l app=hello \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.podIP}{"\n"}{end}' \
    | while read -r pod ip; do
        printf '%-28s %-15s ' "$pod" "$ip"
        from_front timeout 5 wget -qO- "http://$ip:8080/" </dev/null | sed -e 's/<[^>]*>/ /g' | tr -s ' \n' ' '
        echo
      done
  kubelet_api
  cat <<MORE

Look further (all contexts are in $lab/kubeconfig):
  export KUBECONFIG=$lab/kubeconfig PATH=$lab/bin:\$PATH
  kubectl --context cluster-1 describe node catamaran-cluster-2
  kubectl --context cluster-2 -n $twin get shadowpods,pods -o wide
  kubectl --context cluster-2 -n $twin logs -l app=hello --prefix
  kubectl --context cluster-2 get nodes -L catamaran.io/lab-node-kind
  kubectl --context cluster-1 -n catamaran-system get foreignclusters -o yaml
  less $lab/controller/cluster-1/vk-cluster-1-cluster-2.log
Re-run the playbook (changes nothing):  .venv/bin/ansible-playbook playbooks/site.yml
Tear it all down:                        make demo-down
MORE
}

# Troubleshooting an offloaded pod as any pod: cluster-1's API server reaches each virtual node's kubelet API,
# which proxies to the provider.
kubelet_api() {
  local pod port pf
  pod=$($kubectl --context cluster-1 -n demo get pods -l app=hello -o jsonpath='{.items[0].metadata.name}')
  echo
  echo "== kubectl logs $pod (on $($kubectl --context cluster-1 -n demo get pod "$pod" -o jsonpath='{.spec.nodeName}'))"
  $kubectl --context cluster-1 -n demo logs "$pod" | sed -n 1,3p
  echo
  echo "== kubectl exec $pod -- sh -c 'hostname; id; ls /www'"
  $kubectl --context cluster-1 -n demo exec "$pod" -- sh -c 'hostname; id; ls /www'
  echo
  echo "== kubectl port-forward pod/$pod :8080, then the page through it"
  pf=$(mktemp)
  $kubectl --context cluster-1 -n demo port-forward "pod/$pod" :8080 >"$pf" 2>&1 &
  local forwarder=$!
  for _ in $(seq 50); do grep -q 'Forwarding from 127.0.0.1' "$pf" && break; sleep 0.2; done
  port=$(sed -n 's/^Forwarding from 127.0.0.1:\([0-9]*\).*/\1/p' "$pf" | head -1)
  curl -fsS --max-time 5 "http://127.0.0.1:$port/" | sed -e 's/<[^>]*>/ /g' | tr -s ' \n' ' '
  echo
  kill "$forwarder" 2>/dev/null || true
  rm -f "$pf"
  echo
  echo "== kubectl top pod -n demo (metrics-server on cluster-1 scrapes the virtual nodes)"
  # metrics-server needs two scrapes of a node before it serves its pods' and its own figures: wait for both.
  for _ in $(seq 30); do
    $kubectl --context cluster-1 -n demo top pod 2>/dev/null | grep -q hello \
      && $kubectl --context cluster-1 top node -l catamaran.io/type=virtual-node >/dev/null 2>&1 && break
    sleep 5
  done
  $kubectl --context cluster-1 -n demo top pod 2>/dev/null || echo "(no pod metrics after 150 s)"
  $kubectl --context cluster-1 top node -l catamaran.io/type=virtual-node 2>/dev/null \
    || echo "(no virtual node metrics after 150 s)"
}

case "${1:-}" in
  deploy) deploy ;;
  show) show ;;
  *) echo "usage: $0 deploy|show" >&2; exit 2 ;;
esac
