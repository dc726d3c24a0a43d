// Command capstan is OpenShift's cluster-management control plane in one
// binary; see `capstan --help`.
package main

import (
	"os"

	"github.com/capstan-dev/capstan/internal/cli"
)

func main() {
	os.Exit(cli.Run())
}
