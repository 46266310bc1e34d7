package pgdb_test

import (
	"context"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/bookstore-go/bookstore/services/platform/pgdb"
	"github.com/bookstore-go/bookstore/testenv"
)

// docs/security.md says TLS to Postgres is a matter of the URL alone: sslmode=verify-full
// and the CA in sslrootcert. This holds it to that against the real server, whose
// certificate (Debian's snakeoil one here: self-signed, for localhost) is its own CA.
func TestAVerifyFullURLConnectsOverTLSAndRefusesAServerItCannotVerify(t *testing.T) {
	t.Parallel()
	admin, dbURL := testenv.Database(t, "pgdb_tls")
	cert := serverCertificate(t, admin)

	withTLS := func(host, mode string) string {
		u, err := url.Parse(dbURL)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = host + ":" + u.Port()
		q := u.Query()
		q.Set("sslmode", mode)
		q.Set("sslrootcert", cert)
		u.RawQuery = q.Encode()
		return u.String()
	}
	pool, err := pgdb.Open(context.Background(), admin, withTLS("localhost", "verify-full"))
	if err != nil {
		t.Fatalf("open with sslmode=verify-full: %v", err)
	}
	defer pool.Close()
	var encrypted bool
	if err := pool.QueryRow(context.Background(), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&encrypted); err != nil || !encrypted {
		t.Errorf("pg_stat_ssl.ssl = %v (%v), want the connection encrypted", encrypted, err)
	}

	// The certificate names localhost, not 127.0.0.1: verify-full must refuse what
	// verify-ca would take, or it verifies nothing an attacker in the middle could not fake.
	conn, err := pgx.Connect(context.Background(), withTLS("127.0.0.1", "verify-full"))
	if err == nil {
		conn.Close(context.Background())
		t.Fatal("verify-full connected to a server whose certificate names another host")
	}
	if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("verify-full to 127.0.0.1: %v, want a certificate error", err)
	}
	conn, err = pgx.Connect(context.Background(), withTLS("127.0.0.1", "verify-ca"))
	if err != nil {
		t.Fatalf("verify-ca to 127.0.0.1: %v, want it to trust the CA without the name", err)
	}
	conn.Close(context.Background())
}

// serverCertificate returns the path of the server's certificate, to be trusted as its
// own CA. The test needs a server with ssl=on and a certificate this process can read.
func serverCertificate(t *testing.T, admin string) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var ssl, certFile string
	if err := conn.QueryRow(context.Background(), "SELECT current_setting('ssl'), current_setting('ssl_cert_file')").Scan(&ssl, &certFile); err != nil {
		t.Fatal(err)
	}
	if ssl != "on" {
		t.Fatalf("the test Postgres runs with ssl=%s; TLS cannot be tested (this machine's server has ssl=on with a certificate for localhost)", ssl)
	}
	if _, err := os.Stat(certFile); err != nil {
		t.Fatalf("the server's certificate: %v", err)
	}
	return certFile
}
