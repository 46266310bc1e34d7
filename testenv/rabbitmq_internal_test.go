package testenv

import "testing"

// The version a test branches on is read from what the management API reports, release
// candidates and builds included; anything else is an error, not a guess.
func TestTheRabbitMQVersionIsReadFromWhatTheManagementAPIReports(t *testing.T) {
	for in, want := range map[string]RabbitMQVersion{
		"3.10.8":          {3, 10, 8},
		"4.0.5":           {4, 0, 5},
		"4.1.0-rc.1":      {4, 1, 0},
		"3.13.7+1.g0d5a3": {3, 13, 7},
	} {
		got, err := parseRabbitMQVersion(in)
		if err != nil || got != want {
			t.Errorf("parseRabbitMQVersion(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "4", "4.0", "4.x.1", "four"} {
		if v, err := parseRabbitMQVersion(in); err == nil {
			t.Errorf("parseRabbitMQVersion(%q) = %v, want an error", in, v)
		}
	}
	if v := (RabbitMQVersion{4, 0, 5}); !v.AtLeast(4, 0) || !v.AtLeast(3, 13) || v.AtLeast(4, 1) {
		t.Errorf("4.0.5 AtLeast: wrong")
	}
	if v := (RabbitMQVersion{3, 10, 8}); v.AtLeast(4, 0) || !v.AtLeast(3, 10) {
		t.Errorf("3.10.8 AtLeast: wrong")
	}
}
