package httpapi

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Hosts is the set of names a server answers to, by the Host header of each request: the
// defence against DNS rebinding. A page on another origin (evil.example) can have its
// name resolve to 127.0.0.1 after it has loaded; the browser then takes the services on
// loopback for the page's own origin and lets it read their answers, but it still sends
// Host: evil.example. A server that answers only to its own names answers that page 421.
//
// A server always answers to localhost and every loopback address (127.0.0.0/8, ::1),
// which only a page served from this machine sends, and to the address the request
// arrived on (kubelet's probes and Prometheus name the pod's IP; no page but the
// service's own is served from it). The zero Hosts adds no other name; compose adds the
// service's name, k8s its Service's DNS names (HTTP_HOSTS).
//
// The port is not part of the check: the one a client names may be a published or a
// Service port that is not the one listened on, and the rebinding page cannot choose the
// name it sends, which is what the check is about.
type Hosts struct {
	names map[string]bool
}

// ParseHosts reads a comma-separated list of host names and IP literals (an IPv6 one in
// brackets), each with or without a port, which is ignored.
func ParseHosts(list string) (Hosts, error) {
	h := Hosts{names: map[string]bool{}}
	var errs []error
	for entry := range strings.SplitSeq(list, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		name, ok := HostName(entry)
		if !ok {
			errs = append(errs, fmt.Errorf("%q is not a host name or an IP address, with or without a port", entry))
			continue
		}
		h.names[name] = true
	}
	return h, errors.Join(errs...)
}

// Allows says whether a request with the Host header host, arrived on local (nil when
// unknown), is for this server.
func (h Hosts) Allows(host string, local net.Addr) bool {
	name, ok := HostName(host)
	if !ok {
		return false
	}
	ip, err := netip.ParseAddr(strings.Trim(name, "[]"))
	isIP := err == nil
	switch {
	case name == "localhost" || isIP && ip.Unmap().IsLoopback() || h.names[name]:
		return true
	}
	tcp, isTCP := local.(*net.TCPAddr)
	return isIP && isTCP && tcp != nil && ip.Unmap() == tcp.AddrPort().Addr().Unmap()
}

// HostName is the name a Host header (or an HTTP_HOSTS entry) names, without its port,
// lower case and without a trailing dot, an IPv6 address in brackets; ok is false when
// host is not a name or an IP literal, with at most a numeric port after it.
func HostName(host string) (name string, ok bool) {
	port := ""
	switch {
	case strings.HasPrefix(host, "["):
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return "", false
		}
		ip, err := netip.ParseAddr(host[1:end])
		if err != nil || !ip.Is6() || ip.Zone() != "" {
			return "", false
		}
		name, port = "["+ip.String()+"]", host[end+1:]
		if port != "" && port[0] != ':' {
			return "", false
		}
		port = strings.TrimPrefix(port, ":")
		if port == "" && strings.HasSuffix(host, ":") {
			return "", false
		}
	default:
		name = host
		if i := strings.IndexByte(host, ':'); i >= 0 {
			name, port = host[:i], host[i+1:]
			if port == "" {
				return "", false
			}
		}
		name = strings.ToLower(strings.TrimSuffix(name, "."))
		if !isHostName(name) {
			return "", false
		}
		if ip, err := netip.ParseAddr(name); err == nil {
			name = ip.String()
		}
	}
	if len(port) > 5 || strings.Trim(port, "0123456789") != "" {
		return "", false
	}
	return name, true
}

// isHostName says whether name is made of DNS labels (letters, digits, hyphens and the
// underscore some internal names carry), as an IPv4 address is too.
func isHostName(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// RequireHost answers 421 Misdirected Request, as a problem, to a request whose Host is
// not one of hosts' names (or the address it arrived on), and passes every other on to
// next. It runs before anything else, so a refused request reaches no handler, no span
// and no log line.
func RequireHost(hosts Hosts, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		if !hosts.Allows(r.Host, local) {
			WriteProblem(w, NewProblem(http.StatusMisdirectedRequest, "misdirected", "Misdirected request",
				"Host "+quoteHeader(r.Host)+" is not a name this service answers to (HTTP_HOSTS)"))
			return
		}
		next.ServeHTTP(w, r)
	})
}
