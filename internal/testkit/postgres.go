package testkit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a throw-away PostgreSQL cluster a test started with
// StartPostgres: initdb under the test's temporary directory, the server
// on a free loopback port (and a Unix socket in the same directory), trust
// authentication for the superuser postgres, max_prepared_transactions=64
// (two-phase commit) and fsync off. It is stopped when the test ends.
type Postgres struct {
	// Host and Port are the server's loopback address.
	Host string
	Port int
	// Dir is the cluster's data directory.
	Dir string
}

// DSN returns the connection URL of database db as the superuser
// postgres (no password, sslmode=disable).
func (p *Postgres) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", net.JoinHostPort(p.Host, strconv.Itoa(p.Port)), db)
}

// CreateDatabase creates database name and returns its DSN.
func (p *Postgres) CreateDatabase(t testing.TB, name string) string {
	t.Helper()
	p.Exec(t, "postgres", "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	return p.DSN(name)
}

// Exec runs each statement in database db, failing the test on an error.
func (p *Postgres) Exec(t testing.TB, db string, stmts ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.DSN(db))
	if err != nil {
		t.Fatalf("postgres: connect: %v", err)
	}
	defer conn.Close(context.Background())
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("postgres: %s: %v", s, err)
		}
	}
}

// PostgresBinDir returns the directory holding the PostgreSQL server
// binaries initdb and postgres: the one of initdb on PATH, else the newest
// /usr/lib/postgresql/<version>/bin (where Debian's postgresql puts them,
// off PATH). An error says how to install them.
func PostgresBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return versionOf(b) - versionOf(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("the PostgreSQL server binaries (initdb, postgres) are not installed: run scripts/test, which installs Debian's postgresql (or apt-get install postgresql)")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// StartPostgres starts a throw-away PostgreSQL cluster for the test (see
// Postgres) and stops it when the test ends. Missing binaries fail the test
// with the message to run scripts/test. Run as root, the cluster belongs
// to the postgres OS user Debian's package creates (initdb refuses root).
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	bin, err := PostgresBinDir()
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	dir, sock := filepath.Join(base, "data"), filepath.Join(base, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		t.Fatal(err)
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("postgres: running as root needs the postgres OS user (Debian's postgresql creates it; run scripts/test): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		// The postgres user must reach base through the test's temporary
		// directories, and own what it writes.
		for d := base; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o711); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(base, uid, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(sock, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(bin, name), args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
		c.Env = append(os.Environ(), "LC_ALL=C")
		return c
	}
	if out, err := run("initdb", "-D", dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("postgres: initdb: %v\n%s", err, out)
	}
	addr := FreeAddr(t)
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	logFile, err := os.Create(filepath.Join(base, "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	srv := run("postgres", "-D", dir, "-p", portText, "-k", sock, "-c", "listen_addresses=127.0.0.1",
		"-c", "max_prepared_transactions=64", "-c", "max_connections=200", "-c", "fsync=off",
		"-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	srv.Stdout, srv.Stderr = logFile, logFile
	if err := srv.Start(); err != nil {
		t.Fatalf("postgres: start: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	t.Cleanup(func() {
		_ = srv.Process.Signal(syscall.SIGINT) // fast shutdown: ends every session
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = srv.Process.Kill()
			<-exited
		}
		logFile.Close()
	})
	p := &Postgres{Host: "127.0.0.1", Port: port, Dir: dir}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, p.DSN("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return p
		}
		select {
		case err := <-exited:
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("postgres: the server exited: %v\n%s", err, log)
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			t.Fatalf("postgres: not accepting connections within 30s: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
