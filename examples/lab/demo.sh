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
  echo "== the page, fetched from each remote pod at its pod IP (routed from this host to the provider's node)"
  $kubectl --context cluster-1 -n demo get pods -l app=hello \
    -o jsonpath='{range .items[*]}{.metadata.name} {.status.podIP}{"\n"}{end}' \
    | while read -r pod ip; do
        printf '%-28s %-15s ' "$pod" "$ip"
        curl -fsS --max-time 5 "http://$ip:8080/" | sed -e 's/<[^>]*>/ /g' | tr -s ' \n' ' '
        echo
      done
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

case "${1:-}" in
  deploy) deploy ;;
  show) show ;;
  *) echo "usage: $0 deploy|show" >&2; exit 2 ;;
esac
