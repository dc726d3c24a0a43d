// Command clidocs writes capstan's command reference (docs/cli/) from
// its commands; the cli package's tests fail when it is out of date.
package main

import (
	"fmt"
	"os"

	"github.com/capstan-dev/capstan/internal/cli"
)

func main() {
	// The defaults the reference shows are those of a fresh shell.
	os.Unsetenv("CAPSTAN_DATA_DIR")
	if err := cli.WriteReference(cli.ReferenceDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
