package harness

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/rs/zerolog"
)

// network is the run's Toxiproxy: a server inside this process, on a loopback port, with
// one proxy per link (one process talking to Postgres, RabbitMQ or the email provider,
// or the load's clients talking to ordering). Every service reaches its dependencies only
// through these proxies, so a fault on a link hits exactly that process's connections.
type network struct {
	server *toxiproxy.ApiServer
	api    string // the server's address
	client *toxiclient.Client

	mu    sync.Mutex
	links map[string]*link
}

// link is one process's way to one dependency: a proxy per upstream host. A dependency
// of several hosts (the cluster profile: every broker node, a primary and its standby)
// is one link of several proxies, and a fault on the link strikes them all, as a fault
// of the process's network would.
type link struct {
	mu       sync.Mutex // the client's Proxy is not safe for concurrent Save
	proxies  []*toxiclient.Proxy
	disabled int // nested link-down faults
}

// startNetwork runs the Toxiproxy API server in this process, logging errors to log.
func startNetwork(log *os.File) (*network, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// Errors only: at warn, Toxiproxy logs every connection a fault closes.
	logger := zerolog.New(log).Level(zerolog.ErrorLevel).With().Timestamp().Logger()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), logger)
	go func() {
		if err := server.Listen(addr); err != nil {
			fmt.Fprintf(log, "toxiproxy server: %v\n", err)
		}
	}()
	n := &network{server: server, api: addr, client: toxiclient.NewClient("http://" + addr), links: map[string]*link{}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := n.client.Version(); err == nil {
			return n, nil
		} else if time.Now().After(deadline) {
			return nil, fmt.Errorf("toxiproxy server on %s did not start: %w", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// AddLink creates a proxy named name in front of upstream and returns the address to dial
// instead.
func (n *network) AddLink(name, upstream string) (string, error) {
	addrs, err := n.AddLinkGroup(name, []string{upstream})
	if err != nil {
		return "", err
	}
	return addrs[0], nil
}

// AddLinkGroup creates the link name with a proxy in front of each upstream (named
// name, name.2, name.3 in Toxiproxy) and returns the addresses to dial instead, in the
// upstreams' order.
func (n *network) AddLinkGroup(name string, upstreams []string) ([]string, error) {
	l := &link{}
	var addrs []string
	for i, upstream := range upstreams {
		listen, err := freeAddr()
		if err != nil {
			return nil, err
		}
		proxyName := name
		if i > 0 {
			proxyName = fmt.Sprintf("%s.%d", name, i+1) // not #: the client puts the name in a URL path
		}
		p, err := n.client.CreateProxy(proxyName, listen, upstream)
		if err != nil {
			return nil, fmt.Errorf("create proxy %s: %w", proxyName, err)
		}
		l.proxies = append(l.proxies, p)
		addrs = append(addrs, p.Listen)
	}
	n.mu.Lock()
	n.links[name] = l
	n.mu.Unlock()
	return addrs, nil
}

// LinkNames lists the links' names.
func (n *network) LinkNames() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	names := make([]string, 0, len(n.links))
	for name := range n.links {
		names = append(names, name)
	}
	return names
}

func (n *network) link(name string) (*link, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	l, ok := n.links[name]
	if !ok {
		return nil, fmt.Errorf("no link %q", name)
	}
	return l, nil
}

// ErrLinkBusy is AddToxic's answer when Toxiproxy did not add the toxic in time: the
// link holds data its far end does not read (a process frozen by a queue fault). No
// toxic of that name is left on the link.
var ErrLinkBusy = errors.New("toxiproxy did not answer within 25 s: the link's far end reads nothing")

// toxicRemoveLimit bounds how long RemoveToxic keeps asking. Toxiproxy answers a request
// that takes longer than 25 s with a timeout page while the request goes on, and taking
// a latency toxic off waits until the data it holds is written: for as long as the
// process at the link's end is frozen.
const toxicRemoveLimit = 2 * time.Minute

// AddToxic puts a toxic of type typ on a link until RemoveToxic, in the direction
// toxicStream gives it.
func (n *network) AddToxic(linkName, toxicName, typ string, attrs toxiclient.Attributes) error {
	stream := toxicStream(typ)
	l, err := n.link(linkName)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for i, p := range l.proxies {
		_, err := p.AddToxic(toxicName, typ, stream, 1, attrs)
		if err != nil && !isAPIError(err) {
			// The timeout page: the add may still complete. The proxy's toxics are read
			// under the lock the add holds, so they show whether it did. The link's
			// proxies before this one have the toxic: it comes off them too.
			var rerrs []error
			for _, q := range l.proxies[:i+1] {
				rerrs = append(rerrs, removeToxicEventually(q, toxicName))
			}
			if rerr := errors.Join(rerrs...); rerr != nil {
				return errors.Join(err, rerr)
			}
			return fmt.Errorf("%w (%v)", ErrLinkBusy, err)
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// toxicStream is the direction a toxic of type typ acts on: latency on what the process
// sends (upstream), every other type on what it receives (downstream). A latency toxic
// holds what passes it in a buffer of 1024 chunks, and Toxiproxy takes one off by
// writing its buffer on, waiting up to 5 s a chunk, under the proxy's lock: downstream,
// toward a process that reads nothing (frozen by a queue fault, or killed), that took
// minutes, and every new connection through the proxy waited for it. Upstream, the far
// end is Postgres or RabbitMQ, which always reads, and a round trip is as slow either
// way.
func toxicStream(typ string) string {
	if typ == "latency" {
		return "upstream"
	}
	return "downstream"
}

// RemoveToxic takes a toxic off a link, asking again until Toxiproxy has (see
// toxicRemoveLimit).
func (n *network) RemoveToxic(linkName, toxicName string) error {
	l, err := n.link(linkName)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var errs []error
	for _, p := range l.proxies {
		errs = append(errs, removeToxicEventually(p, toxicName))
	}
	return errors.Join(errs...)
}

// removeToxicEventually takes toxic name off p, or finds it gone, within
// toxicRemoveLimit.
func removeToxicEventually(p *toxiclient.Proxy, name string) error {
	deadline := time.Now().Add(toxicRemoveLimit)
	for {
		toxics, err := p.Toxics()
		if err == nil && !slices.ContainsFunc(toxics, func(t toxiclient.Toxic) bool { return t.Name == name }) {
			return nil
		}
		if err == nil {
			err = p.RemoveToxic(name)
			var api *toxiclient.ApiError
			if err == nil || errors.As(err, &api) && api.Status == http.StatusNotFound {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("toxic %s still on %s after %v: %w", name, p.Name, toxicRemoveLimit, err)
		}
		time.Sleep(time.Second)
	}
}

// isAPIError reports whether err is Toxiproxy's own answer (a refusal), rather than its
// timeout page or a broken request.
func isAPIError(err error) bool {
	var api *toxiclient.ApiError
	return errors.As(err, &api)
}

// Down disables a link: every connection through it is dropped and new ones refused,
// until as many up calls as down calls have been made.
func (n *network) Down(linkName string) error {
	l, err := n.link(linkName)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.disabled++
	if l.disabled > 1 {
		return nil
	}
	var errs []error
	for _, p := range l.proxies {
		errs = append(errs, p.Disable())
	}
	return errors.Join(errs...)
}

// Up enables a link again once every fault that took it down has ended.
func (n *network) Up(linkName string) error {
	l, err := n.link(linkName)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.disabled == 0 {
		return nil
	}
	l.disabled--
	if l.disabled > 0 {
		return nil
	}
	var errs []error
	for _, p := range l.proxies {
		errs = append(errs, p.Enable())
	}
	return errors.Join(errs...)
}

// Heal removes every toxic and enables every link: the network as it was at the start.
func (n *network) Heal() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, l := range n.links {
		l.mu.Lock()
		l.disabled = 0
		l.mu.Unlock()
	}
	return n.client.ResetState()
}

// close stops the Toxiproxy server and with it every proxy.
func (n *network) close() {
	_ = n.client.ResetState()
	for _, name := range n.LinkNames() {
		if l, err := n.link(name); err == nil {
			for _, p := range l.proxies {
				_ = p.Delete()
			}
		}
	}
	_ = n.server.Shutdown()
}
