"""Local multi-cluster lab: real upstream control planes on loopback, kwok as the kubelets."""
