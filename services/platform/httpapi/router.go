package httpapi

import (
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// NewRouter returns the router every API is mapped on, which answers what chi answers by
// itself as problem+json: an unknown path is a 404; another method on a known path is a
// 405 with Allow; HEAD is served wherever GET is (RFC 9110); a POST, PUT or PATCH not
// declared application/json is a 415 before the handler reads it (one with no body at all
// passes, see requireJSONBody), since a browser sends
// text/plain, forms and multipart cross-site without a CORS preflight, and application/json
// only after one, to which no API here says yes.
func NewRouter() chi.Router {
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, req *http.Request) {
		WriteProblem(w, NewProblem(http.StatusNotFound, "not-found", "Not found",
			"no resource at "+Excerpt(req.URL.EscapedPath())))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		allowed := allowedMethods(r, req)
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		WriteProblem(w, NewProblem(http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed",
			Excerpt(req.Method)+" is not allowed on "+Excerpt(req.URL.EscapedPath())+"; allowed: "+strings.Join(allowed, ", ")))
	})
	r.Use(middleware.GetHead, requireJSONBody(r))
	return r
}

// methods are the ones an Allow header may name, in the order it names them.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods lists the methods the request's path has a route for; HEAD wherever GET.
func allowedMethods(routes chi.Routes, req *http.Request) []string {
	var allowed []string
	path := routePath(req)
	for _, m := range methods {
		if routes.Match(chi.NewRouteContext(), m, path) ||
			(m == http.MethodHead && routes.Match(chi.NewRouteContext(), http.MethodGet, path)) {
			allowed = append(allowed, m)
		}
	}
	return allowed
}

func routePath(req *http.Request) string {
	if req.URL.RawPath != "" {
		return req.URL.RawPath
	}
	return req.URL.Path
}

// requireJSONBody refuses, with a 415 problem, a request to a route that takes a body
// (POST, PUT, PATCH) that has one unless its Content-Type is application/json (or a +json
// type) in UTF-8 and it has no Content-Encoding other than identity; a request with no body passes, unless a browser says it comes from
// another origin (403). A request to no route passes on, to be answered 404 or 405 for
// what it is.
func requireJSONBody(routes chi.Routes) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			switch req.Method {
			case http.MethodPost, http.MethodPut, http.MethodPatch:
			default:
				next.ServeHTTP(w, req)
				return
			}
			if req.ContentLength == 0 {
				// No body (a chunked one has length -1): nothing to declare a type for.
				// The handler takes it where the body is optional (BodyOptional) and
				// answers 400 where one is required. But a browser sends a POST without
				// a body to another origin without asking first, as it does a form, so
				// one that says it comes from another origin is refused.
				if detail := crossOrigin(req); detail != "" && routes.Match(chi.NewRouteContext(), req.Method, routePath(req)) {
					WriteProblem(w, NewProblem(http.StatusForbidden, "cross-origin", "Cross-origin request", detail))
					return
				}
				next.ServeHTTP(w, req)
				return
			}
			field, detail := "Content-Type", jsonMediaType(req.Header.Values("Content-Type"))
			if detail == "" {
				field, detail = "Content-Encoding", identityCoding(req.Header.Values("Content-Encoding"))
			}
			if detail != "" && routes.Match(chi.NewRouteContext(), req.Method, routePath(req)) {
				p := NewProblem(http.StatusUnsupportedMediaType, "unsupported-media-type", "Unsupported media type", detail)
				p.Errors = []FieldError{{Field: field, Detail: detail}}
				WriteProblem(w, p)
				return
			}
			next.ServeHTTP(w, req)
		})
	}
}

// crossOrigin says why a request comes from a page of another origin, by what a browser
// adds to every request it sends (Sec-Fetch-Site) or to every cross-origin POST (Origin),
// or "" when it says nothing of the kind: curl, and the services' own clients, send
// neither.
func crossOrigin(req *http.Request) string {
	switch site := req.Header.Get("Sec-Fetch-Site"); site {
	case "cross-site", "same-site":
		return "Sec-Fetch-Site is " + site + "; a request without a body is taken only from the same origin"
	}
	origin := req.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	if u, err := url.Parse(origin); err != nil || u.Host != req.Host {
		return "Origin " + quoteHeader(origin) + " is another origin; a request without a body is taken only from the same origin"
	}
	return ""
}

// identityCoding says what is wrong with a request's Content-Encoding headers, or "" when
// they name no coding but identity: the APIs read a body as it is sent, so a body in
// gzip, or one labelled gzip and sent plain, would be read as other than what it is.
func identityCoding(values []string) string {
	for _, v := range values {
		for _, coding := range strings.Split(v, ",") {
			if c := strings.TrimSpace(coding); c != "" && !strings.EqualFold(c, "identity") {
				return "Content-Encoding " + quoteHeader(c) + " is not accepted; send the body as it is (identity)"
			}
		}
	}
	return ""
}

// jsonMediaType says what is wrong with a request's Content-Type headers for a JSON body,
// or "" when they declare one JSON body in UTF-8.
func jsonMediaType(values []string) string {
	if len(values) != 1 {
		return "the body must be declared with one Content-Type: application/json header"
	}
	mt, params, err := mime.ParseMediaType(values[0])
	switch {
	case err != nil:
		return "Content-Type " + quoteHeader(values[0]) + " is not a media type; want application/json"
	case mt != "application/json" && !(strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")):
		return "Content-Type " + quoteHeader(mt) + " is not accepted; want application/json"
	}
	for name, v := range params {
		if name != "charset" || !strings.EqualFold(v, "utf-8") {
			return "Content-Type parameter " + name + "=" + quoteHeader(v) + " is not accepted; JSON is UTF-8"
		}
	}
	return ""
}

// quoteHeader quotes a client's header value for a problem's detail: an Excerpt, escaped.
func quoteHeader(v string) string { return strconv.Quote(Excerpt(v)) }
