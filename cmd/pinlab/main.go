// Command pinlab shows gRPC connection pinning on Kubernetes in an embedded
// mini-cluster and measures what each fix does. See `pinlab --help`.
package main

import (
	"os"

	"github.com/pinlab/pinlab/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
