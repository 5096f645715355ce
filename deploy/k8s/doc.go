// Package k8s holds the Kubernetes manifests of rljail serve (a
// Namespace, a Deployment, a Service, a PodDisruptionBudget; applied with
// `kubectl apply -f deploy/k8s/`, explained in docs/deploy.md). Its tests,
// part of `make test`, have kubectl itself decode and map every manifest
// (a client dry run against a stand-in API server that answers discovery
// only) and hold the pod's security settings to what docs/deploy.md says.
package k8s
