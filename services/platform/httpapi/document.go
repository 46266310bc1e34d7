package httpapi

import (
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
)

// DocumentPath is where every service serves its OpenAPI document.
const DocumentPath = "/openapi.yaml"

// Document mounts GET /openapi.yaml, answering doc (the service's OpenAPI document, from
// package api) as application/yaml. A browser on another origin may read it (Swagger UI
// on its own port): it is public, and holds nothing the API would not tell anyway.
func Document(r chi.Router, doc []byte) {
	r.Method(http.MethodGet, DocumentPath, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Header().Set("Content-Length", strconv.Itoa(len(doc)))
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(doc)
	}))
}
