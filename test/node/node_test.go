package node_test

import (
	"os"
	"testing"

	"github.com/nodeward/nodeward/test/node"
)

var env node.Env

func TestMain(m *testing.M) { os.Exit(env.Run(m)) }
