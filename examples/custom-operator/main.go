// Command kstreamd-custom is kstreamd with operator types of its own,
// session_total (sessiontotal.go) and the two-input order_shipment
// (ordershipment.go), and a format of its own, csv (csvformat.go): the
// same commands, flags, HTTP API and metrics as kstreamd, and pipelines
// that may name them next to the built-in types.
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
	for _, f := range []sdk.Factory{sessionTotalFactory(), orderShipmentFactory()} {
		if err := reg.Register(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	if err := reg.RegisterFormat(csvFormatFactory()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(sdk.Main(reg))
}
