//go:build tools

// Package wireguard only anchors wireguard-go's command, so `go mod tidy` keeps its dependencies in
// go.sum. The lab builds it rather than taking Debian's (0.0.20220316): the newer one batches packets
// through the TUN device and UDP sockets (TSO/GRO, sendmmsg), several times the older one's throughput on
// this machine kind's kernel; its command line and control socket are the same.
package wireguard

import (
	_ "golang.zx2c4.com/wireguard"
)
