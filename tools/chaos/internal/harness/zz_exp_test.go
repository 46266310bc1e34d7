package harness

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
)

func TestZZServerSeesTheEndThroughTheOrphanProxy(t *testing.T) {
	log, _ := os.Create(filepath.Join(t.TempDir(), "toxiproxy.log"))
	n, err := startNetwork(log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.close)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	ended := make(chan time.Time, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				buf := make([]byte, 100)
				for {
					if _, err := c.Read(buf); err != nil {
						ended <- time.Now()
						c.Close()
						return
					}
					c.Write([]byte("ok"))
				}
			}()
		}
	}()
	for _, viaOrphan := range []bool{false, true} {
		for i, fault := range []string{"reset_peer", "timeout", "down", "latency-close", "reset_peer-up", "timeout-up"} {
			up := ln.Addr().String()
			if viaOrphan {
				p, _ := newOrphanProxy(up)
				up = p.addr()
			}
			name := "l" + string(rune('a'+i))
			if viaOrphan {
				name += "o"
			}
			addr, err := n.AddLink(name, up)
			if err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte("hi"))
			b := make([]byte, 2)
			c.Read(b)
			start := time.Now()
			switch fault {
			case "reset_peer":
				n.AddToxic(name, "t", "reset_peer", "downstream", toxiclient.Attributes{"timeout": 0})
				c.Write([]byte("hi"))
			case "reset_peer-up":
				n.AddToxic(name, "t", "reset_peer", "upstream", toxiclient.Attributes{"timeout": 0})
				c.Write([]byte("hi"))
			case "timeout":
				n.AddToxic(name, "t", "timeout", "downstream", toxiclient.Attributes{"timeout": 500})
				c.Write([]byte("hi"))
			case "timeout-up":
				n.AddToxic(name, "t", "timeout", "upstream", toxiclient.Attributes{"timeout": 500})
				c.Write([]byte("hi"))
			case "down":
				n.Down(name)
			case "latency-close":
				n.AddToxic(name, "t", "latency", "downstream", toxiclient.Attributes{"latency": 300})
				c.Close()
			}
			select {
			case at := <-ended:
				t.Logf("orphan=%v %s: server saw the end after %v", viaOrphan, fault, at.Sub(start))
			case <-time.After(4 * time.Second):
				t.Logf("orphan=%v %s: server did NOT see the end in 4s", viaOrphan, fault)
			}
			c.Close()
			n.RemoveToxic(name, "t")
			if fault == "down" {
				n.Up(name)
			}
			select {
			case at := <-ended:
				t.Logf("   ... after the client closed: %v", at.Sub(start))
			case <-time.After(2 * time.Second):
			}
		}
	}
}
