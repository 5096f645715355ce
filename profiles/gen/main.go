// Command gen compiles rljail's embedded profiles to BPF at build time and
// writes them as Go source (profiles/precompiled.go), so that a run with an
// embedded profile loads a ready program. The Makefile runs it before every
// build; profiles' tests fail when the file is stale.
package main

import (
	"flag"
	"log"
	"os"

	"github.com/rljail/rljail/profiles/internal/precompile"
)

func main() {
	out := flag.String("out", "precompiled.go", "file to write")
	flag.Parse()
	src, err := precompile.Source()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		log.Fatal(err)
	}
}
