package deploy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/bookstore-go/bookstore/services/contracts"
	"github.com/bookstore-go/bookstore/services/platform/broker"
	"github.com/bookstore-go/bookstore/testenv"
)

const definitionsFile = "deploy/rabbitmq/definitions.json"

type definitions struct {
	Users            []defUser               `json:"users"`
	Vhosts           []struct{ Name string } `json:"vhosts"`
	Permissions      []defPermission         `json:"permissions"`
	TopicPermissions []defTopicPermission    `json:"topic_permissions"`
	Exchanges        []defExchange           `json:"exchanges"`
	Queues           []defQueue              `json:"queues"`
	Bindings         []defBinding            `json:"bindings"`
	Policies         []defPolicy             `json:"policies"`
}

// defPolicy is a policy of the file: broker.Policy and its vhost.
type defPolicy struct {
	Vhost string `json:"vhost"`
	broker.Policy
}

type defUser struct {
	Name             string   `json:"name"`
	PasswordHash     string   `json:"password_hash"`
	HashingAlgorithm string   `json:"hashing_algorithm"`
	Tags             []string `json:"tags"`
}

// hasPassword reports whether pw hashes to the user's password_hash the way RabbitMQ's
// rabbit_password_hashing_sha256 does: base64(salt ++ sha256(salt ++ password)), with a
// 4-byte salt.
func (u defUser) hasPassword(pw string) bool {
	raw, err := base64.StdEncoding.DecodeString(u.PasswordHash)
	if err != nil || len(raw) != 4+sha256.Size || u.HashingAlgorithm != "rabbit_password_hashing_sha256" {
		return false
	}
	sum := sha256.Sum256(append(slices.Clone(raw[:4]), pw...))
	return bytes.Equal(sum[:], raw[4:])
}

type defPermission struct {
	User      string `json:"user"`
	Vhost     string `json:"vhost"`
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
}

type defTopicPermission struct {
	User     string `json:"user"`
	Vhost    string `json:"vhost"`
	Exchange string `json:"exchange"`
	Write    string `json:"write"`
	Read     string `json:"read"`
}

type defExchange struct {
	Name       string         `json:"name"`
	Vhost      string         `json:"vhost,omitempty"`
	Type       string         `json:"type"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Internal   bool           `json:"internal"`
	Arguments  map[string]any `json:"arguments"`
}

type defQueue struct {
	Name       string         `json:"name"`
	Vhost      string         `json:"vhost,omitempty"`
	Durable    bool           `json:"durable"`
	AutoDelete bool           `json:"auto_delete"`
	Arguments  map[string]any `json:"arguments"`
}

type defBinding struct {
	Source          string         `json:"source"`
	Vhost           string         `json:"vhost,omitempty"`
	Destination     string         `json:"destination"`
	DestinationType string         `json:"destination_type"`
	RoutingKey      string         `json:"routing_key"`
	Arguments       map[string]any `json:"arguments"`
}

func readDefinitions(t testing.TB) definitions {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot(t), definitionsFile))
	if err != nil {
		t.Fatal(err)
	}
	var d definitions
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", definitionsFile, err)
	}
	return d
}

func definitionUsers(t testing.TB) map[string]defUser {
	t.Helper()
	users := map[string]defUser{}
	for _, u := range readDefinitions(t).Users {
		users[u.Name] = u
	}
	return users
}

// asJSON turns AMQP arguments into what JSON decoding yields (numbers as float64), so the
// platform's tables and the file's objects compare with reflect.DeepEqual.
func asJSON(t testing.TB, v any) map[string]any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The topology the services declare (broker.DeclareTopology), in the file's terms.
func wantTopology(t testing.TB) ([]defExchange, []defQueue, []defBinding) {
	exchanges := []defExchange{
		{Name: contracts.Exchange, Type: "topic", Durable: true, Arguments: map[string]any{}},
		{Name: contracts.DeadLetterExchange, Type: "direct", Durable: true, Arguments: map[string]any{}},
	}
	var queues []defQueue
	var bindings []defBinding
	for _, q := range contracts.Topology.Queues {
		queues = append(queues,
			defQueue{Name: q.Name, Durable: true, Arguments: asJSON(t, contracts.Topology.QueueArgs(q))},
			defQueue{Name: q.DLQ(), Durable: true, Arguments: asJSON(t, broker.DLQArgs())})
		for _, key := range q.Bindings {
			bindings = append(bindings, defBinding{Source: contracts.Exchange, Destination: q.Name, DestinationType: "queue", RoutingKey: key, Arguments: map[string]any{}})
		}
		bindings = append(bindings, defBinding{Source: contracts.DeadLetterExchange, Destination: q.DLQ(), DestinationType: "queue", RoutingKey: q.Name, Arguments: map[string]any{}})
	}
	return normalize(exchanges, queues, bindings)
}

// normalize sorts and drops vhosts, so two views of one topology compare equal.
func normalize(ex []defExchange, qs []defQueue, bs []defBinding) ([]defExchange, []defQueue, []defBinding) {
	ex, qs, bs = slices.Clone(ex), slices.Clone(qs), slices.Clone(bs)
	for i := range ex {
		ex[i].Vhost = ""
	}
	for i := range qs {
		qs[i].Vhost = ""
	}
	for i := range bs {
		bs[i].Vhost = ""
	}
	sort.Slice(ex, func(i, j int) bool { return ex[i].Name < ex[j].Name })
	sort.Slice(qs, func(i, j int) bool { return qs[i].Name < qs[j].Name })
	sort.Slice(bs, func(i, j int) bool { return fmt.Sprint(bs[i]) < fmt.Sprint(bs[j]) })
	return ex, qs, bs
}

func compareTopology(t testing.TB, what string, gotEx []defExchange, gotQ []defQueue, gotB []defBinding, wantEx []defExchange, wantQ []defQueue, wantB []defBinding) {
	t.Helper()
	gotEx, gotQ, gotB = normalize(gotEx, gotQ, gotB)
	if !reflect.DeepEqual(gotEx, wantEx) {
		t.Errorf("%s exchanges:\n got %+v\nwant %+v", what, gotEx, wantEx)
	}
	if !reflect.DeepEqual(gotQ, wantQ) {
		t.Errorf("%s queues:\n got %+v\nwant %+v", what, gotQ, wantQ)
	}
	if !reflect.DeepEqual(gotB, wantB) {
		t.Errorf("%s bindings:\n got %+v\nwant %+v", what, gotB, wantB)
	}
}

// TestDefinitionsMatchTopology compares the file with the platform's topology tables.
func TestDefinitionsMatchTopology(t *testing.T) {
	t.Parallel()
	d := readDefinitions(t)
	wantEx, wantQ, wantB := wantTopology(t)
	compareTopology(t, definitionsFile, d.Exchanges, d.Queues, d.Bindings, wantEx, wantQ, wantB)
	for _, q := range d.Queues {
		if q.Vhost != "/" {
			t.Errorf("queue %s in vhost %q, want /", q.Name, q.Vhost)
		}
	}
	if len(d.Vhosts) != 1 || d.Vhosts[0].Name != "/" {
		t.Errorf("vhosts %v, want only /", d.Vhosts)
	}
	// The dead-letter queues' delivery limit is the policy's, not an argument of theirs.
	want := defPolicy{Vhost: "/", Policy: broker.DeadLetterPolicy()}
	if len(d.Policies) != 1 || !reflect.DeepEqual(asJSON(t, d.Policies[0]), asJSON(t, want)) {
		t.Errorf("policies %+v, want only %+v", d.Policies, want)
	}

	// One user per service that talks to the broker, plus an administrator; each with
	// permissions in / only.
	users := map[string]defUser{}
	for _, u := range d.Users {
		users[u.Name] = u
	}
	for _, name := range []string{"ordering", "inventory", "notification"} {
		if u, ok := users[name]; !ok || len(u.Tags) != 0 {
			t.Errorf("user %s: %+v, want a user with no management tags", name, u)
		}
	}
	if u, ok := users["admin"]; !ok || !slices.Contains(u.Tags, "administrator") || !u.hasPassword("admin") {
		t.Errorf("user admin: %+v, want an administrator with password admin (docs/docker.md says so)", u)
	}
	for _, p := range d.Permissions {
		if p.Vhost != "/" {
			t.Errorf("permission of %s on vhost %q, want /", p.User, p.Vhost)
		}
		if _, ok := users[p.User]; !ok {
			t.Errorf("permission for unknown user %s", p.User)
		}
	}
}

// management calls the RabbitMQ management API of the local broker as testenv does.
func management(t testing.TB, method, path string, body any) []byte {
	t.Helper()
	u, err := url.Parse(testenv.ManagementURL())
	if err != nil {
		t.Fatal(err)
	}
	user := u.User.Username()
	pw, _ := u.User.Password()
	u.User = nil
	var r io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, u.String()+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(user, pw)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %s %s", method, path, resp.Status, out)
	}
	return out
}

func vhostOf(t testing.TB, amqpURL string) string {
	u, err := url.Parse(amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(u.Path, "/")
}

// brokerView is the management API's view of a vhost's exchanges, queues and bindings,
// without the defaults every vhost has (amq.*, the nameless exchange and its bindings).
func brokerView(t testing.TB, vhost string) ([]defExchange, []defQueue, []defBinding) {
	t.Helper()
	v := url.PathEscape(vhost)
	var ex []defExchange
	var qs []defQueue
	var bs []defBinding
	for path, dst := range map[string]any{"/api/exchanges/" + v: &ex, "/api/queues/" + v: &qs, "/api/bindings/" + v: &bs} {
		if err := json.Unmarshal(management(t, http.MethodGet, path, nil), dst); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	ex = slices.DeleteFunc(ex, func(e defExchange) bool { return e.Name == "" || strings.HasPrefix(e.Name, "amq.") })
	bs = slices.DeleteFunc(bs, func(b defBinding) bool { return b.Source == "" })
	for i := range bs {
		if bs[i].Arguments == nil {
			bs[i].Arguments = map[string]any{}
		}
	}
	return ex, qs, bs
}

func declareTopology(t testing.TB, amqpURL string) error {
	t.Helper()
	return declare(amqpURL, contracts.Topology)
}

// declare declares topo on a connection of its own to amqpURL, as a service does.
func declare(amqpURL string, topo broker.Topology) error {
	conn, ch, err := dialChannel(amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	return topo.Declare(ch, conn.Channel)
}

// importTopology loads the file's exchanges, queues and bindings into vhost, as the
// broker of docker compose does at boot.
func importTopology(t testing.TB, d definitions, vhost string) {
	t.Helper()
	management(t, http.MethodPost, "/api/definitions/"+url.PathEscape(vhost), map[string]any{
		"exchanges": d.Exchanges, "queues": d.Queues, "bindings": d.Bindings,
	})
}

// TestDefinitionsOnBroker runs both sides on the real broker. In one fresh vhost the file
// is imported first and the services' DeclareTopology runs after it, as in docker compose:
// RabbitMQ refuses a redeclaration with different arguments (PRECONDITION_FAILED), so
// this is the failure a newcomer would meet at `make up`. In a second vhost only the
// services declare. The management API's view of both must be the file.
func TestDefinitionsOnBroker(t *testing.T) {
	t.Parallel()
	d := readDefinitions(t)
	wantEx, wantQ, wantB := normalize(d.Exchanges, d.Queues, d.Bindings)

	imported := testenv.VHost(t)
	importTopology(t, d, vhostOf(t, imported))
	if err := declareTopology(t, imported); err != nil {
		t.Fatalf("services declaring after the definitions import: %v", err)
	}
	gotEx, gotQ, gotB := brokerView(t, vhostOf(t, imported))
	compareTopology(t, "import + DeclareTopology", gotEx, gotQ, gotB, wantEx, wantQ, wantB)

	declared := testenv.VHost(t)
	if err := declareTopology(t, declared); err != nil {
		t.Fatal(err)
	}
	gotEx, gotQ, gotB = brokerView(t, vhostOf(t, declared))
	compareTopology(t, "DeclareTopology alone", gotEx, gotQ, gotB, wantEx, wantQ, wantB)
}

// TestDefinitionsPermissions gives temporary users the file's password hashes and
// permissions in a fresh vhost and checks, on the real broker, that each service can do
// what it does (log in with its compose password, declare its own part of the topology,
// consume its own queue, publish its own events through broker.Publisher, which binds the
// queues those events are bound to) and nothing more: declare, delete, purge, bind or
// unbind another service's queue or dead-letter queue, except binding and unbinding the
// queues its own events are bound to (docs/security.md), declare the whole topology,
// consume another service's queue or any dead-letter queue, publish another service's
// events. A second fresh vhost, with nothing imported, checks that each service can
// declare its part from nothing, as after a broker that lost its definitions.
func TestDefinitionsPermissions(t *testing.T) {
	t.Parallel()
	d := readDefinitions(t)
	compose := loadCompose(t, nil, composeFile)
	amqpURL := testenv.VHost(t)
	vhost := vhostOf(t, amqpURL)
	importTopology(t, d, vhost)
	empty := testenv.VHost(t)

	own := map[string]broker.Topology{
		"ordering":     contracts.OrderingTopology,
		"inventory":    contracts.InventoryTopology,
		"notification": contracts.NotificationTopology,
	}
	publishes := map[string][]string{ // routing keys each service publishes
		"ordering":  {"ordering.order-placed.v1", "ordering.order-placed.v2", "ordering.order-cancelled.v1"},
		"inventory": {"inventory.stock-reserved.v1", "inventory.stock-rejected.v1", "inventory.stock-released.v1"},
	}
	feeds := func(service string) map[string][]string { // queue: the keys of service's events bound to it
		out := map[string][]string{}
		for _, q := range contracts.Topology.Queues {
			for _, key := range q.Bindings {
				if slices.Contains(publishes[service], key) {
					out[q.Name] = append(out[q.Name], key)
				}
			}
		}
		return out
	}
	allKeys := []string{"ordering.order-placed.v1", "ordering.order-placed.v2", "ordering.order-cancelled.v1", "inventory.stock-reserved.v1", "inventory.stock-rejected.v1", "inventory.stock-released.v1"}
	for service, topo := range own {
		t.Run(service, func(t *testing.T) {
			if len(topo.Queues) != 1 {
				t.Fatalf("%s declares %d queues, the test expects one", service, len(topo.Queues))
			}
			queue := topo.Queues[0]
			login := serviceUserURL(t, d, compose, amqpURL, service)
			if err := declare(login, topo); err != nil {
				t.Fatalf("log in with compose's password and declare its own topology: %v", err)
			}
			if err := declare(serviceUserURL(t, d, compose, empty, service), topo); err != nil {
				t.Errorf("declare its own topology in an empty vhost: %v", err)
			}
			if err := declare(login, contracts.PublisherTopology); err != nil {
				t.Errorf("declare the exchanges: %v", err)
			}
			if err := declare(login, contracts.Topology); !isAccessRefused(err) {
				t.Errorf("declare the whole topology: %v, want access refused", err)
			}
			if keys := publishes[service]; len(keys) > 0 {
				conn := broker.NewConn(login, "permissions")
				pub := broker.NewPublisher(conn, contracts.Topology, 10*time.Second)
				var msgs []broker.Message
				for i, key := range keys {
					msgs = append(msgs, broker.Message{RoutingKey: key, Publishing: amqp.Publishing{
						MessageId: fmt.Sprintf("00000000-0000-7000-8000-%012d", i), Body: []byte("permission probe")}})
				}
				for i, err := range pub.PublishBatch(context.Background(), msgs) {
					if err != nil {
						t.Errorf("publish its own %s through broker.Publisher, which binds its queues: %v", keys[i], err)
					}
				}
				pub.Close()
				_ = conn.Close()
			}
			fed := feeds(service)
			for _, q := range contracts.Topology.Queues {
				err := tryConsume(login, q.Name)
				if q.Name == queue.Name && err != nil {
					t.Errorf("consume its own queue %s: %v", q.Name, err)
				}
				if q.Name != queue.Name && !isAccessRefused(err) {
					t.Errorf("consume %s: %v, want access refused", q.Name, err)
				}
				if q.Name != queue.Name {
					if err := tryConsume(login, q.DLQ()); !isAccessRefused(err) {
						t.Errorf("consume %s: %v, want access refused", q.DLQ(), err)
					}
				}
				if q.Name == queue.Name {
					continue
				}
				other := contracts.Topology.Subset(q.Name)
				refused := map[string]func(*amqp.Channel) error{
					"declare " + q.Name: func(ch *amqp.Channel) error {
						_, err := ch.QueueDeclare(q.Name, true, false, false, false, contracts.Topology.QueueArgs(q))
						return err
					},
					"declare " + q.DLQ(): func(ch *amqp.Channel) error {
						_, err := ch.QueueDeclare(q.DLQ(), true, false, false, false, broker.DLQArgs())
						return err
					},
					"declare " + q.Name + "'s topology": func(*amqp.Channel) error { return declare(login, other) },
					"delete " + q.Name: func(ch *amqp.Channel) error {
						_, err := ch.QueueDelete(q.Name, false, false, false)
						return err
					},
					"delete " + q.DLQ(): func(ch *amqp.Channel) error {
						_, err := ch.QueueDelete(q.DLQ(), false, false, false)
						return err
					},
					"purge " + q.Name: func(ch *amqp.Channel) error {
						_, err := ch.QueuePurge(q.Name, false)
						return err
					},
					"bind " + q.Name + " to another key": func(ch *amqp.Channel) error {
						return ch.QueueBind(q.Name, "inventory.stock-reserved.v1", contracts.Exchange, false, nil)
					},
					"unbind " + q.Name: func(ch *amqp.Channel) error {
						return ch.QueueUnbind(q.Name, q.Bindings[0], contracts.Exchange, nil)
					},
					"unbind " + q.DLQ(): func(ch *amqp.Channel) error {
						return ch.QueueUnbind(q.DLQ(), q.Name, contracts.DeadLetterExchange, nil)
					},
				}
				if keys, ok := fed[q.Name]; ok {
					// The publisher binds the queues its events need; the same right lets it
					// bind and unbind them under any key it may read.
					delete(refused, "bind "+q.Name+" to another key")
					delete(refused, "unbind "+q.Name)
					for _, key := range keys {
						if err := tryOp(login, func(ch *amqp.Channel) error {
							return ch.QueueBind(q.Name, key, contracts.Exchange, false, nil)
						}); err != nil {
							t.Errorf("bind %s to its own %s: %v", q.Name, key, err)
						}
					}
				}
				for what, op := range refused {
					if err := tryOp(login, op); !isAccessRefused(err) {
						t.Errorf("%s: %v, want access refused", what, err)
					}
				}
			}
			for _, key := range allKeys {
				err := tryPublish(login, key)
				if slices.Contains(publishes[service], key) && err != nil {
					t.Errorf("publish its own %s: %v", key, err)
				}
				if !slices.Contains(publishes[service], key) && !isAccessRefused(err) {
					t.Errorf("publish %s: %v, want access refused", key, err)
				}
			}
		})
	}
}

// TestServiceTopologiesCoverTheSystem checks that the services' own topologies, which
// the definitions file's permissions follow, together declare the whole of it, each
// queue once: a queue no service declared would exist only under docker compose.
func TestServiceTopologiesCoverTheSystem(t *testing.T) {
	t.Parallel()
	var got []broker.Queue
	for _, topo := range []broker.Topology{contracts.OrderingTopology, contracts.InventoryTopology, contracts.NotificationTopology} {
		if topo.Exchange != contracts.Exchange || topo.DeadLetterExchange != contracts.DeadLetterExchange {
			t.Errorf("topology %+v: want the exchanges %s and %s", topo, contracts.Exchange, contracts.DeadLetterExchange)
		}
		got = append(got, topo.Queues...)
	}
	byName := func(a, b broker.Queue) int { return strings.Compare(a.Name, b.Name) }
	want := slices.Clone(contracts.Topology.Queues)
	slices.SortFunc(got, byName)
	slices.SortFunc(want, byName)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the services declare %+v, the system is %+v", got, want)
	}
	if len(contracts.PublisherTopology.Queues) != 0 {
		t.Errorf("publishers declare queues %+v, want the exchanges alone", contracts.PublisherTopology.Queues)
	}
}

// serviceUserURL creates a temporary user on the local broker with the password hash,
// permissions and topic permissions the definitions file gives service, scoped to the
// vhost of amqpURL, and returns amqpURL logged in as that user with the password from
// the service's AMQP_URL in docker-compose.yml.
func serviceUserURL(t testing.TB, d definitions, compose *types.Project, amqpURL, service string) string {
	t.Helper()
	vhost := vhostOf(t, amqpURL)
	var user *defUser
	for _, u := range d.Users {
		if u.Name == service {
			user = &u
		}
	}
	if user == nil {
		t.Fatalf("no user %s in %s", service, definitionsFile)
	}
	composeURL, err := url.Parse(env(compose.Services[service], "AMQP_URL"))
	if err != nil {
		t.Fatal(err)
	}
	password, _ := composeURL.User.Password()

	name := testenv.Name("t_" + service)
	management(t, http.MethodPut, "/api/users/"+name, map[string]any{
		"password_hash": user.PasswordHash, "hashing_algorithm": user.HashingAlgorithm, "tags": "",
	})
	t.Cleanup(func() { management(t, http.MethodDelete, "/api/users/"+name, nil) })
	for _, p := range d.Permissions {
		if p.User == service {
			management(t, http.MethodPut, "/api/permissions/"+url.PathEscape(vhost)+"/"+name,
				map[string]string{"configure": p.Configure, "write": p.Write, "read": p.Read})
		}
	}
	for _, p := range d.TopicPermissions {
		if p.User == service {
			management(t, http.MethodPut, "/api/topic-permissions/"+url.PathEscape(vhost)+"/"+name,
				map[string]string{"exchange": p.Exchange, "write": p.Write, "read": p.Read})
		}
	}
	login, _ := url.Parse(amqpURL)
	login.User = url.UserPassword(name, password)
	return login.String()
}

func isAccessRefused(err error) bool {
	var amqpErr *amqp.Error
	return errors.As(err, &amqpErr) && amqpErr.Code == amqp.AccessRefused
}

// tryOp runs op on a channel of a connection of its own to amqpURL.
func tryOp(amqpURL string, op func(*amqp.Channel) error) error {
	conn, ch, err := dialChannel(amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	return op(ch)
}

func tryConsume(amqpURL, queue string) error {
	return tryOp(amqpURL, func(ch *amqp.Channel) error {
		_, err := ch.Consume(queue, "", false, false, false, false, nil)
		return err
	})
}

// dialChannel opens a connection to amqpURL and a channel on it.
func dialChannel(amqpURL string) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

// tryPublish publishes one persistent message with confirms; a refused publish closes
// the channel, which the wait for the confirm reports.
func tryPublish(amqpURL, key string) error {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Confirm(false); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, contracts.Exchange, key, false, false,
		amqp.Publishing{Body: []byte("permission probe"), DeliveryMode: amqp.Persistent})
	if err != nil {
		return err
	}
	var closeErr *amqp.Error
	select {
	case <-dc.Done():
		if dc.Acked() {
			return nil
		}
		// Not acked: the channel is closing, and its close frame says why.
		select {
		case closeErr = <-closed:
		case <-time.After(2 * time.Second):
		}
	case closeErr = <-closed:
	case <-ctx.Done():
		return ctx.Err()
	}
	if closeErr != nil {
		return closeErr
	}
	return errors.New("publish not confirmed")
}
