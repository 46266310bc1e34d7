// Package apidocs holds Bookstore's machine-readable contracts, in the module at api/:
// an OpenAPI 3.1 document per HTTP service (openapi/<service>.yaml), the AsyncAPI 3.0
// document of the broker side (asyncapi.yaml) and a JSON Schema (2020-12) per event type
// and version and one for the CloudEvents envelope (schemas/). Embedded, each service
// serves its own document and the tests validate against the very files a reader sees;
// go:embed cannot reach a parent directory, hence a module of its own. Package apitest
// checks traffic and events against them.
package apidocs

import (
	"embed"
	"io/fs"
)

//go:embed openapi/*.yaml asyncapi.yaml schemas/*.json
var files embed.FS

// Services are the services with an HTTP API, each with its document openapi/<name>.yaml.
var Services = []string{"ordering", "inventory", "notification", "emailprovider"}

// Files is every document: openapi/<service>.yaml, asyncapi.yaml, schemas/<name>.json.
func Files() fs.FS { return files }

// OpenAPI returns the OpenAPI document of a service named in Services; it panics for
// another name, which is a programming error.
func OpenAPI(service string) []byte {
	b, err := files.ReadFile("openapi/" + service + ".yaml")
	if err != nil {
		panic("apidocs: no OpenAPI document for " + service)
	}
	return b
}

// AsyncAPI returns the AsyncAPI document.
func AsyncAPI() []byte {
	b, err := files.ReadFile("asyncapi.yaml")
	if err != nil {
		panic(err)
	}
	return b
}
