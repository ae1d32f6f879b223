#!/usr/bin/env bash
# Prints where the demo's pods run, on the consumer and on the providers, and how to look further.
set -euo pipefail
lab=${CATAMARAN_LAB_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/.lab}
kubectl="$lab/bin/kubectl --kubeconfig $lab/kubeconfig"

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
for provider in cluster-2 cluster-3; do
  echo
  echo "== $provider (provider): the same pods, running in the twin namespace demo-cluster-1"
  $kubectl --context "$provider" -n demo-cluster-1 get pods -o wide 2>/dev/null || echo "(no twin namespace here)"
done
cat <<MORE

Look further (all contexts are in $lab/kubeconfig):
  export KUBECONFIG=$lab/kubeconfig PATH=$lab/bin:\$PATH
  kubectl --context cluster-1 describe node catamaran-cluster-2
  kubectl --context cluster-1 -n demo get pods -o wide
  kubectl --context cluster-2 -n demo-cluster-1 get shadowpods,pods
  kubectl --context cluster-2 get ns -l catamaran.io/origin-cluster-id=cluster-1
  kubectl --context cluster-1 -n catamaran-system get foreignclusters -o yaml
  less $lab/controller/cluster-1/vk-cluster-1-cluster-2.log
Re-run the playbook (changes nothing):  .venv/bin/ansible-playbook playbooks/site.yml
Tear it all down:                        make demo-down
MORE
