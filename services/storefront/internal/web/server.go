// Package web is the storefront: one server-rendered page that lists the books, places an
// order with an Idempotency-Key, cancels it, and shows the order's journey through the
// system live, placement and cancellation, through the services' public HTTP APIs only. With demos on, a panel drives the
// mechanisms that already exist to break things on purpose.
package web

import (
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/bookstore-go/bookstore/services/platform/httpapi"
	"github.com/bookstore-go/bookstore/services/platform/telemetry"
)

//go:embed templates/*.html
var templates embed.FS

//go:embed static
var static embed.FS

var page = template.Must(template.ParseFS(templates, "templates/index.html"))

// Options configure the storefront.
type Options struct {
	URLs URLs
	// JaegerURL is Jaeger's UI as the browser reaches it (http://localhost:16686); empty:
	// no trace links.
	JaegerURL string
	// SourceURL prefixes a repository path to link the file that does a step.
	SourceURL string
	// Demos shows the break-it panel and allows its actions.
	Demos bool
	// Relay, with Demos, adds the panel's button that pauses the `ordering relay` process
	// (STOREFRONT_RELAY_PID); nil: the relay runs inside ordering's API, and the panel
	// says why there is no button.
	Relay *RelayFreezer
}

// Server is the storefront's HTTP handler.
type Server struct {
	api       *backend
	tel       *telemetry.Telemetry
	jaegerURL string
	sourceURL string
	demos     bool
	relay     *RelayFreezer
}

// NewServer returns the storefront's whole HTTP handler.
func NewServer(opts Options, tel *telemetry.Telemetry, ready ...httpapi.Check) http.Handler {
	s := &Server{
		api:       newBackend(opts.URLs, tel),
		tel:       tel,
		jaegerURL: strings.TrimRight(opts.JaegerURL, "/"),
		sourceURL: opts.SourceURL,
		demos:     opts.Demos,
		relay:     opts.Relay,
	}
	r := httpapi.NewRouter()
	r.Get("/", s.index)
	r.Get("/api/books", s.listBooks)
	r.Post("/api/orders", s.placeOrder)
	r.Get("/api/orders/{id}/journey", s.getJourney)
	r.Post("/api/orders/{id}/cancel", s.cancelOrder)
	r.Get("/api/demos/faults", s.getFaults)
	r.Put("/api/demos/faults", s.putFaults)
	r.Get("/api/demos/relay", s.getRelay)
	r.Post("/api/demos/relay/pause", s.pauseRelay)
	r.Handle("/static/*", http.StripPrefix("/static/", staticFiles()))
	httpapi.Probes(r, tel, ready...)
	return defended(httpapi.Instrument(tel, r))
}

// contentSecurityPolicy is the storefront's Content-Security-Policy: the page runs its
// own script and style files and talks to its own origin, nothing else. No inline script,
// style or handler attribute runs, so text a client wrote that reaches the page (an
// email address, a problem's detail) cannot become script even where escaping failed;
// and no other site may frame the page, where a hidden "Place order" click would be that
// site's (clickjacking). Keep the page to it: scripts in static/, no on...= attributes,
// no style= (TestThePageAllowsOnlyItsOwnScriptsAndNoFraming).
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// defended sets the headers every answer of the storefront carries: the policy above,
// nosniff (a browser takes a file for its declared type, never guesses script out of it)
// and X-Frame-Options for browsers that predate frame-ancestors.
func defended(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// staticFiles serves the files of static/ and nothing else: a directory, or a name that
// is none of them, is a 404 problem like any other path's, never a listing of what is
// there nor http.FileServer's text/plain 404.
func staticFiles() http.Handler {
	sub, _ := fs.Sub(static, "static")
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Path
		if st, err := fs.Stat(sub, name); !fs.ValidPath(name) || err != nil || st.IsDir() {
			httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusNotFound, "not-found", "Not found", "no such static file"))
			return
		}
		files.ServeHTTP(w, r)
	})
}

// pageData is what the template renders.
type pageData struct {
	Books []Book
	Error string
	// Key is the Idempotency-Key of the order this page would place: made when the page
	// is rendered, not when the form is sent, so a double click sends the same key twice
	// and ordering places one order.
	Key       string
	Demos     bool
	JaegerURL string
	SourceURL string
	// RelayPause is the length of the relay's pause ("15 s"); empty: no button.
	RelayPause string
}

func (s *Server) index(w http.ResponseWriter, r *http.Request) {
	data := pageData{Key: uuid.NewString(), Demos: s.demos, JaegerURL: s.jaegerURL, SourceURL: s.sourceURL}
	if s.relay != nil {
		data.RelayPause = seconds(s.relay.For)
	}
	books, err := s.api.books(r.Context())
	if err != nil {
		s.tel.Logger.ErrorContext(r.Context(), "list books failed", "err", err)
		data.Error = "inventory did not answer; the storefront's log says why" // not err: it names inventory's internal URL
	}
	data.Books = books
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := page.Execute(w, data); err != nil {
		s.tel.Logger.ErrorContext(r.Context(), "render page failed", "err", err)
	}
}

func (s *Server) listBooks(w http.ResponseWriter, r *http.Request) {
	books, err := s.api.books(r.Context())
	if err != nil {
		s.upstream(w, r, "list books", err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, books)
}

// orderRequest is what the page's form sends.
type orderRequest struct {
	Key           string `json:"key"`
	CustomerEmail string `json:"customer_email"`
	BookID        string `json:"book_id"`
	Quantity      int    `json:"quantity"`
}

// orderAnswer is the order placed, whether ordering replayed it (the same key again), and
// the key of the next order the page may place.
type orderAnswer struct {
	Order    Order  `json:"order"`
	Replayed bool   `json:"replayed"`
	NextKey  string `json:"next_key"`
}

func (s *Server) placeOrder(w http.ResponseWriter, r *http.Request) {
	var req orderRequest
	if _, problem := httpapi.Decode(r, &req); problem != nil {
		httpapi.WriteProblem(w, problem)
		return
	}
	if !httpapi.ValidIdempotencyKey(req.Key) {
		httpapi.WriteProblem(w, httpapi.Invalid(map[string]string{"key": "want 1 to 255 printable ASCII characters"}))
		return
	}
	order, replayed, err := s.api.placeOrder(r.Context(), req.Key, req.CustomerEmail, []Line{{BookID: req.BookID, Quantity: req.Quantity}})
	var se *statusError
	if errors.As(err, &se) && se.Status < 500 {
		// ordering's own problem (a bad email, a quantity out of range), passed on as is.
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(se.Status)
		_, _ = w.Write([]byte(se.Body))
		return
	}
	if err != nil {
		s.upstream(w, r, "place order", err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, orderAnswer{Order: order, Replayed: replayed, NextKey: uuid.NewString()})
}

func (s *Server) getJourney(w http.ResponseWriter, r *http.Request) {
	id, problem := httpapi.PathUUID(r, "id")
	if problem != nil {
		httpapi.WriteProblem(w, problem)
		return
	}
	j, err := s.journey(r.Context(), id.String())
	if errors.Is(err, errNotFound) {
		httpapi.NotFound(w, "order "+id.String())
		return
	}
	if err != nil {
		s.upstream(w, r, "read journey", err)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	httpapi.WriteJSON(w, http.StatusOK, j)
}

// cancelAnswer is the order after the cancellation, and whether ordering replayed it
// (the same cancellation again).
type cancelAnswer struct {
	Order    Order `json:"order"`
	Replayed bool  `json:"replayed"`
}

// cancelOrder cancels an order through ordering's public API. The page's body is an
// empty JSON object, as ordering's.
func (s *Server) cancelOrder(w http.ResponseWriter, r *http.Request) {
	id, problem := httpapi.PathUUID(r, "id")
	if problem != nil {
		httpapi.WriteProblem(w, problem)
		return
	}
	var req struct{}
	if _, problem := httpapi.Decode(r, &req); problem != nil {
		httpapi.WriteProblem(w, problem)
		return
	}
	order, replayed, err := s.api.cancelOrder(r.Context(), id.String())
	if errors.Is(err, errNotFound) {
		httpapi.NotFound(w, "order "+id.String())
		return
	}
	var se *statusError
	if errors.As(err, &se) && se.Status < 500 {
		// ordering's own problem (a rejected or already cancelled order), passed on as is.
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(se.Status)
		_, _ = w.Write([]byte(se.Body))
		return
	}
	if err != nil {
		s.upstream(w, r, "cancel order", err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, cancelAnswer{Order: order, Replayed: replayed})
}

// demosOff answers a demo action while the panel is off.
func (s *Server) demosOff(w http.ResponseWriter) bool {
	if s.demos {
		return false
	}
	httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusForbidden, "admin-disabled", "Demos disabled",
		"start the storefront with STOREFRONT_DEMOS=1 to break things on purpose"))
	return true
}

func (s *Server) getFaults(w http.ResponseWriter, r *http.Request) {
	if s.demosOff(w) {
		return
	}
	f, err := s.api.faults(r.Context())
	if err != nil {
		s.upstream(w, r, "read provider faults", err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, f)
}

// faultsRequest switches the provider's ambiguous answers on or off; its other faults
// are kept as they are.
type faultsRequest struct {
	Ambiguous bool `json:"ambiguous"`
}

func (s *Server) putFaults(w http.ResponseWriter, r *http.Request) {
	if s.demosOff(w) {
		return
	}
	var req faultsRequest
	if _, problem := httpapi.Decode(r, &req); problem != nil {
		httpapi.WriteProblem(w, problem)
		return
	}
	f, err := s.api.faults(r.Context())
	if err != nil {
		s.upstream(w, r, "read provider faults", err)
		return
	}
	f.AmbiguousRate = 0
	if req.Ambiguous {
		f.AmbiguousRate = 1
	}
	f, err = s.api.setFaults(r.Context(), f)
	var se *statusError
	if errors.As(err, &se) && se.Status == http.StatusForbidden {
		httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusForbidden, "admin-disabled", "Provider admin disabled",
			"the email provider refuses PUT /admin/faults: start it with EMAILPROVIDER_ADMIN=1, and give the storefront's key the admin scope in its EMAILPROVIDER_API_KEYS"))
		return
	}
	if err != nil {
		s.upstream(w, r, "set provider faults", err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, f)
}

// relayState is the answer of GET /api/demos/relay and POST /api/demos/relay/pause.
type relayState struct {
	// Pausable: the storefront was given the pid of an `ordering relay` process.
	Pausable bool       `json:"pausable"`
	Paused   bool       `json:"paused"`
	Until    *time.Time `json:"until,omitempty"` // when a running pause ends
	Seconds  float64    `json:"seconds"`         // how long a pause lasts
}

func (s *Server) relayState() relayState {
	if s.relay == nil {
		return relayState{}
	}
	st := relayState{Pausable: true, Seconds: s.relay.For.Seconds()}
	if until := s.relay.Until(); !until.IsZero() {
		st.Paused, st.Until = true, &until
	}
	return st
}

func (s *Server) getRelay(w http.ResponseWriter, r *http.Request) {
	if s.demosOff(w) {
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, s.relayState())
}

// relayPauseRequest is the pause's body: an empty JSON object, since the panel's POST is
// application/json as every POST here.
type relayPauseRequest struct{}

func (s *Server) pauseRelay(w http.ResponseWriter, r *http.Request) {
	if s.demosOff(w) {
		return
	}
	var req relayPauseRequest
	if _, problem := httpapi.Decode(r, &req); problem != nil {
		httpapi.WriteProblem(w, problem)
		return
	}
	if s.relay == nil {
		httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusForbidden, "relay-not-apart", "No relay process to pause",
			"the relay runs inside ordering's API process: start `ordering relay` as a process of its own beside ordering with ORDERING_RELAY=0 and give its pid in STOREFRONT_RELAY_PID (STOREFRONT_DEMOS=1 make run does)"))
		return
	}
	until, err := s.relay.Freeze()
	switch {
	case errors.Is(err, errAlreadyFrozen):
		httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusConflict, "relay-paused", "The relay is paused already",
			"it continues at "+until.UTC().Format(time.TimeOnly)+" UTC; one pause at a time"))
		return
	case errors.Is(err, errNotTheRelay):
		// The log, not the answer, says which process it is: its command line is another
		// program's arguments, which a client of the page has no business reading.
		s.tel.Logger.WarnContext(r.Context(), "relay pause refused", "err", err)
		httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusConflict, "not-the-relay", "Not an ordering relay",
			"STOREFRONT_RELAY_PID names a process that is not `ordering relay`; the storefront's log says which"))
		return
	case err != nil:
		s.tel.Logger.ErrorContext(r.Context(), "pause the relay failed", "err", err)
		httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusServiceUnavailable, "unavailable", "The relay could not be paused",
			"the storefront could not signal the relay process; its log says why"))
		return
	}
	s.tel.Logger.InfoContext(r.Context(), "relay paused (SIGSTOP)", "until", until)
	httpapi.WriteJSON(w, http.StatusOK, s.relayState())
}

// seconds writes a duration as the panel says it: "15 s".
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + " s"
}

// upstream answers 503 for a service that failed or could not be reached: nothing the
// storefront did changed anything, and asking again is safe. The answer says what failed
// and the log why: the error names the service's internal URL, and a failed service's
// answer, neither of which the page's client should read.
func (s *Server) upstream(w http.ResponseWriter, r *http.Request, what string, err error) {
	s.tel.Logger.ErrorContext(r.Context(), what+" failed", "err", err)
	httpapi.WriteProblem(w, httpapi.NewProblem(http.StatusServiceUnavailable, "unavailable", "A service failed",
		what+" failed: a service behind the storefront did not answer as expected; asking again is safe"))
}
