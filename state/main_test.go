package state

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them.
func TestMain(m *testing.M) {
	if spec := os.Getenv(olderRestoreEnv); spec != "" {
		runOlderRestore(spec) // TestRemoteDeltaOlderBinaryRefuses's child process
	}
	goleak.VerifyTestMain(m)
}
