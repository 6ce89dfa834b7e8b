// Command echoargs prints its arguments, one a line: a binary for the
// package's build test.
package main

import (
	"fmt"
	"os"
)

func main() {
	for _, a := range os.Args[1:] {
		fmt.Println(a)
	}
}
