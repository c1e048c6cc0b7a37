package testkit

import (
	"context"
	"net"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
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

// TestStartPostgres: the throw-away cluster accepts connections, runs SQL
// and allows prepared transactions.
func TestStartPostgres(t *testing.T) {
	pg := StartPostgres(t)
	dsn := pg.CreateDatabase(t, "kit")
	pg.Exec(t, "kit", "CREATE TABLE t (id int PRIMARY KEY)", "INSERT INTO t VALUES (1), (2)")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	var prepared string
	if err := conn.QueryRow(ctx, "SELECT count(*), current_setting('max_prepared_transactions') FROM t").Scan(&n, &prepared); err != nil {
		t.Fatal(err)
	}
	if n != 2 || prepared != "64" {
		t.Fatalf("count %d, max_prepared_transactions %s; want 2, 64", n, prepared)
	}
}
