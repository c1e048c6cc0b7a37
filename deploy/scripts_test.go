package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestCommandInstallsTools runs the README's test command
// (scripts/test) and .ci/run in a sandbox whose PATH has none of kcat,
// docker-compose, prometheus and promtool, with go, apt-get, id and sudo
// replaced by recorders: the command installs the missing tools through
// apt-get (as root, or with sudo), then vets and tests; without root or
// sudo it stops naming what to install.
func TestTestCommandInstallsTools(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		uid    string
		sudo   bool
		code   int
		log    []string
		stderr string
	}{
		{name: "root", script: "scripts/test", uid: "0", log: []string{
			"apt-get update", "apt-get install -y --no-install-recommends kcat docker-compose prometheus postgresql",
			"go version", "go vet ./...", "go test -race -count=1 -timeout 45m ./...",
		}},
		{name: ".ci/run calls it", script: ".ci/run", uid: "0", log: []string{
			"apt-get update", "apt-get install -y --no-install-recommends kcat docker-compose prometheus postgresql",
			"go version", "go vet ./...", "go test -race -count=1 -timeout 45m ./...",
		}},
		{name: "sudo", script: "scripts/test", uid: "1000", sudo: true, log: []string{
			"sudo apt-get update", "apt-get update",
			"sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends kcat docker-compose prometheus postgresql", "apt-get install -y --no-install-recommends kcat docker-compose prometheus postgresql",
			"go version", "go vet ./...", "go test -race -count=1 -timeout 45m ./...",
		}},
		{name: "neither root nor sudo", script: "scripts/test", uid: "1000", code: 1,
			stderr: "scripts/test: kcat docker-compose prometheus postgresql missing, and neither root nor sudo to install them: apt-get install --no-install-recommends kcat docker-compose prometheus postgresql\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			logFile := filepath.Join(t.TempDir(), "log")
			for _, tool := range []string{"bash", "dirname", "env"} {
				p, err := exec.LookPath(tool)
				if err != nil {
					t.Skipf("%s not found: %v", tool, err)
				}
				if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
					t.Fatal(err)
				}
			}
			fake := func(name, body string) {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			fake("go", `echo "go $*" >> "$LOG"`)
			fake("apt-get", `echo "apt-get $*" >> "$LOG"`)
			fake("id", `echo `+tc.uid)
			if tc.sudo {
				fake("sudo", `echo "sudo $*" >> "$LOG"; exec "$@"`)
			}
			cmd := exec.Command(filepath.Join(bin, "bash"), repoFile(tc.script))
			cmd.Env = []string{"PATH=" + bin, "LOG=" + logFile, "FUZZTIME=0", "HOME=" + t.TempDir(), "POSTGRES_LIB=" + t.TempDir()}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			b, _ := os.ReadFile(logFile)
			got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
			if len(b) == 0 {
				got = nil
			}
			if code != tc.code || strings.Join(got, "\n") != strings.Join(tc.log, "\n") || (tc.stderr != "" && stderr.String() != tc.stderr) {
				t.Fatalf("bash %s: exit %d, commands\n%s\nstderr %q\nwant exit %d, commands\n%s\nstderr %q",
					tc.script, code, strings.Join(got, "\n"), stderr.String(), tc.code, strings.Join(tc.log, "\n"), tc.stderr)
			}
		})
	}
}
