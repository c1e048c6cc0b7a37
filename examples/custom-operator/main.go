// Command kstreamd-custom is kstreamd with one operator type of its own,
// session_total (sessiontotal.go): the same commands, flags, HTTP API and
// metrics as kstreamd, and pipelines that may name session_total next to
// the built-in types.
//
//	go build -o kstreamd-custom .
//	./kstreamd-custom run --config pipeline.yaml
package main

import (
	"fmt"
	"os"

	"github.com/kstreamd/kstreamd/sdk"
)

func main() {
	reg := sdk.NewRegistry() // the built-in operator types
	if err := reg.Register(sessionTotalFactory()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(sdk.Main(reg))
}
