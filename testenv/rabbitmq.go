package testenv

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bookstore-go/bookstore/services/platform/broker"
)

// RabbitMQVersion is the version of the RabbitMQ the tests run on (TEST_AMQP_URL's, as
// its management API reports it): what a test reads before it asserts a fact of the
// broker that differs between versions, such as 4.0's default delivery limit.
type RabbitMQVersion struct{ Major, Minor, Patch int }

func (v RabbitMQVersion) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v is major.minor or later.
func (v RabbitMQVersion) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

var rabbitVersion struct {
	once sync.Once
	v    RabbitMQVersion
	err  error
}

// RabbitMQ returns the version of the tests' RabbitMQ, asked once per test binary. A
// broker that does not answer is Unavailable; one whose version does not parse fails the
// test: a test that cannot tell the versions apart must not guess.
func RabbitMQ(t testing.TB) RabbitMQVersion {
	t.Helper()
	rabbitVersion.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var overview struct {
			Version string `json:"rabbitmq_version"`
		}
		m := broker.Management{URL: servers.managementURL}
		if err := m.Do(ctx, http.MethodGet, "/api/overview", "", &overview); err != nil {
			rabbitVersion.err = err
			return
		}
		rabbitVersion.v, rabbitVersion.err = parseRabbitMQVersion(overview.Version)
	})
	if rabbitVersion.err != nil {
		Unavailable(t, "RabbitMQ management API", rabbitVersion.err)
	}
	return rabbitVersion.v
}

// parseRabbitMQVersion reads "4.0.5", and "4.1.0-rc.1" or "3.10.8+1.g0d5a" as their
// release's numbers.
func parseRabbitMQVersion(s string) (RabbitMQVersion, error) {
	core, _, _ := strings.Cut(s, "-")
	core, _, _ = strings.Cut(core, "+")
	parts := strings.Split(core, ".")
	if len(parts) != 3 {
		return RabbitMQVersion{}, fmt.Errorf("rabbitmq_version %q: want major.minor.patch", s)
	}
	var n [3]int
	for i, p := range parts {
		v, err := strconv.Atoi(p)
		if err != nil {
			return RabbitMQVersion{}, fmt.Errorf("rabbitmq_version %q: %w", s, err)
		}
		n[i] = v
	}
	return RabbitMQVersion{n[0], n[1], n[2]}, nil
}
