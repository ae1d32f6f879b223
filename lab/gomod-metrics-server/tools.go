//go:build tools

// Package metricsserver only anchors metrics-server's command, so `go mod tidy` keeps its
// dependencies in go.sum. It is a module of its own, apart from ../gomod: required there,
// metrics-server v0.9.0 still compiles, but minimal version selection upgrades some 40 of
// Kubernetes' own dependencies (cel-go v0.26 -> v0.28, grpc, OpenTelemetry, golang.org/x/...,
// the etcd client v3.6.8 -> v3.6.11 under etcd server v3.6.8), so kube-apiserver and the rest
// would no longer be built from the dependency set v1.36.3 pins, and `go mod tidy` fails on an
// ambiguous import (cloud.google.com/go/compute/metadata).
package metricsserver

import (
	_ "sigs.k8s.io/metrics-server/cmd/metrics-server"
)
