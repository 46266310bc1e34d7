package api_test

import (
	"testing"

	"github.com/bookstore-go/bookstore/services/emailprovider/internal/emails"
	"github.com/bookstore-go/bookstore/services/platform/httpapi"
)

// A latency the server's write timeout cuts off would commit the email and lose the
// response: an ambiguous send nobody asked for.
func TestLatencyStaysBelowTheServersWriteTimeout(t *testing.T) {
	t.Parallel()
	if emails.MaxLatency >= httpapi.WriteTimeout {
		t.Fatalf("MaxLatency %v is not below the write timeout %v", emails.MaxLatency, httpapi.WriteTimeout)
	}
}
