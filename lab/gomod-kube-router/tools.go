//go:build tools

// Package kuberouter only anchors kube-router's command. The lab runs its network policy controller alone
// (`--run-firewall`, without its router and service proxy) on every real node: the nodes' CNI bridge
// enforces no NetworkPolicy of its own. v2.1.0 is the version the lab's Go module proxy serves.
//
// go.mod and go.sum are kube-router v2.1.0's own pins, taken by `go get .../cmd/kube-router@v2.1.0`; do NOT
// run `go mod tidy` here. kube-router's pruned module graph lacks a few packages that only other build tags
// and OSes import (otlptrace, go-ansiterm/winterm, ...), so tidy resolves those modules at their latest
// versions, which drags shared dependencies far past upstream's pins (grpc 1.62 -> 1.8x, x/net 0.21 -> 0.5x,
// otel 1.24 -> 1.4x): a build nobody upstream tested. The build itself runs with -mod=readonly and needs
// nothing tidy would add.
package kuberouter

import (
	_ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
)
