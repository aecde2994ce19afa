package cluster_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nodeward/nodeward/test/cluster"
	"github.com/nodeward/nodeward/test/testenv"
)

// BenchmarkControlPlaneStart measures how long a whole control plane takes
// to become ready, which bounds the fixed cost of every test package.
func BenchmarkControlPlaneStart(b *testing.B) {
	binDir := os.Getenv(cluster.BinDirVariable)
	testenv.Require(b, binDir != "", cluster.BinDirVariable+" is not set (make testbin)")
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cp, err := cluster.Start(ctx, cluster.Options{BinDir: binDir})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		cp.Stop()
		os.RemoveAll(cp.Dir())
		b.StartTimer()
	}
}
