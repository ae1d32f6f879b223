"""Starting the lab (catamaran_lab/lab.py)."""

from __future__ import annotations

from catamaran_lab.lab import exited_components


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
