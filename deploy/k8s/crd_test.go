package k8s

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The operators' CRDs, copied from their Go modules (testdata/crds/README.md says which
// version of which module). A custom resource in an overlay is checked against its CRD's
// openAPIV3Schema by validate, a structural check of the schema's types, required fields,
// properties (an unknown field is refused, as the API server's strict field validation
// refuses it), additionalProperties, items, enum and minimum/maximum. It does not run the
// schemas' CEL rules (x-kubernetes-validations) or patterns.

// crdKey is a custom resource's group/version and kind, as apiVersion and kind spell it.
type crdKey struct{ apiVersion, kind string }

type crd struct {
	Spec struct {
		Group string `json:"group"`
		Names struct {
			Kind string `json:"kind"`
		} `json:"names"`
		Versions []struct {
			Name   string `json:"name"`
			Served bool   `json:"served"`
			Schema struct {
				OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
			} `json:"schema"`
		} `json:"versions"`
	} `json:"spec"`
}

// loadCRDs reads every CRD in testdata/crds: its served versions' schemas by apiVersion
// and kind.
func loadCRDs(t testing.TB) map[crdKey]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "crds", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in testdata/crds: %v", err)
	}
	schemas := map[crdKey]map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c crd
		if err := yaml.Unmarshal(b, &c); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, v := range c.Spec.Versions {
			if !v.Served || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			schemas[crdKey{c.Spec.Group + "/" + v.Name, c.Spec.Names.Kind}] = v.Schema.OpenAPIV3Schema
		}
	}
	return schemas
}

// decodeJSON decodes with json.Number, so integers and numbers stay apart.
func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}

// validate checks v against an OpenAPI v3 schema as a CRD holds it, and returns every
// violation with its path.
func validate(schema map[string]any, v any, path string) []string {
	var errs []string
	fail := func(format string, args ...any) {
		errs = append(errs, path+": "+fmt.Sprintf(format, args...))
	}
	if v == nil {
		if n, _ := schema["nullable"].(bool); !n {
			fail("null")
		}
		return errs
	}
	if b, _ := schema["x-kubernetes-int-or-string"].(bool); b {
		switch x := v.(type) {
		case string:
		case json.Number:
			if _, err := x.Int64(); err != nil {
				fail("want an integer or a string, have %v", x)
			}
		default:
			fail("want an integer or a string, have %T", v)
		}
		return errs
	}
	typ, _ := schema["type"].(string)
	switch typ {
	case "object":
		m, ok := v.(map[string]any)
		if !ok {
			return append(errs, fmt.Sprintf("%s: want an object, have %T", path, v))
		}
		if req, ok := schema["required"].([]any); ok {
			for _, r := range req {
				if _, ok := m[r.(string)]; !ok {
					fail("required field %q missing", r)
				}
			}
		}
		props, _ := schema["properties"].(map[string]any)
		additional, _ := schema["additionalProperties"].(map[string]any)
		anyAdditional, _ := schema["additionalProperties"].(bool)
		preserve, _ := schema["x-kubernetes-preserve-unknown-fields"].(bool)
		for _, k := range sortedKeys(m) {
			if p, ok := props[k].(map[string]any); ok {
				errs = append(errs, validate(p, m[k], path+"."+k)...)
			} else if additional != nil {
				errs = append(errs, validate(additional, m[k], path+"."+k)...)
			} else if !preserve && !anyAdditional && !isMetadata(path) {
				// A structural schema keeps only the fields it names: the API server
				// drops any other (and refuses it under strict field validation).
				fail("unknown field %q", k)
			}
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return append(errs, fmt.Sprintf("%s: want an array, have %T", path, v))
		}
		if items, ok := schema["items"].(map[string]any); ok {
			for i, x := range a {
				errs = append(errs, validate(items, x, fmt.Sprintf("%s[%d]", path, i))...)
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			fail("want a string, have %T %v", v, v)
		}
	case "integer":
		n, ok := v.(json.Number)
		if _, err := n.Int64(); !ok || err != nil {
			fail("want an integer, have %T %v", v, v)
		}
	case "number":
		if _, ok := v.(json.Number); !ok {
			fail("want a number, have %T %v", v, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			fail("want a boolean, have %T %v", v, v)
		}
	}
	if enum, ok := schema["enum"].([]any); ok {
		if !slices.ContainsFunc(enum, func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) }) {
			fail("%v is not one of %v", v, enum)
		}
	}
	if n, ok := v.(json.Number); ok {
		f, _ := n.Float64()
		if min, ok := schema["minimum"].(float64); ok && f < min {
			fail("%v below the minimum %v", n, min)
		}
		if max, ok := schema["maximum"].(float64); ok && f > max {
			fail("%v above the maximum %v", n, max)
		}
	}
	return errs
}

// isMetadata: a CRD's schema gives metadata as a bare object; the API server checks it
// as ObjectMeta, which the strict decode of k8s_test.go does.
func isMetadata(path string) bool { return path == ".metadata" }

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// validateCR checks a custom resource (JSON) against the CRD of its apiVersion and kind.
func validateCR(schemas map[crdKey]map[string]any, apiVersion, kind string, obj []byte) []string {
	schema, ok := schemas[crdKey{apiVersion, kind}]
	if !ok {
		return []string{fmt.Sprintf("no CRD in testdata/crds for %s %s", apiVersion, kind)}
	}
	v, err := decodeJSON(obj)
	if err != nil {
		return []string{err.Error()}
	}
	return validate(schema, v, "")
}

// The validator refuses what the API server would: each of these breaks the CRD once.
func TestCRDValidatorRefusesWrongResources(t *testing.T) {
	schemas := loadCRDs(t)
	for _, c := range []struct {
		name, yaml, want string
	}{
		{"a string for an integer", `
apiVersion: rabbitmq.com/v1beta1
kind: RabbitmqCluster
metadata: {name: rabbitmq}
spec: {replicas: "three"}`, ".spec.replicas: want an integer"},
		{"an unknown field", `
apiVersion: rabbitmq.com/v1beta1
kind: RabbitmqCluster
metadata: {name: rabbitmq}
spec: {replica: 3}`, `.spec: unknown field "replica"`},
		{"a required field missing", `
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: inventory}
spec: {scaleTargetRef: {name: inventory}}`, `.spec: required field "triggers" missing`},
		{"a value outside the enum", `
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: inventory}
spec:
  scaleTargetRef: {name: inventory}
  triggers: [{type: rabbitmq, metadata: {queueName: q}, authenticationRef: {name: a, kind: Secret}}]`, ".spec.triggers[0].authenticationRef.kind: Secret is not one of"},
		{"a misspelt nested field", `
apiVersion: postgresql.cnpg.io/v1
kind: Cluster
metadata: {name: ordering-db}
spec: {instances: 2, bootstrap: {initdb: {database: ordering, ownr: ordering}}}`, `.spec.bootstrap.initdb: unknown field "ownr"`},
		{"a misspelt field of a Queue", `
apiVersion: rabbitmq.com/v1beta1
kind: Queue
metadata: {name: q}
spec: {name: q, durabel: true, rabbitmqClusterReference: {name: rabbitmq}}`, `.spec: unknown field "durabel"`},
		{"a Queue's arguments as a list", `
apiVersion: rabbitmq.com/v1beta1
kind: Queue
metadata: {name: q}
spec: {name: q, arguments: [x-delivery-limit], rabbitmqClusterReference: {name: rabbitmq}}`, ".spec.arguments: want an object"},
		{"an Exchange with no cluster", `
apiVersion: rabbitmq.com/v1beta1
kind: Exchange
metadata: {name: e}
spec: {name: e, type: topic}`, `.spec: required field "rabbitmqClusterReference" missing`},
		{"a Binding to a destination type that is not one", `
apiVersion: rabbitmq.com/v1beta1
kind: Binding
metadata: {name: b}
spec: {source: e, destination: q, destinationType: queues, rabbitmqClusterReference: {name: rabbitmq}}`, ".spec.destinationType: queues is not one of"},
		{"a kind with no CRD", `
apiVersion: rabbitmq.com/v1beta1
kind: Shovel
metadata: {name: s}`, "no CRD in testdata/crds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j, err := yaml.YAMLToJSON([]byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			var tm struct{ APIVersion, Kind string }
			if err := json.Unmarshal(j, &tm); err != nil {
				t.Fatal(err)
			}
			errs := validateCR(schemas, tm.APIVersion, tm.Kind, j)
			if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, c.want) }) {
				t.Errorf("want an error containing %q, have %q", c.want, errs)
			}
		})
	}
}
