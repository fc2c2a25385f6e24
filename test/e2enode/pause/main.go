// Command pause is the sandbox image of the e2e node (make e2e-node): it
// holds the pod's namespaces and waits for SIGTERM or SIGINT, like
// registry.k8s.io/pause, which the node cannot pull.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
