// Command rljail runs untrusted code, such as model-written Python, in a
// throwaway Linux jail. See README.md.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/rljail/rljail/jail"
)

func main() {
	if jail.IsInit() {
		jail.InitMain()
		return
	}
	spec := jail.Spec{
		Command: os.Args[1:],
		Rootfs:  os.Getenv("RLJAIL_ROOTFS"),
		Stdin:   os.Stdin,
		Stdout:  os.Stdout,
		Stderr:  os.Stderr,
	}
	if wd, err := os.Getwd(); err == nil {
		spec.Workspace = wd
	}
	res, err := jail.Run(context.Background(), spec)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rljail:", err)
	}
	os.Exit(res.ExitCode)
}
