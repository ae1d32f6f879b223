//go:build tools

// Package registry only anchors CNCF Distribution's registry command. The lab runs one registry per lab (TLS with
// a CA of its own, htpasswd basic auth; lab/src/catamaran_lab/registry.py) that every real node's containerd
// trusts, so images can be pushed and pulled with imagePullSecrets as on a real cluster, not only imported. Built
// from source like every lab binary (nothing prebuilt can be fetched); v3.1.2 is the version the lab's Go module
// proxy serves.
//
// go.mod and go.sum are distribution v3.1.2's own pins, taken by `go get .../cmd/registry@v3.1.2`; keep them so,
// and do not run `go mod tidy` here: it would only add go.sum lines for modules upstream's tests import, and any
// pin it ever moved past upstream's would make a build nobody upstream tested. The build itself runs with
// -mod=readonly and needs nothing tidy would add.
package registry

import (
	_ "github.com/distribution/distribution/v3/cmd/registry"
)
