package testkit

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeAddr: the addresses are on loopback, distinct within the process,
// below the ephemeral range when it starts high enough, and can be listened
// on.
func TestFreeAddr(t *testing.T) {
	lo, hi := freePortRange()
	seen := map[string]bool{}
	for range 200 {
		addr := FreeAddr(t)
		if seen[addr] {
			t.Fatalf("FreeAddr returned %s twice", addr)
		}
		seen[addr] = true
		host, p, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("FreeAddr = %q, want 127.0.0.1:port", addr)
		}
		if port, _ := strconv.Atoi(p); hi > lo && (port < lo || port >= hi) {
			t.Fatalf("FreeAddr port %d outside [%d, %d)", port, lo, hi)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("listen on %s: %v", addr, err)
		}
		ln.Close()
	}
}
