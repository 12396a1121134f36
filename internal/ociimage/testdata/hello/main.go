// Command hello is the binary the ociimage tests put into an image: it
// prints one line naming its platform and arguments, so a test that runs
// the binary extracted from a pulled image sees that it got this program
// back, for the platform it asked for.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

func main() {
	fmt.Printf("hello from ociimage %s/%s args=%s\n", runtime.GOOS, runtime.GOARCH, strings.Join(os.Args[1:], ","))
}
