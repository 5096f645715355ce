package session

import (
	"crypto/rand"
	_ "embed" // the worker's source
	"encoding/hex"
	"encoding/json"
	"strconv"

	"github.com/rljail/rljail/bridge"
)

// workerSource is the worker that runs in the jail (worker.py). It goes
// into the jail as the payload's argument (python3 -I -S -c SOURCE): it is
// part of the binary, read-only for the jail (the config is init's), and
// never a file on the host, in the rootfs or in the workspace, so that
// nothing the jail or an earlier jail could write changes it and nothing
// is left behind.
//
//go:embed worker.py
var workerSource string

// workerCommand is the jail's command for the worker. -I: no environment
// variable, user site or script directory changes what Python imports;
// -S: no site module either. The runner's tools (checked identifiers,
// bridge.ParseTool) follow as one JSON argument: the worker defines a
// function for each; then the most bytes one call's line may be
// (Config.MaxCallBytes), so that the worker refuses a larger call before
// it sends it (the supervisor refuses it all the same).
func workerCommand(python string, tools []bridge.Tool, maxCallBytes int) []string {
	type tool struct {
		Name   string   `json:"name"`
		Params []string `json:"params"`
	}
	list := []tool{}
	for _, t := range tools {
		list = append(list, tool{t.Name, append([]string{}, t.Params...)})
	}
	b, _ := json.Marshal(list)
	return []string{python, "-I", "-S", "-c", workerSource, string(b), strconv.Itoa(maxCallBytes)}
}

// newToken is a fresh 128-bit token for one request to the worker
// (crypto/rand): the reply that carries it is the only one accepted, and
// a cell cannot guess a later request's.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// endMarker is what the worker writes to descriptors 1 and 2 when a cell
// ends (worker.py, _mark).
func endMarker(token string) []byte {
	return []byte("\x00rljail-end:" + token + "\x00")
}
