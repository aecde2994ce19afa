// Command nodeward is the node agent, the update coordinator and the
// operator's hand tools in one binary.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newRootCommand()
	root.SetArgs(gatherArgs(os.Args[0], os.Args[1:]))
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodeward:", err)
		os.Exit(rootExitCode(root, err))
	}
}
