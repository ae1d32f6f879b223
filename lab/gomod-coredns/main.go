// Command coredns is CoreDNS with only the plugins the lab's Corefile uses (lab/src/catamaran_lab/dns.py).
//
// Upstream's main imports every plugin (cloud DNS providers among them): several hundred more
// packages to download and compile on every cold lab build. The plugins register themselves when
// imported, and CoreDNS orders them by its own directive list, so this main is all it takes.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
)

func main() { coremain.Run() }
