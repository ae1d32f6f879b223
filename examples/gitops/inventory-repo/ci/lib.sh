# shellcheck shell=bash
# Sourced by every script of ci/: the repository root as the working directory (its ansible.cfg applies),
# and the federation's kubeconfig taken from the CI secret without ever printing it.
#
#   FEDERATION_KUBECONFIG  the content of one kubeconfig with a context per cluster, named like the
#                          inventory's hosts (the CI secret of the same name). It is written, readable by
#                          the runner's user only, to $RUNNER_TEMP/federation.kubeconfig (the runner
#                          empties that directory after every job) and CATAMARAN_KUBECONFIG names the file.
#   CATAMARAN_KUBECONFIG   used as it is when FEDERATION_KUBECONFIG is not set (a run from a workstation).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -n ${FEDERATION_KUBECONFIG:-} ]]; then
  ci_kubeconfig_dir=${RUNNER_TEMP:-${TMPDIR:-/tmp}}
  mkdir -p "$ci_kubeconfig_dir"
  (umask 077 && printf '%s\n' "$FEDERATION_KUBECONFIG" >"$ci_kubeconfig_dir/federation.kubeconfig")
  export CATAMARAN_KUBECONFIG=$ci_kubeconfig_dir/federation.kubeconfig
  unset FEDERATION_KUBECONFIG ci_kubeconfig_dir
fi
if [[ -z ${CATAMARAN_KUBECONFIG:-} ]]; then
  echo "no kubeconfig: set the CI secret FEDERATION_KUBECONFIG (pull requests from forks get no secrets)" \
    "or, outside CI, CATAMARAN_KUBECONFIG to a kubeconfig file" >&2
  exit 2
fi

# Plain text: the output goes to logs and to a pull request comment.
export ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
