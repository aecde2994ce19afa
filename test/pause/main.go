// Command pause is the sandbox ("pause") container of test/node's real
// kubelet node: it holds the pod's namespaces and sleeps until SIGTERM or
// SIGINT. Built static (CGO_ENABLED=0) and packaged by tools/ociimage, so
// containerd's sandbox_image needs no registry.
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
