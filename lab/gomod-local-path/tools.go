//go:build tools

// Package localpath only anchors Rancher's local-path-provisioner, the dynamic provisioner of the default storage
// class of every lab cluster with a real node (lab/src/catamaran_lab/localpath.py): a StatefulSet's claims are
// provisioned there as on any real cluster, on the real node's disk. Built from source like every lab binary; v0.0.30
// is the version the lab's Go module proxy serves.
//
// go.mod and go.sum are created by `go get github.com/rancher/local-path-provisioner@v0.0.30` (its own pins), so the
// build runs with -mod=readonly against what upstream tested.
package localpath

import (
	_ "github.com/rancher/local-path-provisioner"
)
