package config

import (
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzEnvironmentValuesParseWithinBoundsOrNameTheVariable: whatever the environment
// holds, Parse does not panic; a value it accepts is within its variable's documented
// bounds (an Int is a positive integer, a Duration a positive duration, each exactly
// what strconv and time make of the text; an empty value is the default), and a value it
// refuses is reported with the variable's name and leaves the service unstarted.
func FuzzEnvironmentValuesParseWithinBoundsOrNameTheVariable(f *testing.F) {
	for _, seed := range [][4]string{
		{"12", "30s", "amqp://guest:guest@localhost:5672/", ""},
		{"", "", "", ""},
		{"0", "0s", "x", ""},
		{"-1", "-1s", "\x00", ""},
		{"99999999999999999999", "99999999999999999999h", "\xff", ""},
		{"0x10", "1e3s", "", ""},
		{"+5", "+5s", "", ""},
		{" 5", "5 s", "", ""},
		{"5\x00", "1.5h\x00", "", ""},
		{"1", "2562047h47m16.854775807s", "", ""},
		{"1", "2562047h47m16.854775808s", "", ""},
		{"1", ".s", "", ""},
		{"1", "1ns", "", "--help"},
		{"1", "1ns", "", "-x"},
		{"1", "1ns", "", "relay"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	f.Fuzz(func(t *testing.T, intValue, durValue, strValue, arg string) {
		env := map[string]string{"N": intValue, "D": durValue, "S": strValue}
		var n int
		var d time.Duration
		var s string
		vars := []Var{
			Int("N", "7", "a count", &n),
			Duration("D", "30s", "a wait", &d),
			String("S", "default", "a text", &s),
		}
		var args []string
		if arg != "" {
			args = []string{arg}
		}
		err := Parse("svc", args, func(name string) string { return env[name] }, io.Discard, vars)
		if errors.Is(err, ErrHelp) {
			return
		}
		if arg != "" && strings.HasPrefix(arg, "-") && err != nil && !strings.Contains(err.Error(), "N=") &&
			!strings.Contains(err.Error(), "D=") {
			return // a flag it does not know: refused before any variable is read
		}
		value := func(v, def string) string {
			if v == "" {
				return def
			}
			return v
		}
		iv, dv := value(intValue, "7"), value(durValue, "30s")
		want, ierr := strconv.Atoi(iv)
		intOK := ierr == nil && want > 0
		wantD, derr := time.ParseDuration(dv)
		durOK := derr == nil && wantD > 0
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		// A variable is named as N="<value>"; the quoting escapes any quote inside a
		// value, so one variable's value cannot pass for another's name (D="N=").
		namesN, namesD := strings.Contains(msg, "N="+strconv.Quote(iv)), strings.Contains(msg, "D="+strconv.Quote(dv))
		switch {
		case intOK && (n != want || namesN):
			t.Fatalf("N=%q: got %d, error %v; want %d", intValue, n, err, want)
		case !intOK && !namesN:
			t.Fatalf("N=%q: accepted as %d, or refused without naming it: %v", intValue, n, err)
		case durOK && (d != wantD || namesD):
			t.Fatalf("D=%q: got %v, error %v; want %v", durValue, d, err, wantD)
		case !durOK && !namesD:
			t.Fatalf("D=%q: accepted as %v, or refused without naming it: %v", durValue, d, err)
		case s != value(strValue, "default"):
			t.Fatalf("S=%q: got %q", strValue, s)
		case intOK && durOK && err != nil:
			t.Fatalf("every value is good, yet: %v", err)
		}
		if err == nil && (n <= 0 || d <= 0) {
			t.Fatalf("accepted N=%d D=%v", n, d)
		}
	})
}
