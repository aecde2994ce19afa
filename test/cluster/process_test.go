package cluster

import (
	"net"
	"strconv"
	"testing"
)

// TestFreePortsStayOutOfTheEphemeralRange: the ports are distinct, below
// the range outgoing connections take their local ports from, and free to
// bind once returned.
func TestFreePortsStayOutOfTheEphemeralRange(t *testing.T) {
	t.Parallel()
	low := ephemeralLow()
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Errorf("port %d returned twice", p)
		}
		seen[p] = true
		if p < 10000 || p >= low {
			t.Errorf("port %d outside [10000, %d)", p, low)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Errorf("port %d not free after FreePorts: %v", p, err)
			continue
		}
		l.Close()
	}
}
