package apidocs_test

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v4"

	apidocs "github.com/bookstore-go/bookstore/api"
	"github.com/bookstore-go/bookstore/api/apitest"
)

// The lint of the documents (`make lint` runs these, and so does `make test`).

// TestOpenAPIDocumentsLoad loads each OpenAPI document with kin-openapi and validates it
// (formats and examples included), as every service test does before it checks traffic.
func TestOpenAPIDocumentsLoad(t *testing.T) {
	for _, svc := range apidocs.Services {
		doc, err := apitest.LoadOpenAPI(apidocs.OpenAPI(svc))
		if err != nil {
			t.Errorf("openapi/%s.yaml: %v", svc, err)
			continue
		}
		if doc.OpenAPI != "3.1.0" {
			t.Errorf("openapi/%s.yaml: openapi %q, want 3.1.0", svc, doc.OpenAPI)
		}
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				if op.OperationID == "" {
					t.Errorf("openapi/%s.yaml: %s %s has no operationId", svc, method, path)
				}
				for status, resp := range op.Responses.Map() {
					for mt := range resp.Value.Content {
						if status[0] >= '4' && mt != "application/problem+json" && path != "/readyz" {
							t.Errorf("openapi/%s.yaml: %s %s %s is %s; every error is application/problem+json", svc, method, path, status, mt)
						}
					}
				}
			}
		}
	}
	if _, err := apitest.Load(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenAPISharedPartsAreTheSame: the probes every service serves, and the schemas,
// parameters, headers and responses the four documents share, are one text in each.
func TestOpenAPISharedPartsAreTheSame(t *testing.T) {
	docs := map[string]map[string]any{}
	for _, svc := range apidocs.Services {
		var m map[string]any
		if err := yaml.Unmarshal(apidocs.OpenAPI(svc), &m); err != nil {
			t.Fatalf("openapi/%s.yaml: %v", svc, err)
		}
		docs[svc] = m
	}
	first := apidocs.Services[0]
	shared := map[string][]string{
		"paths":                 {"/healthz", "/readyz", "/metrics", "/openapi.yaml"},
		"components.schemas":    {"UUID", "Problem", "FieldError", "MalformedProblem", "ValidationProblem", "NotFoundProblem", "MisdirectedProblem", "CrossOriginProblem", "InternalProblem", "Readiness"},
		"components.parameters": {"IdempotencyKey", "Limit", "After"},
		"components.headers":    {"IdempotentReplayed", "NextLink"},
		"components.responses":  {"Malformed", "TooLarge", "UnsupportedMediaType", "Validation", "NotFound", "Misdirected", "CrossOrigin", "Internal"},
	}
	for section, names := range shared {
		for _, name := range names {
			want := lookup(docs[first], section, name)
			if want == nil {
				t.Errorf("openapi/%s.yaml: no %s.%s", first, section, name)
				continue
			}
			for _, svc := range apidocs.Services[1:] {
				if got := lookup(docs[svc], section, name); !reflect.DeepEqual(got, want) {
					t.Errorf("openapi/%s.yaml: %s.%s differs from openapi/%s.yaml's", svc, section, name, first)
				}
			}
		}
	}
}

// TestEveryOperationListsTheAnswersGivenBeforeIt: what httpapi answers before a request
// reaches its handler is in every operation it can answer: 421 misdirected (RequireHost,
// in front of every route) in each, and 403 cross-origin (NewRouter, for a bodyless
// request from another origin) in each that takes a body. A document without them fails
// the contract check of every probe that meets them.
func TestEveryOperationListsTheAnswersGivenBeforeIt(t *testing.T) {
	for _, svc := range apidocs.Services {
		doc, err := apitest.LoadOpenAPI(apidocs.OpenAPI(svc))
		if err != nil {
			t.Fatalf("openapi/%s.yaml: %v", svc, err)
		}
		for path, item := range doc.Paths.Map() {
			for method, op := range item.Operations() {
				if r := op.Responses.Status(421); r == nil || r.Ref != "#/components/responses/Misdirected" {
					t.Errorf("openapi/%s.yaml: %s %s has no '421': $ref: '#/components/responses/Misdirected'", svc, method, path)
				}
				switch method {
				case "POST", "PUT", "PATCH":
				default:
					continue
				}
				if r := op.Responses.Status(403); r == nil || !refersTo(r, "#/components/responses/CrossOrigin", "#/components/schemas/CrossOriginProblem") {
					t.Errorf("openapi/%s.yaml: %s %s has no '403' that can be cross-origin (#/components/responses/CrossOrigin)", svc, method, path)
				}
			}
		}
	}
}

// refersTo says whether a response is the response ref, or a problem whose schema is, or
// is one of (oneOf), the schema ref.
func refersTo(r *openapi3.ResponseRef, response, schema string) bool {
	if r.Ref == response {
		return true
	}
	mt := r.Value.Content.Get("application/problem+json")
	if mt == nil || mt.Schema == nil {
		return false
	}
	if mt.Schema.Ref == schema {
		return true
	}
	for _, s := range mt.Schema.Value.OneOf {
		if s.Ref == schema {
			return true
		}
	}
	return false
}

func lookup(m map[string]any, section, name string) any {
	var v any = m
	for _, k := range append(strings.Split(section, "."), name) {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// TestAsyncAPIDocument validates asyncapi.yaml against the official JSON Schema of
// AsyncAPI 3.0.0, resolves every $ref in it, and compiles every message payload as JSON
// Schema 2020-12 with the schemas it refers to.
func TestAsyncAPIDocument(t *testing.T) {
	var doc any
	if err := yaml.Unmarshal(apidocs.AsyncAPI(), &doc); err != nil {
		t.Fatalf("asyncapi.yaml: %v", err)
	}
	doc = normalize(doc)

	meta, err := os.ReadFile("testdata/asyncapi-3.0.0.json")
	if err != nil {
		t.Fatal(err)
	}
	metaDoc, err := jsonschema.UnmarshalJSON(bytes.NewReader(meta))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("asyncapi-3.0.0.json", metaDoc); err != nil {
		t.Fatal(err)
	}
	spec, err := c.Compile("asyncapi-3.0.0.json")
	if err != nil {
		t.Fatalf("the AsyncAPI 3.0.0 schema: %v", err)
	}
	if err := spec.Validate(doc); err != nil {
		t.Errorf("asyncapi.yaml is not a valid AsyncAPI 3.0.0 document: %v", err)
	}

	root := doc.(map[string]any)
	var refs []string
	collectRefs(doc, &refs)
	for _, ref := range refs {
		switch {
		case strings.HasPrefix(ref, "#/"):
			if resolve(root, ref) == nil {
				t.Errorf("asyncapi.yaml: $ref %s resolves to nothing", ref)
			}
		default:
			if _, err := fs.Stat(apidocs.Files(), ref); err != nil {
				t.Errorf("asyncapi.yaml: $ref %s: %v", ref, err)
			}
		}
	}

	comp, _, err := apitest.SchemaCompiler()
	if err != nil {
		t.Fatal(err)
	}
	messages := root["components"].(map[string]any)["messages"].(map[string]any)
	var types []string
	for key, m := range messages {
		msg := m.(map[string]any)
		payload := msg["payload"].(map[string]any)
		if f := payload["schemaFormat"]; f != "application/schema+json;version=2020-12" {
			t.Errorf("message %s: schemaFormat %v", key, f)
		}
		schema := rebase(payload["schema"])
		if err := comp.AddResource("mem://asyncapi/"+key, schema); err != nil {
			t.Fatalf("message %s: %v", key, err)
		}
		if _, err := comp.Compile("mem://asyncapi/" + key); err != nil {
			t.Errorf("message %s: payload does not compile as JSON Schema 2020-12: %v", key, err)
		}
		types = append(types, msg["name"].(string))
	}
	sort.Strings(types)
	var schemas []string
	entries, _ := fs.ReadDir(apidocs.Files(), "schemas")
	for _, e := range entries {
		if n := strings.TrimSuffix(e.Name(), ".json"); n != "cloudevent" && n != "line" {
			schemas = append(schemas, n)
		}
	}
	if !reflect.DeepEqual(types, schemas) {
		t.Errorf("asyncapi.yaml's messages %v, schemas/ has data schemas for %v", types, schemas)
	}
}

// normalize turns what the YAML decoder gives into what encoding/json would, for the
// JSON Schema validator.
func normalize(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		panic(err)
	}
	return out
}

func collectRefs(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			if s, ok := vv.(string); ok && k == "$ref" {
				*out = append(*out, s)
			}
			collectRefs(vv, out)
		}
	case []any:
		for _, vv := range x {
			collectRefs(vv, out)
		}
	}
}

func resolve(root map[string]any, ref string) any {
	var v any = root
	for _, k := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// rebase points a payload's file references (schemas/x.json) at the schemas' $ids.
func rebase(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, vv := range x {
			if s, ok := vv.(string); ok && k == "$ref" && strings.HasPrefix(s, "schemas/") {
				vv = apitest.SchemaBase + strings.TrimPrefix(s, "schemas/")
			}
			out[k] = rebase(vv)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, vv := range x {
			out[i] = rebase(vv)
		}
		return out
	}
	return v
}
