package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrNotFound is returned by Management.Do for a 404.
var ErrNotFound = errors.New("broker management: not found")

// Management is a client of RabbitMQ's HTTP management API. The services never need it;
// the tests, the demo and the chaos harness do, to give each run a virtual host of its
// own, since a system's topology fixes every exchange and queue name.
type Management struct {
	URL string // e.g. http://guest:guest@localhost:15672; the credentials are sent as basic auth
}

// Do sends one request to path (e.g. /api/vhosts/x); out, if not nil, receives the JSON
// answer.
func (m Management) Do(ctx context.Context, method, path, body string, out any) error {
	u, err := url.Parse(m.URL)
	if err != nil {
		return fmt.Errorf("broker management URL: %w", err)
	}
	user := u.User.Username()
	pw, _ := u.User.Password()
	u.User = nil
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimSuffix(u.String(), "/")+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.SetBasicAuth(user, pw)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%s %s: %w", method, path, ErrNotFound)
	}
	if resp.StatusCode >= 300 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %s %s", method, path, resp.Status, b)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// CreateVHost creates the virtual host name, if missing, as every broker of a system has
// it: with the DeadLetterPolicy, and with every permission on it for user.
func (m Management) CreateVHost(ctx context.Context, name, user string) error {
	vhost := url.PathEscape(name)
	if err := m.Do(ctx, http.MethodPut, "/api/vhosts/"+vhost, "{}", nil); err != nil {
		return fmt.Errorf("create vhost %s: %w", name, err)
	}
	perms := `{"configure":".*","write":".*","read":".*"}`
	if err := m.Do(ctx, http.MethodPut, "/api/permissions/"+vhost+"/"+url.PathEscape(user), perms, nil); err != nil {
		return fmt.Errorf("vhost %s permissions for %s: %w", name, user, err)
	}
	return m.PutPolicy(ctx, name, DeadLetterPolicy())
}

// PutPolicy sets p on the virtual host vhost, replacing a policy of the same name.
func (m Management) PutPolicy(ctx context.Context, vhost string, p Policy) error {
	body, err := json.Marshal(map[string]any{"pattern": p.Pattern, "apply-to": p.ApplyTo, "priority": p.Priority, "definition": p.Definition})
	if err != nil {
		return fmt.Errorf("policy %s: %w", p.Name, err)
	}
	if err := m.Do(ctx, http.MethodPut, "/api/policies/"+url.PathEscape(vhost)+"/"+url.PathEscape(p.Name), string(body), nil); err != nil {
		return fmt.Errorf("vhost %s policy %s: %w", vhost, p.Name, err)
	}
	return nil
}

// DeleteVHost deletes the virtual host name with everything in it; a missing one is no
// error.
func (m Management) DeleteVHost(ctx context.Context, name string) error {
	err := m.Do(ctx, http.MethodDelete, "/api/vhosts/"+url.PathEscape(name), "", nil)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("delete vhost %s: %w", name, err)
	}
	return nil
}

// User returns the user name in the management URL.
func (m Management) User() string {
	u, err := url.Parse(m.URL)
	if err != nil || u.User == nil {
		return ""
	}
	return u.User.Username()
}
