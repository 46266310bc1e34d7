// Package k8s checks the Kubernetes manifests in deploy/k8s without a cluster: it builds
// the kustomize base's two overlays (local, production) with the kustomize Go API,
// decodes every object strictly into the k8s.io/api types, checks the operators' custom
// resources against their CRD schemas (testdata/crds), and checks the cross-references
// against docs/contracts.md, the services' --help, deploy/Dockerfile and
// docker-compose.yml. docs/kubernetes.md walks through the manifests.
package k8s

// The overlays' generated files (internal/overlays.Files), `make generate-k8s`:
//go:generate go run ./internal/genoverlays
