package projected_test

import (
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/projected"
)

func jwt(payload string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(payload)) + ".sig"
}

func TestPeek(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	c, err := projected.Peek(jwt(`{"aud":["gantry-run","x"],"exp":1800000060,"kubernetes.io":{"namespace":"ns","pod":{"name":"p","uid":"u"}}}`))
	if err != nil || !c.For("gantry-run") || c.For("gantry") || c.Pod != "p" || c.Namespace != "ns" || !c.Live(now) || c.Live(now.Add(time.Minute)) {
		t.Fatalf("a projected token: %+v %v", c, err)
	}
	if c, err := projected.Peek(jwt(`{"aud":"gantry"}`)); err != nil || !c.For("gantry") || c.Live(now) || c.Pod != "" || c.Namespace != "" {
		t.Fatalf("one audience as a string, no expiry, no pod: %+v %v", c, err)
	}
	for _, bad := range []string{"gnt_abc", "a.b", "a.!!!.c", jwt(`not json`), jwt(`["aud"]`)} {
		if _, err := projected.Peek(bad); !errors.Is(err, projected.ErrNotJWT) {
			t.Errorf("%q: %v, want ErrNotJWT", bad, err)
		}
	}
}
