package k8s

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// kubectlHint is what a machine without kubectl is told: the test fails
// rather than skip, as every test of the project does where it cannot
// decide.
const kubectlHint = "kubectl is not installed (looked in PATH and /usr/bin): install it " +
	"(Kubernetes' own apt repository, https://kubernetes.io/docs/tasks/tools/, or a release binary " +
	"in PATH) to validate deploy/k8s; no cluster is needed"

// kubectl finds the kubectl binary.
func kubectl(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	if st, err := os.Stat("/usr/bin/kubectl"); err == nil && st.Mode().IsRegular() {
		return "/usr/bin/kubectl"
	}
	t.Fatal(kubectlHint)
	return ""
}

// fakeAPIServer answers the discovery requests of kubectl with the three
// groups the manifests use, 404 to every read of an object (nothing
// exists), and 405 to any write: a client dry run sends none, and one
// that did would fail the test.
func fakeAPIServer(t *testing.T) (*httptest.Server, *[]string) {
	t.Helper()
	type res struct {
		Name         string   `json:"name"`
		SingularName string   `json:"singularName"`
		Namespaced   bool     `json:"namespaced"`
		Kind         string   `json:"kind"`
		Verbs        []string `json:"verbs"`
	}
	verbs := []string{"create", "delete", "get", "list", "patch", "update", "watch"}
	lists := map[string][]res{
		"/api/v1": {
			{"namespaces", "namespace", false, "Namespace", verbs},
			{"services", "service", true, "Service", verbs},
			{"secrets", "secret", true, "Secret", verbs},
		},
		"/apis/apps/v1":   {{"deployments", "deployment", true, "Deployment", verbs}},
		"/apis/policy/v1": {{"poddisruptionbudgets", "poddisruptionbudget", true, "PodDisruptionBudget", verbs}},
	}
	group := func(name string) map[string]any {
		gv := map[string]string{"groupVersion": name + "/v1", "version": "v1"}
		return map[string]any{"name": name, "versions": []any{gv}, "preferredVersion": gv}
	}
	var writes []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodGet {
			writes = append(writes, r.Method+" "+r.URL.Path)
			w.WriteHeader(http.StatusMethodNotAllowed)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"MethodNotAllowed","code":405}`)
			return
		}
		var body any
		switch p := r.URL.Path; {
		case p == "/api":
			body = map[string]any{"kind": "APIVersions", "versions": []string{"v1"},
				"serverAddressByClientCIDRs": []any{map[string]string{"clientCIDR": "0.0.0.0/0", "serverAddress": r.Host}}}
		case p == "/apis":
			body = map[string]any{"kind": "APIGroupList", "apiVersion": "v1", "groups": []any{group("apps"), group("policy")}}
		case lists[p] != nil:
			body = map[string]any{"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": strings.TrimPrefix(strings.TrimPrefix(p, "/apis/"), "/api/"), "resources": lists[p]}
		default:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404,"message":"%s not found"}`, p)
			return
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	return srv, &writes
}

// TestKubectlDryRun: `kubectl apply --dry-run=client --validate=false -f .`
// decodes every manifest and maps each kind, against a stand-in API
// server of the test's (a client dry run still asks the server which
// kinds exist and whether each object does), with a kubeconfig and HOME
// in the test's temp dir, so that no cluster or user configuration is
// read.
func TestKubectlDryRun(t *testing.T) {
	bin := kubectl(t)
	srv, writes := fakeAPIServer(t)
	home := t.TempDir()
	kubeconfig := filepath.Join(home, "kubeconfig")
	conf := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: %q}}]
users: [{name: fake, user: {token: not-a-secret}}]
contexts: [{name: fake, context: {cluster: fake, user: fake}}]
current-context: fake
`, srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "apply", "--dry-run=client", "--validate=false", "--request-timeout=30s", "-f", ".")
	cmd.Env = []string{"HOME=" + home, "KUBECONFIG=" + kubeconfig, "PATH=/usr/bin:/bin"}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("kubectl apply --dry-run=client did not end within 2 minutes\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=client --validate=false -f deploy/k8s: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for _, want := range []string{
		"namespace/rljail created (dry run)",
		"deployment.apps/rljail created (dry run)",
		"service/rljail created (dry run)",
		"poddisruptionbudget.policy/rljail created (dry run)",
	} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("kubectl's output lacks %q:\n%s\n%s", want, stdout.String(), stderr.String())
		}
	}
	if len(*writes) > 0 {
		t.Errorf("kubectl's client dry run sent writes: %q", *writes)
	}
}

// manifests decodes every YAML document of the directory, by kind.
func manifests(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	byKind := map[string]map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			kind, _ := doc["kind"].(string)
			if _, dup := byKind[kind]; dup {
				t.Fatalf("%s: a second %s", f, kind)
			}
			byKind[kind] = doc
		}
	}
	return byKind
}

// get reads a dotted path of a decoded document ("spec.template.spec").
func get(v any, path string) any {
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// TestPodSecurity holds the Deployment to the settings docs/deploy.md
// names: never privileged, a non-root user, no privilege escalation, no
// capabilities, the pod user namespace, the unmasked /proc, the seccomp
// and AppArmor choices, the probes, the limits, the token from a Secret,
// a grace above the drain; the Service and the budget select its pods.
func TestPodSecurity(t *testing.T) {
	m := manifests(t)
	for _, kind := range []string{"Namespace", "Deployment", "Service", "PodDisruptionBudget"} {
		if m[kind] == nil {
			t.Fatalf("no %s in deploy/k8s", kind)
		}
	}
	d := m["Deployment"]
	pod := get(d, "spec.template.spec")
	containers, _ := get(pod, "containers").([]any)
	if len(containers) != 1 {
		t.Fatalf("the pod has %d containers, want 1", len(containers))
	}
	c := containers[0]
	args := []string{}
	for _, a := range get(c, "args").([]any) {
		args = append(args, fmt.Sprint(a))
	}
	for _, tc := range []struct {
		what string
		v    any
		want any
	}{
		{"pod hostUsers", get(pod, "hostUsers"), false},
		{"pod securityContext.runAsNonRoot", get(pod, "securityContext.runAsNonRoot"), true},
		{"pod securityContext.seccompProfile.type", get(pod, "securityContext.seccompProfile.type"), "Unconfined"},
		{"pod securityContext.appArmorProfile.type", get(pod, "securityContext.appArmorProfile.type"), "Unconfined"},
		{"pod automountServiceAccountToken", get(pod, "automountServiceAccountToken"), false},
		{"pod hostNetwork", get(pod, "hostNetwork"), nil},
		{"pod hostPID", get(pod, "hostPID"), nil},
		{"pod hostIPC", get(pod, "hostIPC"), nil},
		{"container securityContext.privileged", get(c, "securityContext.privileged"), false},
		{"container securityContext.allowPrivilegeEscalation", get(c, "securityContext.allowPrivilegeEscalation"), false},
		{"container securityContext.procMount", get(c, "securityContext.procMount"), "Unmasked"},
		{"container securityContext.readOnlyRootFilesystem", get(c, "securityContext.readOnlyRootFilesystem"), true},
		{"container securityContext.capabilities.add", get(c, "securityContext.capabilities.add"), nil},
		{"container securityContext.runAsUser", get(c, "securityContext.runAsUser"), nil}, // the pod's, not overridden
		{"readinessProbe.httpGet.path", get(c, "readinessProbe.httpGet.path"), "/readyz"},
		{"livenessProbe.httpGet.path", get(c, "livenessProbe.httpGet.path"), "/healthz"},
	} {
		if fmt.Sprint(tc.v) != fmt.Sprint(tc.want) {
			t.Errorf("%s is %v, want %v", tc.what, tc.v, tc.want)
		}
	}
	if uid, _ := get(pod, "securityContext.runAsUser").(int); uid == 0 {
		t.Errorf("pod securityContext.runAsUser is %v, want a user other than root", get(pod, "securityContext.runAsUser"))
	}
	if drop, _ := get(c, "securityContext.capabilities.drop").([]any); !slices.Contains(drop, any("ALL")) {
		t.Errorf("container capabilities.drop is %v, want ALL", drop)
	}
	for _, r := range []string{"requests.cpu", "requests.memory", "limits.cpu", "limits.memory"} {
		if get(c, "resources."+r) == nil {
			t.Errorf("container resources.%s is missing", r)
		}
	}
	// TCP with the token from the Secret's volume.
	if !slices.Contains(args, "--listen=tcp:0.0.0.0:8080") || slices.Contains(args, "--insecure-no-token") {
		t.Errorf("serve's args %q: want --listen=tcp:0.0.0.0:8080 and no --insecure-no-token", args)
	}
	tokenDir := ""
	for _, vm := range get(c, "volumeMounts").([]any) {
		if get(vm, "name") == "token" {
			tokenDir, _ = get(vm, "mountPath").(string)
			if get(vm, "readOnly") != true {
				t.Errorf("the token's volumeMount is not readOnly")
			}
		}
	}
	if tokenDir == "" || !slices.Contains(args, "--token-file="+tokenDir+"/token") {
		t.Errorf("serve's args %q do not read the token from the token volume (%q)", args, tokenDir)
	}
	secretName := ""
	for _, v := range get(pod, "volumes").([]any) {
		if get(v, "name") == "token" {
			secretName, _ = get(v, "secret.secretName").(string)
		}
	}
	if secretName != "rljail-token" {
		t.Errorf("the token volume is from secret %q, want rljail-token", secretName)
	}
	// The pod's grace outlasts the drain's.
	grace := 30 * time.Second
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--drain-grace="); ok {
			var err error
			if grace, err = time.ParseDuration(v); err != nil {
				t.Fatalf("--drain-grace=%s: %v", v, err)
			}
		}
	}
	if tg, _ := get(pod, "terminationGracePeriodSeconds").(int); time.Duration(tg)*time.Second < grace+10*time.Second {
		t.Errorf("terminationGracePeriodSeconds %d is not above --drain-grace %v and the 10 s to answer killed runs", tg, grace)
	}
	// The Service and the budget select the Deployment's pods.
	labels, _ := get(d, "spec.template.metadata.labels").(map[string]any)
	for _, sel := range []struct {
		what string
		v    any
	}{
		{"Deployment spec.selector.matchLabels", get(d, "spec.selector.matchLabels")},
		{"Service spec.selector", get(m["Service"], "spec.selector")},
		{"PodDisruptionBudget spec.selector.matchLabels", get(m["PodDisruptionBudget"], "spec.selector.matchLabels")},
	} {
		sm, _ := sel.v.(map[string]any)
		if len(sm) == 0 {
			t.Errorf("%s is empty", sel.what)
		}
		for k, v := range sm {
			if labels[k] != v {
				t.Errorf("%s %s=%v does not match the pod's labels %v", sel.what, k, v, labels)
			}
		}
	}
	for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget"} {
		if ns := get(m[kind], "metadata.namespace"); ns != get(m["Namespace"], "metadata.name") {
			t.Errorf("%s is in namespace %v, want the Namespace's %v", kind, ns, get(m["Namespace"], "metadata.name"))
		}
	}
	// docs/deploy.md explains every setting named here.
	doc, err := os.ReadFile("../../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"hostUsers", "runAsNonRoot", "seccompProfile", "appArmorProfile", "procMount", "allowPrivilegeEscalation", "capabilities", "privileged", "readOnlyRootFilesystem", "/readyz", "/healthz", "PodDisruptionBudget", "session"} {
		if !bytes.Contains(doc, []byte(name)) {
			t.Errorf("docs/deploy.md does not explain %s", name)
		}
	}
}
