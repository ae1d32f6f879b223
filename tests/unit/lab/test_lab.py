"""Starting the lab (catamaran_lab/lab.py)."""

from __future__ import annotations

import subprocess

import pytest

from catamaran_lab.lab import exited_components, kubectl_failure, kubectl_timeout


def test_a_component_that_exited_during_the_start_is_started_again_as_kwokctl_started_it():
    config = {
        "components": [
            {"name": "kube-apiserver", "binary": "/lab/bin/kube-apiserver", "args": ["--a=1"], "workDir": "/lab/c1"},
            {"name": "kube-controller-manager", "binary": "/lab/bin/kcm", "args": ["--b=2"], "workDir": "/lab/c1"},
            {"name": "kube-scheduler", "binary": "/lab/bin/sched", "workDir": "/lab/c1"},
        ]
    }
    processes = {"kube-apiserver": True, "kube-controller-manager": False, "kube-scheduler": False}
    assert exited_components(processes, config) == [
        ("kube-controller-manager", ["/lab/bin/kcm", "--b=2"], "/lab/c1"),
        ("kube-scheduler", ["/lab/bin/sched"], "/lab/c1"),
    ]
    assert exited_components({"kube-apiserver": True}, config) == [], "no pid file: not kwokctl's to start"


@pytest.mark.parametrize(
    ("args", "seconds"),
    [
        (("wait", "--for=condition=Ready", "pod/a", "--timeout=90s"), 90.0),
        (("delete", "ns", "x", "--timeout=2m"), 120.0),
        (("get", "pods"), 0.0),
        (("wait", "--timeout=soon"), 0.0),
    ],
)
def test_kubectl_is_given_time_beyond_its_own_timeout(args, seconds):
    """A `kubectl wait --timeout=90s` must report its own timeout, not be killed by the lab's 60 s first."""
    assert kubectl_timeout(args) == seconds


def test_a_failed_kubectl_names_its_exit_status_and_what_it_said():
    def failed(returncode, stdout="", stderr=""):
        result = subprocess.CompletedProcess(["kubectl"], returncode, stdout, stderr)
        return kubectl_failure("c1", ("apply", "-f", "-"), result)

    assert failed(1, stderr="error: no objects passed to apply\n") == (
        "c1: kubectl apply -f - failed (exit status 1): error: no objects passed to apply"
    )
    assert failed(1, stdout="out only") == "c1: kubectl apply -f - failed (exit status 1): out only"
    # Killed by a signal: nothing written, the status alone says what happened.
    assert failed(-9) == "c1: kubectl apply -f - failed (exit status -9): no output"
