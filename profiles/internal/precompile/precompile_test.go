package precompile

import (
	"bytes"
	"os"
	"testing"
)

func TestPrecompiledIsCurrent(t *testing.T) {
	want, err := Source()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../precompiled.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("profiles/precompiled.go is stale: run `make generate`")
	}
}
