package harness

import (
	"net"
	"testing"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
)

// Every link fault that ends a process's connection ends its session on the server too
// through the orphan proxy, as it did with Toxiproxy in front of Postgres alone: only
// Orphan keeps a server's side open.
func TestALinkFaultEndsTheServersSideThroughTheOrphanProxy(t *testing.T) {
	n := testNetwork(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ended := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 64)
				for {
					if _, err := c.Read(buf); err != nil {
						ended <- struct{}{}
						return
					}
					_, _ = c.Write([]byte("ok"))
				}
			}()
		}
	}()
	for i, fault := range []string{"reset_peer", "timeout", "link_down", "client_close"} {
		p, err := newOrphanProxy(ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer p.close()
		name := "link-" + string(rune('a'+i))
		addr, err := n.AddLink(name, p.addr())
		if err != nil {
			t.Fatal(err)
		}
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte("hi")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 2)); err != nil {
			t.Fatal(err)
		}
		switch fault {
		case "reset_peer":
			err = n.AddToxic(name, "t", "reset_peer", toxiclient.Attributes{"timeout": 0})
			_, _ = c.Write([]byte("hi"))
		case "timeout":
			err = n.AddToxic(name, "t", "timeout", toxiclient.Attributes{"timeout": 300})
			_, _ = c.Write([]byte("hi"))
		case "link_down":
			err = n.Down(name)
		case "client_close":
			err = c.Close()
		}
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ended:
		case <-time.After(3 * time.Second):
			t.Errorf("%s: the server's side still open 3 s later", fault)
		}
		_ = c.Close()
	}
}
