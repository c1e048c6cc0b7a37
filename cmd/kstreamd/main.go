// Command kstreamd is the kstreamd daemon: it runs a stream-processing job
// described by a YAML pipeline file, with the built-in operator types. See
// package sdk for the commands, and for building a daemon of one's own with
// more operator types.
package main

import (
	"context"
	"io"
	"os"

	"github.com/kstreamd/kstreamd/sdk"
)

func main() { os.Exit(sdk.Main(sdk.NewRegistry())) }

// run is main without the process, for the tests: it returns the exit
// status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return sdk.Run(ctx, args, stdout, stderr, sdk.NewRegistry())
}
