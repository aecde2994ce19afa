// Command memhog is the container of test/node's OOM-kill test: it
// allocates memory and touches every page of it, 1 MiB at a time, until the
// kernel's OOM killer kills it at its container's memory limit. Built
// static (CGO_ENABLED=0) and packaged by tools/ociimage, as test/pause is,
// so that the real node needs no registry.
package main

import (
	"fmt"
	"os"
	"runtime"
)

func main() {
	var held [][]byte
	for i := 0; ; i++ {
		b := make([]byte, 1<<20)
		for j := 0; j < len(b); j += os.Getpagesize() {
			b[j] = 1
		}
		held = append(held, b)
		runtime.KeepAlive(held)
		if i%16 == 0 {
			fmt.Printf("memhog: %d MiB held\n", i+1)
		}
	}
}
