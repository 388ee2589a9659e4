package team

import (
	"errors"
	"strings"
	"testing"

	"github.com/gantryhq/gantry/internal/fault"
)

func TestParse(t *testing.T) {
	for _, good := range []string{"vision", "nlp-2", "a", strings.Repeat("a", MaxLen)} {
		if n, err := Parse(good); err != nil || n.String() != good {
			t.Errorf("Parse(%q) = %q, %v", good, n, err)
		}
	}
	for _, bad := range []string{"", "Vision", "-vision", "vision-", "1team", "team_a", "team.a", "te am", strings.Repeat("a", MaxLen+1), "../etc", "vision\n"} {
		n, err := Parse(bad)
		var inv *fault.Invalid
		if !errors.As(err, &inv) || inv.Fields[0].Path != "team" || n != "" {
			t.Errorf("Parse(%q) = %q, %v; want a field error at team", bad, n, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"vision", "", "-a", "a-", "Ab", "a..b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		// Whatever is accepted is a DNS label usable in a namespace name.
		if len(n) == 0 || len(n) > MaxLen || strings.Trim(string(n), "abcdefghijklmnopqrstuvwxyz0123456789-") != "" || n[0] == '-' || n[len(n)-1] == '-' {
			t.Fatalf("accepted %q", n)
		}
	})
}
