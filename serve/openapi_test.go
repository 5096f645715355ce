package serve

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestOpenAPIMatchesServer holds docs/openapi.json and the server to each
// other: the spec's routes are the server's routes, every one answers,
// and each schema's properties are exactly the JSON fields of the Go type
// the handlers decode into or encode (so a field the server accepts but
// the spec lacks, or one the spec promises but the server refuses as
// unknown, fails here).
func TestOpenAPIMatchesServer(t *testing.T) {
	data, err := os.ReadFile("../docs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties           map[string]json.RawMessage `json:"properties"`
				AdditionalProperties *bool                      `json:"additionalProperties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("docs/openapi.json: %v", err)
	}
	s := New(Options{Runtimes: map[string]*Runtime{"python": {Name: "python", Dir: "/nonexistent", PythonVersion: "3.11.2"}}})
	var inSpec, inServer []string
	for p, methods := range spec.Paths {
		for m := range methods {
			inSpec = append(inSpec, strings.ToUpper(m)+" "+p)
		}
	}
	for _, rt := range s.routes() {
		inServer = append(inServer, rt.pattern)
	}
	sort.Strings(inSpec)
	sort.Strings(inServer)
	if !slices.Equal(inSpec, inServer) {
		t.Errorf("routes: the spec has %v, the server %v", inSpec, inServer)
	}
	h := s.Handler()
	for _, r := range inSpec {
		method, path, _ := strings.Cut(r, " ")
		req := httptest.NewRequest(method, path, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		// A session's route answers 404 for the literal id "{id}" itself,
		// in rljail's error shape; the router's own 404 is plain text.
		if strings.Contains(path, "{id}") && w.Code == http.StatusNotFound && strings.Contains(w.Body.String(), `"error":"no session`) {
			continue
		}
		if w.Code == http.StatusNotFound || w.Code == http.StatusMethodNotAllowed {
			t.Errorf("%s: %d", r, w.Code)
		}
	}
	types := map[string]any{
		"RunRequest": RunRequest{}, "RunResponse": RunResponse{}, "RunFile": RunFile{}, "RunLimits": RunLimits{}, "RunStream": RunStream{}, "RunFetched": RunFetched{},
		"RunCodeRequest": RunCodeRequest{}, "RunCodeResponse": RunCodeResponse{}, "CommandRunResult": CommandRunResult{},
		"PistonRequest": PistonRequest{}, "PistonFile": PistonFile{}, "PistonResponse": PistonResponse{}, "PistonStage": PistonStage{},
		"PistonRuntime": PistonRuntime{}, "ValidationError": validationError{},
		"SessionRequest": SessionRequest{}, "SessionLimits": SessionLimits{}, "SessionResponse": SessionResponse{},
		"SessionExecRequest": SessionExecRequest{}, "SessionSetRequest": SessionSetRequest{}, "SessionGetRequest": SessionGetRequest{},
		"SessionLoadContextRequest": SessionLoadContextRequest{}, "SessionFileRequest": SessionFileRequest{},
	}
	for name, v := range types {
		sch, ok := spec.Components.Schemas[name]
		if !ok {
			t.Errorf("the spec has no schema %s", name)
			continue
		}
		if strings.HasSuffix(name, "Request") || name == "RunFile" || name == "RunLimits" || name == "PistonFile" || name == "SessionLimits" {
			if sch.AdditionalProperties == nil || *sch.AdditionalProperties {
				t.Errorf("schema %s: a request schema must say additionalProperties: false (the server refuses unknown fields)", name)
			}
		}
		var specFields []string
		for f := range sch.Properties {
			specFields = append(specFields, f)
		}
		goFields := jsonFields(reflect.TypeOf(v))
		sort.Strings(specFields)
		if !slices.Equal(specFields, goFields) {
			t.Errorf("schema %s: the spec has %v, the Go type %v", name, specFields, goFields)
		}
	}
}

func jsonFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		tag := t.Field(i).Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}
